"""The standard gRPC health service (proto/health.proto) beside scps's own
Health, checked with a stock grpcio client generated from health.proto:
Check("") and Check("scps.v1.EmbeddingService") answer SERVING while the
server serves and NOT_SERVING while it drains (when Health answers
DRAINING); another service name is NOT_FOUND; Watch is UNIMPLEMENTED; with
a --token-file, Check needs no token while every other method still does;
`scps-admin health --grpc`, the probe for containers, exits 0 only on
SERVING."""
import os
import signal
import subprocess
import time

from scps_srvtest import UNLIMITED, call_status, main, write_secret
from test_auth import ADMIN, BATCH, FEATURES, TABLES, TRAINING, UNKNOWN

# How long a drain lasts with no push (--drain-quiet-ms): long enough to
# probe the server while it drains.
QUIET_MS = 4000


def health_stubs(env):
    if not hasattr(env, "health"):
        env.health = env.stubs("health.proto")
    return env.health


def check(env, srv, service, metadata=()):
    """(status code name, details, serving status name or None) of one
    Check on a fresh channel."""
    hpb, hrpc = health_stubs(env)
    ch = env.grpc.insecure_channel(srv.addr, options=UNLIMITED)
    try:
        got, details, resp = call_status(hrpc.HealthStub(ch).Check, hpb.HealthCheckRequest(service=service),
                                         metadata=list(metadata), timeout=10)
    finally:
        ch.close()
    return got, details, None if resp is None else hpb.HealthCheckResponse.ServingStatus.Name(resp.status)


def admin_probe(env, srv, *extra):
    """(exit status, stdout + stderr) of `scps-admin health --grpc`."""
    r = subprocess.run([env.args.admin, "health", "--grpc", "--servers", srv.addr, "--deadline-ms", "5000"]
                       + list(extra), capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def test_serving_and_draining(env):
    """SERVING, NOT_FOUND and UNIMPLEMENTED while serving; NOT_SERVING (with
    Health DRAINING) for the whole drain; exit 0 after it."""
    pb = env.pb
    cfg = env.write_config("health", BATCH, TABLES, FEATURES)
    ck = os.path.join(env.tmp, "ck-health")
    srv = env.server(cfg, extra=["--checkpoint-dir", ck, "--drain-quiet-ms", str(QUIET_MS)]).wait_ready()
    for service in ("", "scps.v1.EmbeddingService"):
        got = check(env, srv, service)
        env.check(got[0] == "OK" and got[2] == "SERVING", "Check(%r) while serving: %s" % (service, got))
    for service in ("nope", "scps.v1", "grpc.health.v1.Health", "scps.v1.EmbeddingService/Lookup"):
        got = check(env, srv, service)
        env.check(got[0] == "NOT_FOUND" and service in got[1], "Check(%r): %s, expected NOT_FOUND naming it"
                  % (service, got))
    hpb, _ = health_stubs(env)
    ch = env.grpc.insecure_channel(srv.addr, options=UNLIMITED)
    watch = ch.unary_stream("/grpc.health.v1.Health/Watch", request_serializer=lambda m: m.SerializeToString())
    code = None
    try:
        for _ in watch(hpb.HealthCheckRequest(service=""), timeout=10):
            pass
    except env.grpc.RpcError as e:
        code = e.code().name
    ch.close()
    env.check(code == "UNIMPLEMENTED", "Watch: %s, expected UNIMPLEMENTED" % code)
    if env.args.admin:
        rc, out = admin_probe(env, srv)
        env.check(rc == 0 and ": SERVING" in out, "scps-admin health --grpc while serving: exit %d: %s" % (rc, out))

    t_sig = time.monotonic()
    srv.send_signal(signal.SIGTERM)
    states = []
    while time.monotonic() < t_sig + QUIET_MS / 1000 / 2:
        got = check(env, srv, "")
        states.append(got[2] or got[0])
        if got[2] == "NOT_SERVING":
            break
        time.sleep(0.01)
    env.check(states and states[-1] == "NOT_SERVING", "Check after SIGTERM: %s, expected NOT_SERVING" % states)
    ch = env.grpc.insecure_channel(srv.addr, options=UNLIMITED)
    got, details, resp = call_status(env.rpc.EmbeddingServiceStub(ch).Health, pb.HealthRequest(), timeout=10)
    ch.close()
    env.check(got == "OK" and resp.status == pb.HealthResponse.STATUS_DRAINING, "Health while Check answers "
              "NOT_SERVING: %s %s" % (got, resp))
    got = check(env, srv, "scps.v1.EmbeddingService")
    env.check(got[0] == "OK" and got[2] == "NOT_SERVING", "Check(scps.v1.EmbeddingService) while draining: %s"
              % (got,))
    got = check(env, srv, "nope")
    env.check(got[0] == "NOT_FOUND", "Check('nope') while draining: %s" % (got,))
    if env.args.admin:
        rc, out = admin_probe(env, srv)
        env.check(rc == 1 and ": NOT_SERVING" in out, "scps-admin health --grpc while draining: exit %d: %s"
                  % (rc, out))
    env.check(time.monotonic() - t_sig < QUIET_MS / 1000, "the checks ran while the server drained (%.2f s after "
              "SIGTERM, the drain lasts %.1f s)" % (time.monotonic() - t_sig, QUIET_MS / 1000))
    rc = srv.wait(60)
    env.check(rc == 0, "exit status %s after the drain, expected 0" % rc)


def test_no_token_needed(env):
    """With a --token-file: Check with no token or an unknown one answers
    SERVING; scps's Health and Lookup without a token are UNAUTHENTICATED;
    the probe runs without a token."""
    cfg = env.write_config("health-tokens", BATCH, TABLES, FEATURES)
    tokens = write_secret(env, "tokens", "admin %s\ntraining %s\n" % (ADMIN, TRAINING))
    srv = env.server(cfg, extra=["--token-file", tokens]).wait_ready()
    for who, md in (("no token", ()), ("an unknown token", (("authorization", "Bearer " + UNKNOWN),)),
                    ("training", (("authorization", "Bearer " + TRAINING),))):
        got = check(env, srv, "", md)
        env.check(got[0] == "OK" and got[2] == "SERVING", "Check with %s: %s" % (who, got))
    got = check(env, srv, "nope")
    env.check(got[0] == "NOT_FOUND", "Check('nope') with no token: %s" % (got,))
    ch = env.grpc.insecure_channel(srv.addr, options=UNLIMITED)
    stub = env.rpc.EmbeddingServiceStub(ch)
    for name, req in (("Health", env.pb.HealthRequest()), ("Lookup", env.pb.LookupRequest()),
                      ("GetConfig", env.pb.GetConfigRequest())):
        code, details, _ = call_status(getattr(stub, name), req, timeout=10)
        env.check(code == "UNAUTHENTICATED", "%s with no token: %s %r, expected UNAUTHENTICATED"
                  % (name, code, details))
    code, _, _ = call_status(stub.Health, env.pb.HealthRequest(), metadata=[("authorization", "Bearer " + TRAINING)],
                             timeout=10)
    env.check(code == "OK", "Health with the training token: %s" % code)
    ch.close()
    if env.args.admin:
        rc, out = admin_probe(env, srv)
        env.check(rc == 0 and ": SERVING" in out, "scps-admin health --grpc with no token: exit %d: %s" % (rc, out))
        r = subprocess.run([env.args.admin, "health", "--servers", srv.addr, "--deadline-ms", "5000"],
                           capture_output=True, text=True, timeout=60)
        env.check(r.returncode == 1 and "UNAUTHENTICATED" in r.stdout, "scps-admin health (scps's Health) with no "
                  "token: exit %d: %s" % (r.returncode, r.stdout + r.stderr))


def test_probe_unreachable(env):
    """The probe fails (exit 1) against an address nothing listens on."""
    if not env.args.admin:
        return
    r = subprocess.run([env.args.admin, "health", "--grpc", "--servers", "127.0.0.1:1", "--deadline-ms", "500"],
                       capture_output=True, text=True, timeout=60)
    env.check(r.returncode == 1, "scps-admin health --grpc, nothing listening: exit %d: %s"
              % (r.returncode, r.stdout + r.stderr))


if __name__ == "__main__":
    main("test_grpc_health", [test_serving_and_draining, test_no_token_needed, test_probe_unreachable])
