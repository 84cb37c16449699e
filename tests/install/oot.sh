#!/usr/bin/env bash
# The installed library as a program outside this tree uses it: copies
# oot/prog.c to a scratch directory, builds it with pkg-config only
#   cc prog.c $(pkg-config --cflags --libs scps)
# (PKG_CONFIG_PATH at the prefix; $SCPS_OOT_CFLAGS first, the sanitizers of
# a sanitizer build), runs it against two scps-server processes started from
# the prefix on free loopback ports, and links it once more against
# libscps.a (pkg-config --static). Also checks the installed programs'
# --version.
#   oot.sh PREFIX LIBDIR
set -euo pipefail
prefix=$1 libdir=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../deploy/cluster.sh"
tmp=$SCPS_CLUSTER_DIR
cp "$here/oot/prog.c" "$tmp/prog.c"
cd "$tmp"

export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
# Every installed program's --version names it and the version scps.pc has.
version=$(pkg-config --modversion scps)
for p in scps-server scps-admin scps-loadgen scps-trainer; do
  got=$("$prefix/bin/$p" --version)
  [ "$got" = "$p $version" ] || { echo "FAILED: $p --version printed '$got', want '$p $version'"; exit 1; }
done
# shellcheck disable=SC2086,SC2046
cc ${SCPS_OOT_CFLAGS:-} -o prog prog.c $(pkg-config --cflags --libs scps)
readelf -d prog | grep -q 'NEEDED.*\[libscps\.so\.[0-9]*\]' || { echo "FAILED: prog does not need libscps.so.N"; exit 1; }
export LD_LIBRARY_PATH=$prefix/$libdir
./prog --version

# libscps.a with what pkg-config --static adds for it.
static_libs=$(pkg-config --static --libs scps)
# shellcheck disable=SC2086,SC2046
cc ${SCPS_OOT_CFLAGS:-} -o prog-static prog.c $(pkg-config --cflags scps) "$prefix/$libdir/libscps.a" \
  ${static_libs//-lscps/}
! readelf -d prog-static | grep -q 'NEEDED.*libscps' || { echo "FAILED: prog-static needs libscps.so"; exit 1; }
./prog-static --version

# Two tables, sum combiners, SGD, constant initial rows: what prog.c expects.
cat >config.json <<'JSON'
{"name": "oot", "batch_size": 8, "ids": {"distribution": "uniform", "seed": 1},
 "tables": [
  {"name": "ta", "vocabulary_size": 64, "embedding_dim": 4, "combiner": "sum",
   "optimizer": {"type": "sgd", "learning_rate": 0.5}, "initializer": {"type": "constant", "value": 0.25}},
  {"name": "tb", "vocabulary_size": 32, "embedding_dim": 8, "combiner": "sum",
   "optimizer": {"type": "sgd", "learning_rate": 0.5}, "initializer": {"type": "constant", "value": -0.5}}],
 "features": [{"name": "fa", "table": "ta", "valency": 3},
              {"name": "fb", "table": "tb", "valency": 2}]}
JSON
scps_cluster_start "$prefix/bin/scps-server" config.json 2 1 16M
./prog "$SCPS_CLUSTER_SERVERS"
./prog-static "$SCPS_CLUSTER_SERVERS"
echo "install_oot: ok"
