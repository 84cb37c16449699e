"""Exceptions of the scps package: every failure of libscps or of an input
check is an :class:`Error` carrying the status name (``SCPS_EINVAL``), the
server that answered with it (index and address, when one did) and the
message, which names the field and value at fault."""
from __future__ import annotations

import re
from typing import Optional

# libscps's messages start "server 1 (127.0.0.1:50052): ..." when a server
# answered with the error (scps_client.h).
_SERVER = re.compile(r"server (\d+) \(([^)]*)\)")

SCPS_EINVAL = -1


class Error(Exception):
    """A libscps status. Attributes: ``code`` (negative SCPS_E* value),
    ``status`` (its name, e.g. ``"SCPS_EUNAVAIL"``), ``description``
    (``scps_strerror``), ``message`` (what was wrong), ``server`` and
    ``address`` (the first server named in the message, else None)."""

    def __init__(self, code: int, status: str, description: str, message: str):
        self.code = code
        self.status = status
        self.description = description
        self.message = message
        m = _SERVER.search(message)
        self.server: Optional[int] = int(m.group(1)) if m else None
        self.address: Optional[str] = m.group(2) if m else None
        super().__init__("%s (%s): %s" % (status, description, message))


class InvalidArgument(Error, ValueError):
    """Bad input (SCPS_EINVAL, SCPS_ERANGE, SCPS_EPARSE): nothing was sent."""


class Unavailable(Error, ConnectionError):
    """A server did not answer (SCPS_EUNAVAIL) or cancelled the call while
    draining (SCPS_ECANCELLED)."""


class DeadlineExceeded(Error, TimeoutError):
    """The call's deadline passed (SCPS_ETIMEDOUT)."""


_CLASSES = {
    "SCPS_EINVAL": InvalidArgument,
    "SCPS_ERANGE": InvalidArgument,
    "SCPS_EPARSE": InvalidArgument,
    "SCPS_EUNAVAIL": Unavailable,
    "SCPS_ECANCELLED": Unavailable,
    "SCPS_ETIMEDOUT": DeadlineExceeded,
}


def from_status(code: int, status: str, description: str, message: str) -> Error:
    """The exception for a libscps status (the binding raises what this returns)."""
    return _CLASSES.get(status, Error)(code, status, description, message)


def invalid(message: str) -> InvalidArgument:
    """An input check's failure, raised before anything reaches libscps."""
    return InvalidArgument(SCPS_EINVAL, "SCPS_EINVAL", "invalid argument", message)
