#!/usr/bin/env bash
# Builds the scps image scps:VERSION and scps:latest: the portable programs
# (scps-server, scps-admin, scps-loadgen, scps-trainer) installed with
# `cmake --install` into /usr/local, the example workloads under
# /usr/local/share/scps/workloads, user scps (uid 10001) owning /var/lib/scps
# (the checkpoint volume's mount point), on a base image holding only the
# runtime libraries they load (rootfs.sh; cached, so a rebuild after a code
# change only compiles and copies the programs). Entrypoint: scps-server.
#
#   deploy/image/build.sh [--build-dir DIR | --from-build DIR] [--jobs N] [--tag NAME]
#     --build-dir DIR  CMake build tree for the image's programs (default
#                      build-image/ in the checkout; always SCPS_NATIVE=OFF)
#     --from-build DIR an existing build tree's programs, configured as it
#                      is (the tests' own build); refused if it is tuned for
#                      this CPU or built with sanitizers
#     --jobs N         parallel compile jobs (default: nproc)
#     --tag NAME       tag the image NAME only, instead of scps:VERSION and
#                      scps:latest (a test's own image beside the user's)
# Environment: SCPS_IMAGE_CACHE, the base rootfs cache (default
# ${XDG_CACHE_HOME:-~/.cache}/scps-image). Needs root or the docker group.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build_dir=$repo/build-image
jobs=$(nproc)
tags=()
from_build=0
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) build_dir=$(realpath -m "$2"); shift 2 ;;
    --from-build) build_dir=$(realpath -m "$2"); from_build=1; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --tag) tags=("$2"); shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done
# shellcheck source=rootfs.sh
. "$here/rootfs.sh"
scps_image_need cmake docker
start=$(date +%s%N)

# Runtime packages: what the programs load (ldd: gRPC, protobuf-c, libuv,
# OpenSSL and their dependencies), libmicrohttpd12 (the /metrics endpoint
# loads it at run time) and the CA bundle. Excluded: maintainer-script
# helpers no program runs (debconf, openssl's command), and the C++ protobuf
# libraries libgrpc29 declares but no program loads (smoke.sh runs each).
seeds="libgrpc29 libprotobuf-c1 libuv1 libssl3 libmicrohttpd12 ca-certificates"
excluded="debconf openssl libprotobuf32 libprotoc32"

scps_image_root() {
  local root=$1 f
  # update-ca-certificates' bundle, made without running it
  mkdir -p "$root/etc/ssl/certs"
  for f in "$root"/usr/share/ca-certificates/*/*.crt; do cat "$f"; done \
    >"$root/etc/ssl/certs/ca-certificates.crt"
  printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nscps:x:10001:10001:scps:/var/lib/scps:/usr/sbin/nologin\n' \
    >"$root/etc/passwd"
  printf 'root:x:0:\nscps:x:10001:\n' >"$root/etc/group"
  # libgrpc29's other libraries: the C++ code generator's support and the
  # build without TLS, which no program links
  rm -f "$root"/usr/lib/x86_64-linux-gnu/libgrpc_{unsecure,plugin_support}.so*
}
base=$(scps_base_image scps-base "$seeds" "$excluded" scps_image_root)
echo "build.sh: base image $base" >&2

if [ $from_build -eq 1 ]; then
  cache=$build_dir/CMakeCache.txt
  [ -f "$cache" ] || { echo "build.sh: --from-build $build_dir: no CMakeCache.txt there" >&2; exit 2; }
  for opt in SCPS_NATIVE SCPS_SANITIZE SCPS_TSAN SCPS_FUZZ; do
    if grep -Eq "^$opt:BOOL=(ON|TRUE|1)$" "$cache"; then
      echo "build.sh: --from-build $build_dir: configured with $opt=ON; an image needs a portable plain build" >&2
      exit 2
    fi
  done
else
  cmake -S "$repo" -B "$build_dir" -DSCPS_NATIVE=OFF -DSCPS_MARCH= >/dev/null
fi
cmake --build "$build_dir" -j"$jobs" --target scps-server scps-admin scps-loadgen scps-trainer scps scps_static
version=$("$build_dir/server/scps-server" --version | awk '{print $2}')
[ "${#tags[@]}" -ne 0 ] || tags=("scps:$version" scps:latest)

ctx=$build_dir/image-context
rm -rf "$ctx" "$build_dir/image-prefix"
cmake --install "$build_dir" --prefix "$build_dir/image-prefix" --strip >/dev/null
mkdir -p "$ctx/usr/local/bin" "$ctx/usr/local/share/scps" "$ctx/home"
for p in scps-server scps-admin scps-loadgen scps-trainer; do
  cp "$build_dir/image-prefix/bin/$p" "$ctx/usr/local/bin/"
done
cp -r "$repo/deploy/workloads" "$ctx/usr/local/share/scps/"
cp "$here/scps.Dockerfile" "$ctx/Dockerfile"

scps_image_build build.sh "$base" "$version" "$ctx" "$start" "${tags[@]}"

