#!/usr/bin/env bash
# Smoke test of the images, against real containers: builds scps:latest and
# scps-prometheus:latest (seconds when cached; --reuse takes existing images
# as they are), then checks that
#  - `docker run --rm scps:latest --version` and `--help` answer, and every
#    program in the image starts (--version),
#  - a server container on a user-defined network, configured by SCPS_*
#    variables only (its index from its host name), answers the gRPC health
#    service (scps-admin health --grpc) from a second container,
#  - it runs as uid 10001 and exits 0 on docker stop (SIGTERM),
#  - scps-prometheus:latest answers --version, and a Prometheus container
#    becomes ready (its port published on 127.0.0.1 only).
# Prints each step's time; exits non-zero at the first failure.
#
#   deploy/image/smoke.sh [--reuse]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
reuse=0
case ${1:-} in
  --reuse) reuse=1 ;;
  -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "smoke.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
esac
command -v docker >/dev/null || { echo "smoke.sh: docker is missing" >&2; exit 1; }

t0=$(date +%s%N)
step() { awk -v t=$(( ($(date +%s%N) - t0) / 1000000 )) -v m="$1" \
  'BEGIN { printf "smoke.sh: %6.1f s  %s\n", t / 1e3, m }'; }
fail() { echo "smoke.sh: FAIL: $*" >&2; exit 1; }

if [ $reuse -eq 0 ] || ! docker image inspect scps:latest >/dev/null 2>&1; then
  "$here/build.sh"
fi
if [ $reuse -eq 0 ] || ! docker image inspect scps-prometheus:latest >/dev/null 2>&1; then
  "$here/build-prometheus.sh"
fi
step "images built"

tag=scps-smoke-$$
net=$tag-net
cleanup() {
  docker rm -f "$tag-server" "$tag-prometheus" >/dev/null 2>&1 || true
  docker network rm "$net" >/dev/null 2>&1 || true
}
trap cleanup EXIT

out=$(docker run --rm scps:latest --version) || fail "scps:latest --version exited $?"
case $out in "scps-server "*) ;; *) fail "scps:latest --version printed: $out" ;; esac
out=$(docker run --rm scps:latest --help) || fail "scps:latest --help exited $?"
case $out in "usage: scps-server "*) ;; *) fail "scps:latest --help printed: ${out:0:200}" ;; esac
for p in scps-admin scps-loadgen scps-trainer; do
  out=$(docker run --rm --entrypoint "$p" scps:latest --version) || fail "$p --version exited $?"
  case $out in "$p "*) ;; *) fail "$p --version printed: $out" ;; esac
done
step "--version and --help answer: $(docker run --rm scps:latest --version)"

docker network create "$net" >/dev/null
# Configured by environment variables only, the index from the host name.
docker run -d --name "$tag-server" --network "$net" --hostname shard-0 \
  -e SCPS_CONFIG=/usr/local/share/scps/workloads/ctr-demo.json -e SCPS_LISTEN=0.0.0.0:50051 \
  -e SCPS_INSECURE=1 -e SCPS_PROCESS_INDEX=auto -e SCPS_NUM_PROCESSES=1 -e SCPS_SC_PER_PROCESS=2 \
  -e SCPS_SC_MEMORY=64M scps:latest >/dev/null
healthy=0
for _ in $(seq 60); do
  if docker run --rm --network "$net" --entrypoint scps-admin scps:latest \
      health --grpc --servers shard-0:50051 --deadline-ms 2000 >/dev/null 2>&1; then
    healthy=1; break
  fi
  [ "$(docker inspect -f '{{.State.Running}}' "$tag-server")" = true ] || break
  sleep 0.5
done
if [ $healthy -ne 1 ]; then
  docker logs "$tag-server" >&2 || true
  fail "the server container did not answer scps-admin health --grpc"
fi
step "server container answers health: $(docker run --rm --network "$net" \
  --entrypoint scps-admin scps:latest health --servers shard-0:50051 | head -1)"

pid=$(docker inspect -f '{{.State.Pid}}' "$tag-server")
uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status")
[ "$uid" = 10001 ] || fail "the server ran as uid $uid, not 10001"
docker stop -t 30 "$tag-server" >/dev/null
code=$(docker inspect -f '{{.State.ExitCode}}' "$tag-server")
if [ "$code" != 0 ]; then
  docker logs "$tag-server" >&2 || true
  fail "the server exited $code after SIGTERM"
fi
step "server ran as uid $uid and exited 0 on docker stop"

out=$(docker run --rm scps-prometheus:latest --version 2>&1) || fail "scps-prometheus --version"
case $out in "prometheus, version "*) ;; *) fail "scps-prometheus --version printed: $out" ;; esac
docker run -d --name "$tag-prometheus" -p 127.0.0.1::9090 scps-prometheus:latest >/dev/null
port=$(docker port "$tag-prometheus" 9090/tcp | head -1 | sed 's/.*://')
ready=0
for _ in $(seq 60); do
  if /usr/bin/python3 -c "import sys, urllib.request as u; u.urlopen('http://127.0.0.1:$port/-/ready', timeout=2)" 2>/dev/null; then
    ready=1; break
  fi
  sleep 0.5
done
if [ $ready -ne 1 ]; then
  docker logs "$tag-prometheus" >&2 || true
  fail "the Prometheus container did not become ready"
fi
/usr/bin/python3 - "$port" <<'PY' || fail "Prometheus's query API did not answer"
import json, sys, urllib.request
url = "http://127.0.0.1:%s/api/v1/query?query=prometheus_build_info" % sys.argv[1]
answer = json.load(urllib.request.urlopen(url, timeout=5))
sys.exit(0 if answer.get("status") == "success" else 1)
PY
pid=$(docker inspect -f '{{.State.Pid}}' "$tag-prometheus")
uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status")
[ "$uid" = 10002 ] || fail "Prometheus ran as uid $uid, not 10002"
docker stop -t 30 "$tag-prometheus" >/dev/null
code=$(docker inspect -f '{{.State.ExitCode}}' "$tag-prometheus")
[ "$code" = 0 ] || fail "Prometheus exited $code after SIGTERM"
step "$(echo "$out" | head -1); ready, query API answers, uid $uid, exited 0 on docker stop"
for i in scps:latest scps-prometheus:latest; do
  echo "smoke.sh: $i $(docker image inspect -f '{{.Size}}' "$i" | awk '{ printf "%.1f MB", $1 / 1e6 }')"
done
echo "smoke.sh: passed"
