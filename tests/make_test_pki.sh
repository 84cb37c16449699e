#!/usr/bin/env bash
# Makes the certificates the TLS tests use, fresh at each run (keys are never
# committed), with the openssl command line:
#   tests/make_test_pki.sh DIR
# DIR/ca.pem           a CA, and other-ca.pem a second one that signed nothing we trust
# DIR/server.{pem,key} a server certificate of ca for 127.0.0.1 and localhost
# DIR/client.{pem,key} a client certificate of ca
# DIR/stranger.{pem,key} a client certificate of other-ca
# Keys are EC P-256, unencrypted, mode 0600; everything expires in 2 days.
set -euo pipefail
dir=$1
mkdir -p "$dir"
cd "$dir"
umask 077
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)

make_ca() { # NAME CN
  openssl req -x509 "${ec[@]}" -keyout "$1.key" -out "$1.pem" -days 2 -subj "/CN=$2" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
}

make_leaf() { # NAME CN SIGNING_CA EXTENDED_KEY_USAGE [SUBJECT_ALT_NAME]
  openssl req "${ec[@]}" -keyout "$1.key" -out "$1.csr" -subj "/CN=$2" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$4"
    [ -z "${5:-}" ] || echo "subjectAltName=$5"
  } >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -out "$1.pem" -days 2 \
    -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

make_ca ca "scps test CA"
make_ca other-ca "scps other CA"
make_leaf server "scps test server" ca serverAuth "IP:127.0.0.1,DNS:localhost"
make_leaf client "scps test client" ca clientAuth
make_leaf stranger "scps stranger client" other-ca clientAuth
