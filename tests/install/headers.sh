#!/usr/bin/env bash
# Each public header, as installed, compiles alone as C11 without a warning:
#   headers.sh CC INCLUDEDIR HEADER...
set -euo pipefail
cc=$1 include=$2
shift 2
status=0
for h in "$@"; do
  if ! echo "#include <scps/$h>" | "$cc" -std=c11 -Wall -Wextra -pedantic -Werror -fsyntax-only -I"$include" -x c -; then
    echo "FAILED: <scps/$h> does not compile alone"; status=1
  fi
done
[ "$status" = 0 ] && echo "install_headers: $# headers compile alone"
exit "$status"
