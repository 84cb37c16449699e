#!/usr/bin/env bash
# scps-engine-demo: a short run finishes (exit 0) with its per-stack report;
# bad flags and stray arguments exit 2 naming what was wrong.
#   engine_demo.sh SCPS_ENGINE_DEMO WORKLOAD
set -uo pipefail
demo=$1 workload=$2
status=0
out=$("$demo" --workload "$workload" --steps 3 --sc-memory 64M 2>&1)
rc=$?
if [ "$rc" != 0 ] || [[ "$out" != *"stack "*"max ids/partition"* ]]; then
  echo "FAILED: a 3-step run exited $rc:"; echo "$out"; status=1
fi
for bad in "--processes 2x" "--processes 65" "--sc-per-process 0" "--steps 5abc" "--steps 0" \
           "--steps 99999999999999999999" "--sc-memory 1e9" "stray-argument"; do
  what=${bad%% *}
  rc=0
  err=$("$demo" --workload "$workload" $bad 2>&1 >/dev/null) || rc=$?
  if [ "$rc" != 2 ] || [[ "$err" != *"$what"* ]]; then
    echo "FAILED: '$bad' exited $rc (want 2, naming $what): $err"; status=1
  fi
done
[ "$status" = 0 ] && echo "engine_demo: ok"
exit "$status"
