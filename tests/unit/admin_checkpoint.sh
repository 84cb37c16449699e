#!/usr/bin/env bash
# scps-admin's checkpoint commands on a real checkpoint (written by
# ckpt_fixture, 2 x 2 SparseCores, shared-tables.json): export of every table
# and slot loads in numpy equal to the rows read through the engine; convert
# to 1 x 3 then verify and export give the same arrays; list shows the step;
# a flipped byte makes verify fail naming the file.
#   admin_checkpoint.sh SCPS_ADMIN CKPT_FIXTURE WORKLOAD
set -euo pipefail
admin=$1 fixture=$2 workload=$3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/scps_admin_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "admin_checkpoint: FAILED: $*" >&2; exit 1; }

mkdir -p "$tmp/dump"
"$fixture" "$workload" "$tmp/root" 2 2 17 "$tmp/dump"
dir=$tmp/root/step-000000000017

"$admin" checkpoint list "$tmp/root" | tee "$tmp/list.txt"
grep -q '^000000000017 *complete' "$tmp/list.txt" || fail "list does not show step 17 complete"
"$admin" checkpoint verify "$dir" || fail "verify of a good checkpoint"

# Exports every table and slot of DIR into OUT and compares them with the dumps.
check_exports() { # DIR OUT
  mkdir -p "$2"
  for t in items users; do
    "$admin" checkpoint export "$1" --table $t --out "$2/$t.npy" >/dev/null
  done
  "$admin" checkpoint export "$1" --table users --slot accumulator --out "$2/users.slot0.npy" >/dev/null
  "$admin" checkpoint export "$1" --table users --slot linear --out "$2/users.slot1.npy" >/dev/null
  /usr/bin/python3 - "$2" "$tmp/dump" <<'PY'
import sys, numpy as np
out, dump = sys.argv[1], sys.argv[2]
shapes = {"items": (50000, 32), "users": (20000, 24)}
for name, shape in [("items", shapes["items"]), ("users", shapes["users"]),
                    ("users.slot0", shapes["users"]), ("users.slot1", shapes["users"])]:
    a = np.load(f"{out}/{name}.npy")
    b = np.fromfile(f"{dump}/{name}.f32", dtype="<f4").reshape(shape)
    assert a.dtype == np.float32 and a.shape == shape, (name, a.dtype, a.shape)
    assert np.array_equal(a, b), f"{name}: {np.count_nonzero(a != b)} values differ"
print("exports equal the engine's rows and slots")
PY
}
check_exports "$dir" "$tmp/npy" || fail "export"

"$admin" checkpoint convert "$dir" --to-processes 1 --to-sc-per-process 3 --out "$tmp/conv" || fail "convert"
"$admin" checkpoint verify "$tmp/conv/step-000000000017" || fail "verify of the converted checkpoint"
check_exports "$tmp/conv/step-000000000017" "$tmp/npy-conv" || fail "export after convert"

# Errors: an unknown slot or table, a flipped byte.
if "$admin" checkpoint export "$dir" --table items --slot accumulator --out "$tmp/x.npy" 2>"$tmp/err"; then
  fail "export of a slot sgd does not have"
fi
grep -q "no slot 'accumulator'" "$tmp/err" || fail "unknown slot message: $(cat "$tmp/err")"
if "$admin" checkpoint export "$dir" --table nosuch --out "$tmp/x.npy" 2>"$tmp/err"; then
  fail "export of a table the checkpoint does not have"
fi
grep -q "no table 'nosuch' (its tables: .*'users'" "$tmp/err" || fail "unknown table message: $(cat "$tmp/err")"
printf '\x55' | dd of="$dir/1.sc2.bin" bs=1 seek=100 conv=notrunc status=none
if "$admin" checkpoint verify "$dir" 2>"$tmp/err"; then fail "verify passed a flipped byte"; fi
grep -q "1.sc2.bin" "$tmp/err" || fail "verify message does not name the file: $(cat "$tmp/err")"
echo "admin_checkpoint: ok"
