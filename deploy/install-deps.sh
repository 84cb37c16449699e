#!/usr/bin/env bash
# Installs every Debian package scps needs to build, test and benchmark.
# Idempotent: packages already present are left alone and nothing is fetched.
set -euo pipefail

packages=(
  build-essential cmake pkgconf
  libgrpc-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler libuv1-dev
  python3 python3-numpy python3-torch python3-grpcio python3-grpc-tools python3-h2
  libgomp1 gnuplot-nox
  redis-server redis-tools
  libssl-dev openssl
  libmicrohttpd-dev python3-prometheus-client
  libopenblas-dev python3-faiss
  docker-compose
  clang libclang-rt-14-dev
  python3-dev python3-pytest python3-pip python3-venv python3-setuptools python3-wheel
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
