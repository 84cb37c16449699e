#!/usr/bin/env bash
# The main job: installs dependencies, builds scps, starts a local cluster of
# two scps-server processes (2 simulated SparseCores each) and trains the
# example click model against it with scps-trainer, then stops the cluster.
#   deploy/demo.sh [scps-trainer options, e.g. --steps 3000 --sequential]
# Default workload: deploy/workloads/ctr-demo.json.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

deploy/install-deps.sh
cmake -S . -B build >/dev/null
cmake --build build -j"$(nproc)" --target scps-server scps-trainer scps-loadgen scps-admin

workload=$repo/deploy/workloads/ctr-demo.json
. deploy/cluster.sh
scps_cluster_start build/server/scps-server "$workload" 2 2 64M
servers=$SCPS_CLUSTER_SERVERS
echo "demo.sh: cluster of 2 scps-server processes at $servers" >&2
build/client/scps-trainer --servers "$servers" --workload "$workload" "$@"
