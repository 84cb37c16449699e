#!/usr/bin/env bash
# The installed CMake package as a project outside this tree uses it: copies
# oot/ (prog.c and a CMakeLists.txt with find_package(scps)) to a scratch
# directory, configures it with CMAKE_PREFIX_PATH at the prefix, builds it
# and runs `prog --version` (found through the rpath CMake sets).
#   consumer.sh PREFIX
set -euo pipefail
prefix=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$here/oot/prog.c" "$here/oot/CMakeLists.txt" "$tmp/"
cmake -S "$tmp" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS="${SCPS_OOT_CFLAGS:-}" >/dev/null
cmake --build "$tmp/build" >/dev/null
"$tmp/build/prog" --version
echo "install_cmake: ok"
