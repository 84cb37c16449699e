#!/usr/bin/env bash
# Makes a minimal Debian root filesystem from just the named runtime packages
# and their dependencies, unpacked with dpkg-deb (no maintainer scripts run,
# no shell, no package manager), imports it as a local Docker image, and
# caches the tarball keyed by the exact package versions. Sourced by build.sh
# and build-prometheus.sh; run alone with --help for its interface.
#
#   scps_base_image NAME "SEED PACKAGES" "EXCLUDED PACKAGES" ROOTFS_HOOK
# prints the local image name NAME:KEY on stdout (KEY: 16 hex digits of the
# SHA-256 of the resolved package=version list and of this file), building it
# only when no such image exists. ROOTFS_HOOK is a shell function called with
# the unpacked root as its argument before the tarball is made (users, dirs).
set -euo pipefail

scps_image_cache=${SCPS_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/scps-image}
scps_image_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

scps_image_need() {
  local missing=() t
  for t in "$@"; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
  if [ "${#missing[@]}" -ne 0 ]; then
    echo "scps-image: missing ${missing[*]} (deploy/install-deps.sh installs them)" >&2
    exit 1
  fi
}

# The dependency closure of the seeds, as if installed on an empty system
# (no Recommends), minus the excluded packages: "name=version" lines, sorted.
scps_image_resolve() {
  local seeds=$1 excluded=$2 status out
  status=$(mktemp)
  # shellcheck disable=SC2086
  if ! out=$(apt-get -s -o Dir::State::status="$status" -o APT::Install-Recommends=false \
      install $seeds 2>&1); then
    rm -f "$status"
    echo "scps-image: apt-get cannot resolve $seeds:" >&2
    echo "$out" | grep '^E:' >&2 || true
    return 1
  fi
  rm -f "$status"
  echo "$out" | awk -v ex=" $excluded " '$1 == "Inst" {
      v = $3; gsub(/[()]/, "", v)
      if (index(ex, " " $2 " ") == 0) print $2 "=" v
    }' | sort
}

# Package lists to resolve against: a fresh machine has none until
# apt-get update, which only root may run.
scps_image_lists() {
  scps_image_resolve libc6 "" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "scps-image: apt has no package lists: run apt-get update as root" >&2
    exit 1
  fi
  echo "scps-image: apt has no package lists; running apt-get update" >&2
  apt-get update -qq >&2
}

# The names of the seeds' dependency closure, one a line.
scps_image_names() {
  scps_image_resolve "$1" "" | cut -d= -f1
}

# The file name apt-get download gives NAME=VERSION, as a glob (any arch).
scps_image_debname() {
  local v=${1#*=}
  echo "${1%%=*}_${v//:/%3a}_*.deb"
}

scps_base_image() {
  local name=$1 seeds=$2 excluded=$3 hook=$4
  scps_image_need apt-get dpkg-deb docker tar sha256sum
  local pkgs key
  scps_image_lists
  pkgs=$(scps_image_resolve "$seeds" "$excluded")
  if [ -z "$pkgs" ]; then
    echo "scps-image: apt-get resolved no packages for: $seeds (run apt-get update)" >&2
    exit 1
  fi
  key=$( { printf '%s\n' "$pkgs"; cat "${BASH_SOURCE[0]}"; declare -f "$hook"; } |
    sha256sum | cut -c1-16)
  local image=$name:$key
  if docker image inspect "$image" >/dev/null 2>&1; then
    echo "$image"; return
  fi
  local tarball=$scps_image_cache/$name-$key.tar
  if [ ! -s "$tarball" ]; then
    echo "scps-image: making $name rootfs from $(echo "$pkgs" | wc -l) packages" >&2
    mkdir -p "$scps_image_cache/debs"
    local work
    work=$(mktemp -d)
    # shellcheck disable=SC2064
    trap "rm -rf '$work'" RETURN
    local p deb want=()
    while IFS= read -r p; do
      compgen -G "$scps_image_cache/debs/$(scps_image_debname "$p")" >/dev/null || want+=("$p")
    done <<<"$pkgs"
    if [ "${#want[@]}" -ne 0 ]; then
      # as root, apt would warn that its _apt user cannot write the cache
      local sandbox=()
      [ "$(id -u)" -ne 0 ] || sandbox=(-o APT::Sandbox::User=root)
      (cd "$scps_image_cache/debs" && apt-get download -qq "${sandbox[@]}" "${want[@]}") >&2
    fi
    local root=$work/root
    # merged /usr, as Debian bookworm's debootstrap lays it out
    mkdir -p "$root"/usr/{bin,sbin,lib,lib64} "$root"/{etc,tmp,var/tmp,root,proc,sys,dev}
    chmod 1777 "$root/tmp" "$root/var/tmp"
    local d
    for d in bin sbin lib lib64; do ln -s "usr/$d" "$root/$d"; done
    while IFS= read -r p; do
      deb=$(compgen -G "$scps_image_cache/debs/$(scps_image_debname "$p")")
      dpkg-deb --fsys-tarfile "$deb" |
        tar -x --keep-directory-symlink --no-same-owner -C "$root"
    done <<<"$pkgs"
    # what no program reads at run time
    rm -rf "$root"/usr/share/{doc,man,info,locale,lintian,bug,bash-completion,gcc,gdb} \
      "$root"/usr/lib/x86_64-linux-gnu/gconv "$root"/etc/{init.d,default,logrotate.d,cron.*}
    printf 'hosts: files dns\npasswd: files\ngroup: files\n' >"$root/etc/nsswitch.conf"
    "$hook" "$root"
    tar -C "$root" --numeric-owner --owner=0 --group=0 -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    # one base per name is kept: older keys' tarballs and tags go (an image
    # still built on an old base keeps its layers until it is removed)
    local old
    for old in "$scps_image_cache/$name"-????????????????.tar; do
      [ "$old" = "$tarball" ] || [ ! -e "$old" ] || rm -f "$old"
    done
    docker image ls --format '{{.Repository}}:{{.Tag}}' "$name" | grep -vxF "$image" |
      while IFS= read -r old; do docker rmi "$old" >/dev/null 2>&1 || true; done
  fi
  docker import --message "scps-image $name from $(echo "$pkgs" | wc -l) Debian packages" \
    "$tarball" "$image" >/dev/null
  echo "$image"
}

# docker build of CONTEXT FROM the local image BASE, tagged with every TAG,
# then "SCRIPT: TAG ... SIZE MB, built in T s" with T counted from START
# (date +%s%N). The classic builder takes a local FROM image as it is; its
# deprecation notice is shown only when the build fails.
#   scps_image_build SCRIPT BASE VERSION CONTEXT START TAG...
scps_image_build() {
  local script=$1 base=$2 version=$3 ctx=$4 start=$5 log t
  shift 5
  local tag_args=()
  for t in "$@"; do tag_args+=(-t "$t"); done
  log=$(mktemp)
  if ! DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE=$base" --build-arg "VERSION=$version" \
    "${tag_args[@]}" "$ctx" >/dev/null 2>"$log"; then
    cat "$log" >&2; rm -f "$log"; exit 1
  fi
  rm -f "$log"
  local end size
  end=$(date +%s%N)
  size=$(docker image inspect -f '{{.Size}}' "$1")
  awk -v n="$script" -v v="$*" -v s="$size" -v t=$(( (end - start) / 1000000 )) \
    'BEGIN { printf "%s: %s %.1f MB, built in %.1f s\n", n, v, s / 1e6, t / 1e3 }'
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
  [ "${1:-}" = --help ] || exit 2
fi
