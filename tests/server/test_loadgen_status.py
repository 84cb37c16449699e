"""scps-loadgen counts each failed request under the gRPC status it got:
a Python gRPC proxy in front of a real server forwards everything but
answers Lookup with one status (CANCELLED, as a server draining for
shutdown cancels calls, or UNAVAILABLE), and the JSON report must count
every request under that status and no other. SIGINT and SIGTERM end a
run early with the report of the run so far."""
import json
import os
import signal
import subprocess
import time

from scps_srvtest import main
from test_wire_revision import FEATURES, TABLES, Proxy


class FailingProxy(Proxy):
    """Forwards every method but Lookup, which it answers with `code`."""

    def __init__(self, env, target, code):
        self.code = code
        super().__init__(env, target, False)

    def _forward(self, method):
        forward = super()._forward(method)
        if method != "Lookup":
            return forward

        def handle(req, ctx):
            self.seen["Lookup"] += 1
            ctx.abort(self.code, "Lookup: answered %s by the test's proxy" % self.code.name)
        return handle


def test_loadgen_statuses(env):
    cfg = env.write_config("statuses", 64, TABLES, FEATURES)
    srv = env.server(cfg).wait_ready()
    for code in (env.grpc.StatusCode.CANCELLED, env.grpc.StatusCode.UNAVAILABLE):
        proxy = FailingProxy(env, srv.addr, code)
        try:
            report = os.path.join(env.tmp, "report-%s.json" % code.name)
            argv = [env.args.loadgen, "--workload", cfg, "--servers", "127.0.0.1:%d" % proxy.port, "--mode", "lookup",
                    "--requests", "4", "--warmup", "0", "--deadline-ms", "300", "--quiet", "--json", report]
            r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            env.check(r.returncode == 0, "%s: scps-loadgen exit %d: %s" % (code.name, r.returncode, r.stderr[-400:]))
            with open(report) as f:
                errors = json.load(f)["errors"]
            ok = env.check(errors == {code.name: 4}, "Lookups answered %s: report's errors %s, expected {%r: 4}"
                           % (code.name, errors, code.name))
            ok &= env.check(proxy.seen["Lookup"] >= 4, "%s: %d Lookups reached the proxy" % (code.name,
                                                                                           proxy.seen["Lookup"]))
            if ok:
                print("   ok Lookups answered %s counted as %s" % (code.name, errors), flush=True)
        finally:
            proxy.close()


def test_stop_signal(env):
    """SIGINT or SIGTERM ends a long run early with its report: exit 0, the
    measured span up to the signal, its requests answered."""
    cfg = env.write_config("stop", 64, TABLES, FEATURES)
    srv = env.server(cfg).wait_ready()
    for sig in (signal.SIGINT, signal.SIGTERM):
        report = os.path.join(env.tmp, "report-%s.json" % sig.name)
        p = subprocess.Popen([env.args.loadgen, "--workload", cfg, "--servers", srv.addr, "--mode", "lookup",
                              "--rate", "200", "--duration", "600", "--warmup", "0.5", "--quiet", "--json", report],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        t0 = time.monotonic()
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
        took = time.monotonic() - t0
        env.check(p.returncode == 0 and took < 5, "%s: scps-loadgen exit %d %.1f s after it: %s"
                  % (sig.name, p.returncode, took, err[-400:]))
        with open(report) as f:
            rep = json.load(f)
        env.check(1 < rep["duration_s"] < 5 and rep["ok"] > 0 and not rep["errors"],
                  "%s: a report of the run so far: %.1f s, %d answered, errors %s"
                  % (sig.name, rep["duration_s"], rep["ok"], rep["errors"]))
        print("   ok %s ends the run after %.1f s measured, %.1f s after the signal" % (sig.name, rep["duration_s"],
                                                                                   took), flush=True)


if __name__ == "__main__":
    main("test_loadgen_status", [test_loadgen_statuses, test_stop_signal])
