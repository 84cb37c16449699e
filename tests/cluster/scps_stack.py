"""The cluster tests' harness: one compose stack of real containers made by
deploy/compose/scps-compose (its own project, network, volumes and stack
directory, removed at the end), with the failures a real host sees
(docker kill, SIGTERM, network disconnect) and Prometheus's HTTP API.

A test module defines functions test_*(stack) and calls
main("name", [functions], **stack_options); each check that fails is
printed and makes the exit status 1, and the stack's logs are printed then. The scps image is $SCPS_TEST_IMAGE, default scps:latest."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.parse
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCPS_COMPOSE = os.path.join(REPO, "deploy", "compose", "scps-compose")
WORKLOAD = os.path.join(REPO, "deploy", "workloads", "ctr-demo.json")
GRPC_PORT = 50051


class Stack:
    """A running stack: shards shard-0..P-1 and Prometheus."""

    def __init__(self, name, shards=3, sc_per_shard=2, sc_memory="64M", server_env=None, workload=WORKLOAD):
        self.name = name
        self.shards = shards
        self.failures = 0
        self.dir = tempfile.mkdtemp(prefix="scps-%s-" % name)
        os.chmod(self.dir, 0o755)
        self.project = "scpst-%s-%d" % (name.replace("_", "-"), os.getpid())
        self.servers = ",".join("shard-%d:%d" % (i, GRPC_PORT) for i in range(shards))
        args = ["generate", "--dir", self.dir, "--project", self.project, "--shards", str(shards),
                "--sc-per-shard", str(sc_per_shard), "--sc-memory", sc_memory, "--workload", workload,
                "--prometheus-port", "0", "--image", os.environ.get("SCPS_TEST_IMAGE") or "scps:latest"]
        for k, v in (server_env or {}).items():
            args += ["--server-env", "%s=%s" % (k, v)]
        subprocess.run([SCPS_COMPOSE] + args, check=True)
        self.network = self.project + "_scps"
        self.started = False

    # ---- compose and docker ----------------------------------------------
    def compose(self, *args, check=True, capture=True, timeout=600):
        cmd = [SCPS_COMPOSE, "compose", "--dir", self.dir] + list(args)
        r = subprocess.run(cmd, stdout=subprocess.PIPE if capture else None,
                           stderr=subprocess.STDOUT if capture else None, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError("%s exited %d:\n%s" % (" ".join(args), r.returncode, r.stdout or ""))
        return r

    def up(self):
        names = ["shard-%d" % i for i in range(self.shards)]
        self.compose("up", "-d", *names, "prometheus")
        self.started = True
        for n in names:
            self.wait_healthy(n)

    def down(self):
        if self.started:
            self.compose("--profile", "train", "--profile", "loadgen", "--profile", "admin", "down", "--volumes",
                         "--remove-orphans", "--timeout", "30", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def container(self, service):
        """The container id of a service's (first) container."""
        out = self.compose("ps", "-q", service).stdout.split()
        if not out:
            raise RuntimeError("no container for service %s" % service)
        return out[0]

    def inspect(self, service, fmt):
        return subprocess.run(["docker", "inspect", "-f", fmt, self.container(service)], stdout=subprocess.PIPE,
                              text=True, check=True).stdout.strip()

    def health(self, service):
        """'starting', 'healthy' or 'unhealthy', or the container's state when
        it is not running."""
        st = self.inspect(service, "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}").split()
        return st[1] if st and st[0] == "running" and len(st) > 1 else (st[0] if st else "gone")

    def wait_healthy(self, service, timeout=180):
        """Seconds until the service's healthcheck passes."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.health(service) == "healthy":
                return time.monotonic() - t0
            time.sleep(0.25)
        raise RuntimeError("%s not healthy after %d s: %s" % (service, timeout, self.health(service)))

    def docker(self, *args, check=True):
        return subprocess.run(["docker"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              check=check)

    def kill(self, service, signal="KILL"):
        self.docker("kill", "--signal", signal, self.container(service))

    def disconnect(self, service):
        self.docker("network", "disconnect", self.network, self.container(service))

    def connect(self, service):
        """Back on the network under its service name and host name."""
        self.docker("network", "connect", "--alias", service, self.network, self.container(service))

    def logs(self, service, tail=None):
        return self.compose("logs", "--no-color", *(["--tail", str(tail)] if tail else []), service).stdout

    # ---- the programs in containers ----------------------------------------
    def run(self, service, *args, timeout=600, volumes=()):
        """A one-off container of the trainer, loadgen or admin service with
        these arguments after its entrypoint's (servers, workload, TLS and
        token flags are in the entrypoint, but for admin)."""
        v = []
        for spec in volumes:
            v += ["-v", spec]
        return self.compose("run", "--rm", "-T", *v, service, *args, check=False, timeout=timeout)

    def start(self, service, *args, volumes=()):
        """The same, in the background: a Popen whose stdout is the output."""
        v = []
        for spec in volumes:
            v += ["-v", spec]
        return subprocess.Popen([SCPS_COMPOSE, "compose", "--dir", self.dir, "run", "--rm", "-T", *v, service]
                                + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def admin(self, *args, timeout=120, volumes=()):
        """scps-admin with the admin token: args after the command name get
        --servers and the TLS and token flags appended."""
        return self.run("admin", *args, "--tls-ca", "/etc/scps/tls/ca.pem", "--token-file",
                        "/etc/scps/admin.token", timeout=timeout, volumes=volumes)

    def admin_json(self, *args):
        r = self.admin(*args, "--servers", self.servers, "--json")
        if r.returncode != 0:
            raise RuntimeError("scps-admin %s exited %d: %s" % (" ".join(args), r.returncode, r.stdout))
        # compose may print its own lines first: the JSON starts at the first
        # line that opens an array or an object
        lines = r.stdout.splitlines()
        start = next((i for i, ln in enumerate(lines) if ln.lstrip()[:1] in ("[", "{")), 0)
        return json.loads("\n".join(lines[start:]))

    # ---- Prometheus ---------------------------------------------------------
    def prometheus_url(self):
        hostport = self.compose("port", "prometheus", "9090").stdout.strip().splitlines()[-1]
        return "http://%s" % hostport

    def query(self, promql):
        """An instant query through Prometheus's HTTP API: the result vector."""
        url = "%s/api/v1/query?%s" % (self.prometheus_url(), urllib.parse.urlencode({"query": promql}))
        with urllib.request.urlopen(url, timeout=30) as r:
            doc = json.load(r)
        if doc.get("status") != "success":
            raise RuntimeError("query %s: %s" % (promql, doc))
        return doc["data"]["result"]

    # ---- checks -------------------------------------------------------------
    def check(self, ok, what):
        if ok:
            print("   ok %s" % what, flush=True)
        else:
            self.failures += 1
            print("   FAIL %s" % what, flush=True)
        return ok

    def crash(self, service):
        """SIGKILL of the container's process from the host, as a crash or the
        kernel's OOM killer does: unlike docker kill, which Docker counts as
        an operator's stop, the restart policy restarts the container."""
        os.kill(int(self.inspect(service, "{{.State.Pid}}")), 9)

    def copy_from(self, service, path, dest):
        """docker cp of a path in the service's container (running or not) to
        the host directory dest."""
        self.docker("cp", "%s:%s" % (self.container(service), path), dest)

    def log_json(self, service):
        """The service's log lines that are JSON objects (--log-format json),
        oldest first, across its container's restarts."""
        out = []
        for line in self.logs(service).splitlines():
            _, bar, rest = line.partition("| ")
            try:
                obj = json.loads(rest if bar else line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
        return out


def main(name, tests, **stack_options):
    """Runs the tests one after another on one stack (or those named on the
    command line), then removes the stack; exit status 1 if any check
    failed."""
    only = sys.argv[1:]
    t0 = time.monotonic()
    stack = Stack(name, **stack_options)
    try:
        stack.up()
        print("%s: %d shards healthy in %.1f s" % (name, stack.shards, time.monotonic() - t0), flush=True)
        for t in tests:
            if only and t.__name__ not in only:
                continue
            t1 = time.monotonic()
            print("-- %s" % t.__name__, flush=True)
            try:
                t(stack)
            except Exception:
                stack.failures += 1
                traceback.print_exc()
            print("-- %s: %.1f s" % (t.__name__, time.monotonic() - t1), flush=True)
        if stack.failures:
            for i in range(stack.shards):
                print(stack.logs("shard-%d" % i, tail=30))
    except Exception:
        stack.failures += 1
        traceback.print_exc()
    finally:
        stack.down()
    print("%s: %s in %.1f s" % (name, "FAILED (%d)" % stack.failures if stack.failures else "passed",
                                time.monotonic() - t0), flush=True)
    sys.exit(1 if stack.failures else 0)
