#!/usr/bin/env bash
# scps-admin's checkpoint commands on a real checkpoint (written by
# ckpt_fixture, 2 x 2 SparseCores, shared-tables.json): export of every table
# and slot loads in numpy equal to the rows read through the engine; convert
# to 1 x 3 then verify and export give the same arrays; convert to e4m3 and
# bfloat16 and back; export --process of one process's part alone; list
# shows the step;
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

# Each process's part alone, as a process keeps it on a volume of its own:
# its SparseCores' rows as in the full export, NaN for the others, and the
# parts together cover every row once.
for p in 0 1; do
  mkdir -p "$tmp/part$p"
  cp "$dir/manifest.p$p.json" "$tmp/part$p/"
  for f in $(/usr/bin/python3 -c 'import json,sys; print(" ".join(f["name"] for f in json.load(open(sys.argv[1]))["files"]))' \
             "$dir/manifest.p$p.json"); do
    cp "$dir/$f" "$tmp/part$p/"
  done
  "$admin" checkpoint export "$tmp/part$p" --process $p --table users --out "$tmp/npy/users.p$p.npy" >/dev/null \
    || fail "export of part $p"
  "$admin" checkpoint export "$tmp/part$p" --process $p --table users --slot accumulator \
    --out "$tmp/npy/users.slot0.p$p.npy" >/dev/null || fail "export of part $p's slot"
done
/usr/bin/python3 - "$tmp/npy" <<'PY' || fail "export of the parts"
import sys, numpy as np
out = sys.argv[1]
for name in ("users", "users.slot0"):
    whole = np.load(f"{out}/{name}.npy")
    parts = [np.load(f"{out}/{name}.p{p}.npy") for p in (0, 1)]
    held = [~np.isnan(a).any(axis=1) for a in parts]
    assert all(np.isnan(a[~h]).all() for a, h in zip(parts, held)), f"{name}: a row half held"
    assert (held[0] ^ held[1]).all(), f"{name}: the parts do not hold every row exactly once"
    for a, h in zip(parts, held):
        assert 0 < h.sum() < len(h) and np.array_equal(a[h], whole[h]), f"{name}: a part's rows differ"
print("each part's export holds its rows, NaN elsewhere")
PY
if "$admin" checkpoint export "$tmp/part0" --table users --out "$tmp/x.npy" 2>"$tmp/err"; then
  fail "export of a part without --process"
fi
grep -q "manifest.p1.json" "$tmp/err" || fail "incomplete checkpoint message: $(cat "$tmp/err")"

"$admin" checkpoint convert "$dir" --to-processes 1 --to-sc-per-process 3 --out "$tmp/conv" || fail "convert"
"$admin" checkpoint verify "$tmp/conv/step-000000000017" || fail "verify of the converted checkpoint"
check_exports "$tmp/conv/step-000000000017" "$tmp/npy-conv" || fail "export after convert"

# Storage formats: items' rows to e4m3 and users' linear slot to bfloat16
# (smaller files, every value within the format's rounding of the original,
# the other arrays unchanged), then back to float32: the same values again.
"$admin" checkpoint convert "$dir" --storage items=e4m3 --storage users.linear=bfloat16 --out "$tmp/c8" \
  || fail "convert to e4m3 and bfloat16"
c8=$tmp/c8/step-000000000017
"$admin" checkpoint verify "$c8" || fail "verify of the e4m3 checkpoint"
"$admin" checkpoint convert "$c8" --storage items=float32 --storage users.linear=float32 --out "$tmp/c32" \
  || fail "convert back to float32"
for d in "$c8" "$tmp/c32/step-000000000017"; do
  n=$(basename "$(dirname "$d")")
  mkdir -p "$tmp/npy-$n"
  "$admin" checkpoint export "$d" --table items --out "$tmp/npy-$n/items.npy" >/dev/null || fail "export items of $n"
  "$admin" checkpoint export "$d" --table users --slot linear --out "$tmp/npy-$n/linear.npy" >/dev/null \
    || fail "export linear of $n"
  "$admin" checkpoint export "$d" --table users --out "$tmp/npy-$n/users.npy" >/dev/null || fail "export users of $n"
done
/usr/bin/python3 - "$tmp" "$dir" "$c8" <<'PY' || fail "storage conversion"
import os, sys, numpy as np
tmp, src, c8 = sys.argv[1:4]
dump = f"{tmp}/dump"
items = np.fromfile(f"{dump}/items.f32", dtype="<f4").reshape(50000, 32)
linear = np.fromfile(f"{dump}/users.slot1.f32", dtype="<f4").reshape(20000, 24)
users = np.fromfile(f"{dump}/users.f32", dtype="<f4").reshape(20000, 24)
for n in ("c8", "c32"):
    i8, l16, u = (np.load(f"{tmp}/npy-{n}/{k}.npy") for k in ("items", "linear", "users"))
    assert np.array_equal(u, users), f"{n}: users' rows changed"
    # e4m3 keeps 3 mantissa bits: within 2^-4 relative of each value, or of the row's scale
    scale = np.abs(items).max(axis=1, keepdims=True)
    assert np.all(np.abs(i8 - items) <= np.maximum(np.abs(items) * 2**-4, scale * 2**-9)), f"{n}: items off"
    assert not np.array_equal(i8, items), f"{n}: items not rounded"
    assert np.all(np.abs(l16 - linear) <= np.abs(linear) * 2**-8), f"{n}: linear off"
    if n == "c8":
        first = (i8, l16)
    else:
        assert np.array_equal(i8, first[0]) and np.array_equal(l16, first[1]), "float32 again: values changed"
size = lambda d: sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".bin"))
assert size(c8) < size(src), (size(c8), size(src))
print("storage conversion: %d -> %d data bytes, values within the formats' rounding" % (size(src), size(c8)))
PY
if "$admin" checkpoint convert "$dir" --storage items.velocity=e4m3 --out "$tmp/cx" 2>"$tmp/err"; then
  fail "convert of a slot sgd does not have"
fi
grep -q "no optimizer slot 'velocity'" "$tmp/err" || fail "unknown slot message: $(cat "$tmp/err")"

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
