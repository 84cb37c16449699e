#!/usr/bin/env bash
# Builds scps-prometheus:VERSION and scps-prometheus:latest from Debian's
# prometheus package: /usr/bin/prometheus and the C library it loads, made
# the way rootfs.sh makes the scps base (no shell, no package manager; the
# package's helpers, promtool and web console assets left out: the HTTP API
# is what the compose stack uses). Runs as
# user prometheus (uid 10002) with entrypoint prometheus, reading
# /etc/prometheus/prometheus.yml (a stand-alone default that scrapes itself;
# the compose stack mounts its own there) and keeping its TSDB in
# /var/lib/prometheus. Port 9090.
#
#   deploy/image/build-prometheus.sh
# Environment: SCPS_IMAGE_CACHE as for build.sh. Needs root or the docker group.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
case ${1:-} in
  -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "build-prometheus.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
esac
# shellcheck source=rootfs.sh
. "$here/rootfs.sh"
scps_image_need docker
start=$(date +%s%N)

# prometheus is a Go program loading only libc: its package's other
# dependencies (adduser, init-system-helpers and what they pull: perl, PAM,
# the web console's JavaScript libraries) are left out
scps_image_lists
keep=" prometheus $(scps_image_names libc6 | tr '\n' ' ') "
excluded=""
for p in $(scps_image_names prometheus); do
  case $keep in *" $p "*) ;; *) excluded+="$p " ;; esac
done

scps_prometheus_root() {
  local root=$1
  # the package's data directory goes: COPY --chown makes it, owned by the user
  rm -rf "$root/usr/bin/promtool" "$root/usr/share/prometheus" "$root/etc/prometheus"/* \
    "$root/var/lib/prometheus"
  mkdir -p "$root/etc/prometheus"
  printf '%s\n' 'global:' '  scrape_interval: 15s' 'scrape_configs:' \
    '  - job_name: prometheus' '    static_configs:' "      - targets: ['localhost:9090']" \
    >"$root/etc/prometheus/prometheus.yml"
  printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nprometheus:x:10002:10002:prometheus:/var/lib/prometheus:/usr/sbin/nologin\n' \
    >"$root/etc/passwd"
  printf 'root:x:0:\nprometheus:x:10002:\n' >"$root/etc/group"
}
base=$(scps_base_image scps-prometheus-base "prometheus" "$excluded" scps_prometheus_root)
version=$(scps_image_resolve prometheus "" | sed -n 's/^prometheus=//p')
version=${version%%+*}

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/data"
cp "$here/prometheus.Dockerfile" "$ctx/Dockerfile"
scps_image_build build-prometheus.sh "$base" "$version" "$ctx" "$start" "scps-prometheus:$version" scps-prometheus:latest
