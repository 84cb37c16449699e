"""libscps against a cluster with a server of an earlier wire revision:
Python gRPC proxies in front of a real 2-process cluster forward everything
and record the forms of the requests scps-loadgen sends; the proxy of
process 1 answers GetConfig without the field (revision 0: no
StackPartitions.samples_u16, no StackGradients.row_gradients) or with
revision 1 (no LookupRequest.request_placement: with shared memory, Lookups
through either proxy carry their stacks). With the field passed on, the same
runs must use the newer forms, so the check can fail."""
import subprocess
from concurrent import futures

from scps_srvtest import SERVICE, UNLIMITED, main

# Few rows and many samples: pushes by row take far fewer bytes, so AUTO
# picks them wherever the servers take them; 512 samples fit in uint16.
TABLES = [
    {"name": "t", "vocabulary_size": 40, "embedding_dim": 16, "combiner": "sum",
     "optimizer": {"type": "adagrad", "learning_rate": 0.1, "initial_accumulator": 0.1},
     "initializer": {"type": "uniform", "scale": 0.1}},
]
FEATURES = [{"name": "f", "table": "t", "valency": 1}]
METHODS = ("GetConfig", "Lookup", "ApplyGradients", "Stats", "Health", "Checkpoint")


class Proxy:
    """A gRPC server forwarding every method to target as raw bytes; with
    strip, GetConfig answers lose wire_revision."""

    def __init__(self, env, target, revision=None):
        self.env, self.pb, self.revision = env, env.pb, revision
        self.seen = {"Lookup": 0, "ApplyGradients": 0, "samples_u16": 0, "row_gradients": 0, "request_placement": 0}
        self.channel = env.grpc.insecure_channel(target, options=UNLIMITED)
        handlers = {m: env.grpc.unary_unary_rpc_method_handler(self._forward(m)) for m in METHODS}
        self.server = env.grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=UNLIMITED)
        self.server.add_generic_rpc_handlers((env.grpc.method_handlers_generic_handler("scps.v1.EmbeddingService",
                                                                                        handlers),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _forward(self, method):
        call = self.channel.unary_unary(SERVICE + method, request_serializer=None, response_deserializer=None)
        pb = self.pb

        def handle(req, ctx):
            if method == "Lookup":
                lr = pb.LookupRequest.FromString(req)
                self.seen["samples_u16"] += sum(len(s.samples_u16) > 0 for s in lr.stacks)
                self.seen["request_placement"] += lr.HasField("request_placement")
            elif method == "ApplyGradients":
                stacks = pb.ApplyGradientsRequest.FromString(req).stacks
                self.seen["samples_u16"] += sum(len(s.partitions.samples_u16) > 0 for s in stacks)
                self.seen["row_gradients"] += sum(len(s.row_gradients) > 0 for s in stacks)
            if method in self.seen:
                self.seen[method] += 1
            try:
                resp = call(req, timeout=30)
            except self.env.grpc.RpcError as e:
                ctx.abort(e.code(), e.details())
            if method == "GetConfig" and self.revision is not None:
                r = pb.GetConfigResponse.FromString(resp)
                r.wire_revision = self.revision
                resp = r.SerializeToString()
            return resp
        return handle

    def close(self):
        self.server.stop(None)
        self.channel.close()


def loadgen(env, cfg, ports, gradients, shm="off", wire="float32"):
    argv = [env.args.loadgen, "--workload", cfg, "--servers", ",".join("127.0.0.1:%d" % p for p in ports),
            "--mode", "train", "--requests", "6", "--warmup", "0", "--gradients", gradients, "--shared-memory", shm,
            "--wire-format", wire]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_wire_revision(env):
    cfg = env.write_config("revision", 512, TABLES, FEATURES)
    srvs = [env.server(cfg, index=p, num_processes=2).wait_ready() for p in range(2)]
    for p, srv in enumerate(srvs):
        got = srv.stub().GetConfig(env.pb.GetConfigRequest(), timeout=30).wire_revision
        env.check(got == 4, "process %d: GetConfig wire_revision %d, expected 4" % (p, got))
    # eXmY formats: taken by processes of revision 3, refused by libscps,
    # naming the process, when one reports 2.
    for rev in (None, 2):
        proxies = [Proxy(env, srvs[0].addr), Proxy(env, srvs[1].addr, rev)]
        try:
            r = loadgen(env, cfg, [x.port for x in proxies], "auto", wire="e4m3/e3m0s")
            if rev is None:
                env.check(r.returncode == 0 and all(x.seen["ApplyGradients"] > 0 for x in proxies),
                          "eXmY through revision 3: exit %d %s" % (r.returncode, r.stderr[-400:]))
            else:
                env.check(r.returncode != 0 and "server 1 (" in r.stderr and "takes no eXmY" in r.stderr
                          and "wire_revision is 2" in r.stderr,
                          "eXmY refused at revision 2: exit %d, %r" % (r.returncode, r.stderr[-400:]))
            print("   ok process 1 of wire_revision %s, --wire-format e4m3/e3m0s: exit %d %s"
                  % (rev or 3, r.returncode, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""),
                  flush=True)
        finally:
            for x in proxies:
                x.close()
    # Lookups through shared memory: with both processes at revision 2 the
    # requests lie in the segments (the proxies see only where); with one at
    # revision 1, every request comes through the proxies whole.
    for rev in (None, 1):
        proxies = [Proxy(env, srvs[0].addr), Proxy(env, srvs[1].addr, rev)]
        try:
            what = "process 1 of wire_revision %s, shared memory" % ("2" if rev is None else rev)
            r = loadgen(env, cfg, [x.port for x in proxies], "auto", "auto")
            env.check(r.returncode == 0, "%s: scps-loadgen exit %d: %s" % (what, r.returncode, r.stderr[-400:]))
            placed = [x.seen["request_placement"] for x in proxies]
            lookups = [x.seen["Lookup"] for x in proxies]
            if rev is None:
                env.check(all(n > 0 for n in placed), "%s: placed Lookup requests per process %s of %s"
                          % (what, placed, lookups))
            else:
                env.check(placed == [0, 0] and all(n > 0 for n in lookups),
                          "%s: Lookups %s, none placed (seen %s)" % (what, lookups, placed))
            print("   ok %s: Lookups %s, placed requests %s" % (what, lookups, placed), flush=True)
        finally:
            for x in proxies:
                x.close()
    for strip in (False, True):
        proxies = [Proxy(env, srvs[0].addr), Proxy(env, srvs[1].addr, 0 if strip else None)]
        try:
            what = "process 1 of wire_revision %s" % ("0 (stripped)" if strip else "2")
            r = loadgen(env, cfg, [x.port for x in proxies], "auto")
            s = {k: proxies[0].seen[k] + proxies[1].seen[k] for k in proxies[0].seen}
            env.check(r.returncode == 0, "%s: scps-loadgen --gradients auto exit %d: %s" % (what, r.returncode,
                                                                                         r.stderr[-400:]))
            env.check(all(x.seen["Lookup"] > 0 and x.seen["ApplyGradients"] > 0 for x in proxies),
                      "%s: requests through both proxies %s" % (what, [x.seen for x in proxies]))
            if strip:
                env.check(s["samples_u16"] == 0 and s["row_gradients"] == 0,
                          "%s: libscps sent only the first forms %s" % (what, s))
            else:
                env.check(s["samples_u16"] > 0 and s["row_gradients"] > 0,
                          "%s: libscps sent uint16 samples and gradients by row %s" % (what, s))
            print("   ok %s: auto pushes, requests seen %s" % (what, s), flush=True)
            r = loadgen(env, cfg, [x.port for x in proxies], "row")
            if strip:
                env.check(r.returncode != 0 and "server 1 (" in r.stderr and "takes no gradients by row" in r.stderr
                          and "wire_revision is 0" in r.stderr,
                          "%s: --gradients row refused: exit %d, %r" % (what, r.returncode, r.stderr[-400:]))
                print("   ok %s: --gradients row refused: %s" % (what, r.stderr.strip().splitlines()[-1]), flush=True)
            else:
                env.check(r.returncode == 0, "%s: --gradients row exit %d: %s" % (what, r.returncode,
                                                                                 r.stderr[-400:]))
        finally:
            for x in proxies:
                x.close()


if __name__ == "__main__":
    main("test_wire_revision", [test_wire_revision])
