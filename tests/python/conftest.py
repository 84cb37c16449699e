"""Fixtures of the scps package's tests: real scps-server processes on
loopback (port 0 and --port-file, as tests/server/scps_srvtest.py starts
them), stopped with SIGTERM at the end of each test, which must exit 0.

ctest (tests/python/CMakeLists.txt) passes the programs in the environment:
SCPS_SERVER, SCPS_PYREF (the C reference, scps_pyref.c), SCPS_ADMIN, and
PYTHONPATH with the build tree's package."""
import json
import os
import signal
import subprocess
import time

import pytest


def _env(name):
    v = os.environ.get(name)
    if not v:
        pytest.skip("%s not set (run through ctest)" % name)
    return v


class Cluster:
    """scps-server processes of one config, in process order."""

    def __init__(self, tmp, config, processes=2, sc=2, extra=()):
        self.tmp = tmp
        self.procs, self.ports = [], []
        self.logs = []
        for p in range(processes):
            port_file = os.path.join(tmp, "port-%d-%d" % (id(self), p))
            log = os.path.join(tmp, "server-%d-%d.log" % (id(self), p))
            argv = [_env("SCPS_SERVER"), "--config", config, "--listen", "127.0.0.1:0", "--port-file", port_file,
                    "--process-index", str(p), "--num-processes", str(processes), "--sc-per-process", str(sc),
                    "--sc-memory", "16M"] + list(extra)
            with open(log, "wb") as err:
                self.procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err,
                                                   stdin=subprocess.DEVNULL))
            self.logs.append(log)
            self.ports.append(port_file)
        deadline = time.monotonic() + 30
        for i, path in enumerate(self.ports):
            while not (os.path.exists(path) and open(path).read().endswith("\n")):
                if self.procs[i].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("scps-server %d did not start:\n%s" % (i, open(self.logs[i]).read()))
                time.sleep(0.02)
        self.addrs = ["127.0.0.1:%d" % int(open(p).read()) for p in self.ports]

    @property
    def servers(self):
        return ",".join(self.addrs)

    def stop(self):
        bad = []
        for i, p in enumerate(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.terminate()
                try:
                    rc = p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    rc = p.wait()
                if rc != 0:
                    bad.append("scps-server %d exited with %s:\n%s" % (i, rc, open(self.logs[i]).read()[-2000:]))
        return bad


@pytest.fixture
def cluster(tmp_path):
    """cluster(tables, features, batch_size=8, processes=2, extra=()) -> Cluster."""
    started = []

    def start(tables, features, batch_size=8, processes=2, sc=2, extra=()):
        path = os.path.join(str(tmp_path), "config-%d.json" % len(started))
        with open(path, "w") as f:
            json.dump({"name": "pytest", "batch_size": batch_size, "ids": {"distribution": "uniform", "seed": 1},
                       "tables": tables, "features": features}, f)
        c = Cluster(str(tmp_path), path, processes, sc, extra)
        started.append(c)
        return c

    yield start
    bad = [m for c in started for m in c.stop()]
    assert not bad, "\n".join(bad)


def table(name, vocab, dim, combiner="sum", optimizer=None, init=None):
    """A TableSpec of the workload format (deploy/workloads/README.md)."""
    return {"name": name, "vocabulary_size": vocab, "embedding_dim": dim, "combiner": combiner,
            "optimizer": optimizer or {"type": "sgd", "learning_rate": 0.5},
            "initializer": init or {"type": "normal", "stddev": 0.3},
            "max_ids_per_partition": 4096, "max_unique_ids_per_partition": 4096}
