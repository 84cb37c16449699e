"""scps-loadgen counts each failed request under the gRPC status it got:
a Python gRPC proxy in front of a real server forwards everything but
answers Lookup with one status (CANCELLED, as a server draining for
shutdown cancels calls, or UNAVAILABLE), and the JSON report must count
every request under that status and no other."""
import json
import os
import subprocess

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


if __name__ == "__main__":
    main("test_loadgen_status", [test_loadgen_statuses])
