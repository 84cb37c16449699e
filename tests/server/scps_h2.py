"""scps_h2: a raw HTTP/2 client (python3-h2) that speaks just enough gRPC to
do what a stock client never does: leave a request unfinished, and leave an
answer unread (its flow-control window never opened)."""
import socket
import struct
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings


class Conn:
    """One HTTP/2 connection to host:port. window: the receive window this
    client grants per stream and to the connection (64 KiB - 1 is the
    protocol's initial value; it is never raised unless read_all asks)."""

    def __init__(self, host, port, window=65535, timeout=30):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.closed = False
        self.goaway = None
        cfg = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.h2 = h2.connection.H2Connection(config=cfg)
        self.h2.initiate_connection()
        self.h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.streams = {}  # stream id -> {"headers", "trailers", "data", "ended", "reset"}
        self.flush()

    def flush(self):
        """Sends what h2 has queued; a connection the server has closed
        (or refused) is marked closed."""
        out = self.h2.data_to_send()
        if out and not self.closed:
            try:
                self.sock.sendall(out)
            except OSError:
                self.closed = True

    def start(self, method, authority="scps"):
        """Opens a gRPC call's stream: its headers, no message yet."""
        sid = self.h2.get_next_available_stream_id()
        self.h2.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":path", method),
                                   (":authority", authority), ("content-type", "application/grpc"),
                                   ("te", "trailers")])
        self.streams[sid] = {"headers": None, "trailers": None, "data": 0, "ended": False, "reset": None}
        self.flush()
        return sid

    def send(self, sid, data, end=False):
        """Sends bytes of the stream's body as far as flow control lets it
        now; returns how many went."""
        sent = 0
        while sent < len(data) and not self.closed:
            room = min(self.h2.local_flow_control_window(sid), self.h2.max_outbound_frame_size)
            if room <= 0:
                break
            chunk = data[sent:sent + room]
            self.h2.send_data(sid, chunk)
            sent += len(chunk)
            self.flush()
        if end and sent == len(data):
            self.h2.end_stream(sid)
            self.flush()
        return sent

    def unary(self, method, message):
        """A whole unary request: headers, the length-prefixed message, end."""
        sid = self.start(method)
        body = struct.pack(">BI", 0, len(message)) + message
        at = 0
        while True:
            at += self.send(sid, body[at:], end=True)
            if at >= len(body):
                return sid
            self.pump(0.05)

    def announce(self, method, length, send_bytes, budget_s=30):
        """An unfinished request: headers, a message prefix announcing
        `length` bytes, then send_bytes of it (as fast as the server's
        window lets, for at most budget_s), never the rest."""
        sid = self.start(method)
        body = struct.pack(">BI", 0, length)
        at = self.send(sid, body)
        chunk = b"\0" * (1 << 20)
        left = send_bytes
        t_end = time.monotonic() + budget_s
        while left > 0 and time.monotonic() < t_end and not self.closed:
            n = self.send(sid, chunk[:min(left, len(chunk))])
            left -= n
            if n == 0:
                self.pump(0.05)
        return sid, send_bytes - left

    def pump(self, timeout):
        """Reads what the server sent within timeout seconds and handles it
        (pings acknowledged, settings acknowledged, no window granted)."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 20)
        except socket.timeout:
            return
        except OSError:
            self.closed = True
            return
        if not data:
            self.closed = True
            return
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError:  # frames after the server closed
            self.closed = True
            return
        for ev in events:
            s = self.streams.get(getattr(ev, "stream_id", 0))
            if isinstance(ev, h2.events.ResponseReceived) and s is not None:
                s["headers"] = dict(ev.headers)
            elif isinstance(ev, h2.events.TrailersReceived) and s is not None:
                s["trailers"] = dict(ev.headers)
            elif isinstance(ev, h2.events.DataReceived) and s is not None:
                s["data"] += len(ev.data)
            elif isinstance(ev, h2.events.StreamEnded) and s is not None:
                s["ended"] = True
            elif isinstance(ev, h2.events.StreamReset) and s is not None:
                s["reset"] = ev.error_code
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self.goaway = ev.error_code
                self.closed = True
        self.flush()

    def status(self, sid):
        """(grpc-status, grpc-message) once the call has ended: from its
        trailers, or from headers-only answers; None while it has not."""
        s = self.streams[sid]
        for h in (s["trailers"], s["headers"]):
            if h and "grpc-status" in h:
                return int(h["grpc-status"]), h.get("grpc-message", "")
        if s["reset"] is not None:
            return "reset", str(s["reset"])
        return None

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
        self.closed = True
