"""scps-compose generate, without starting anything: for P shards the file
has P shard services with their own host name, volume and one definition
otherwise, Prometheus scrapes all P, the certificate names every shard,
docker-compose accepts the file, options are kept between runs, and bad
options exit 2 naming the option and change nothing."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCPS_COMPOSE = os.path.join(REPO, "deploy", "compose", "scps-compose")
failures = 0


def check(ok, what):
    global failures
    print("   %s %s" % ("ok" if ok else "FAIL", what), flush=True)
    failures += 0 if ok else 1


def gen(d, *args):
    return subprocess.run([SCPS_COMPOSE, "generate", "--dir", d] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def load(d):
    with open(os.path.join(d, "docker-compose.yml")) as f:
        return yaml.safe_load(f)


def test_shards(d, p):
    r = gen(d, "--shards", str(p), "--sc-per-shard", "3", "--project", "gentest", "--server-env",
            "SCPS_DRAIN_SECONDS=30")
    check(r.returncode == 0, "generate --shards %d exits 0: %s" % (p, r.stdout.strip()))
    doc = load(d)
    shards = sorted(k for k in doc["services"] if k.startswith("shard-"))
    check(shards == sorted("shard-%d" % i for i in range(p)), "%d shard services: %s" % (p, shards))
    envs = [doc["services"][s]["environment"] for s in shards]
    check(all(e == envs[0] for e in envs), "every shard has the same environment")
    e = envs[0]
    check(e["SCPS_PROCESS_INDEX"] == "auto" and e["SCPS_NUM_PROCESSES"] == str(p) and e["SCPS_SC_PER_PROCESS"] == "3"
          and e["SCPS_DRAIN_SECONDS"] == "30", "index from the host name, P, S and --server-env in it: %s" % e)
    hosts = [doc["services"]["shard-%d" % i]["hostname"] for i in range(p)]
    check(hosts == ["shard-%d" % i for i in range(p)], "host names carry the ordinal: %s" % hosts)
    vols = [doc["services"]["shard-%d" % i]["volumes"][0] for i in range(p)]
    check(vols == ["shard-%d:/var/lib/scps" % i for i in range(p)], "a checkpoint volume each: %s" % vols)
    hc = doc["services"]["shard-0"]["healthcheck"]["test"]
    check(hc[:4] == ["CMD", "scps-admin", "health", "--grpc"], "healthcheck is the gRPC health probe, exec form")
    servers = "--servers" in doc["services"]["trainer"]["entrypoint"] and doc["services"]["trainer"]["entrypoint"]
    want = ",".join("shard-%d:50051" % i for i in range(p))
    check(servers and servers[servers.index("--servers") + 1] == want, "the trainer lists the shards in order")
    with open(os.path.join(d, "prometheus.yml")) as f:
        prom = yaml.safe_load(f)
    targets = prom["scrape_configs"][0]["static_configs"][0]["targets"]
    check(targets == ["shard-%d:9464" % i for i in range(p)], "Prometheus scrapes all %d shards" % p)
    text = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in",
                           os.path.join(d, "secrets", "server.pem")], stdout=subprocess.PIPE, text=True).stdout
    check(all("DNS:shard-%d" % i in text for i in range(p)), "the certificate names every shard")
    r = subprocess.run(["docker-compose", "-f", os.path.join(d, "docker-compose.yml"), "config", "-q"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check(r.returncode == 0, "docker-compose accepts the file: %s" % r.stdout.strip())
    mode = os.stat(os.path.join(d, "secrets")).st_mode & 0o777
    check(mode == 0o700, "secrets/ is 0700 (%o)" % mode)


def test_kept_and_bad(d):
    before = open(os.path.join(d, "docker-compose.yml")).read()
    token = open(os.path.join(d, "secrets", "admin.token")).read()
    r = gen(d)
    check(r.returncode == 0 and open(os.path.join(d, "docker-compose.yml")).read() == before,
          "generate without options keeps the last ones")
    check(open(os.path.join(d, "secrets", "admin.token")).read() == token, "tokens are kept")
    for args, needle in ((["--shards", "0"], "--shards 0"), (["--sc-memory", "lots"], "--sc-memory 'lots'"),
                         (["--workload", "/nonexistent.json"], "--workload '/nonexistent.json'"),
                         (["--project", "Bad Name"], "--project 'Bad Name'"),
                         (["--server-env", "PATH=/x"], "--server-env 'PATH'"),
                         (["--server-env", "NOEQUALS"], "--server-env")):
        r = gen(d, *args)
        check(r.returncode == 2 and needle in r.stdout and open(os.path.join(d, "docker-compose.yml")).read() == before,
              "%s: exit 2 naming it, nothing changed (%d: %s)" % (" ".join(args), r.returncode,
                                                                  r.stdout.strip().splitlines()[-1]))
    saved = json.load(open(os.path.join(d, "stack.json")))
    check(saved["shards"] == 5, "stack.json keeps the options: %s" % saved)


def main():
    d = tempfile.mkdtemp(prefix="scps-gen-")
    try:
        test_shards(d, 2)
        test_shards(d, 5)
        test_kept_and_bad(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("test_compose_generate: %s" % ("FAILED (%d)" % failures if failures else "passed"))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
