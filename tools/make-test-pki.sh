#!/usr/bin/env bash
# Makes a throwaway PKI for trying `cra serve --tls-cert/--tls-key/--tls-client-ca` and for the
# TLS tests: `bash tools/make-test-pki.sh DIR` writes into DIR (created if absent)
#
#   ca.pem, ca.key            a CA (P-256), valid 30 days
#   server.pem, server.key    a server leaf for 127.0.0.1 and localhost, issued by ca
#   client.pem, client.key    a client leaf, subject CN=agent-7,O=Example, issued by ca
#   nobody.pem, nobody.key    a client leaf, subject CN=nobody,O=Example, issued by ca
#   other-ca.pem              a second CA, and
#   stranger.pem, stranger.key  a client leaf, subject CN=agent-7,O=Example, issued by it
#
# Needs openssl 1.1.1 or later. Never use these files for anything but tests.
set -euo pipefail

dir=${1:?usage: make-test-pki.sh DIR}
mkdir -p "$dir"
cd "$dir"

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

ca() { # ca NAME SUBJECT
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 30 -subj "$2" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}

leaf() { # leaf NAME SUBJECT ISSUER EXTENSIONS [openssl req options...]
  local name=$1 subject=$2 issuer=$3 ext=$4
  shift 4
  key "$name.key"
  openssl req -new -key "$name.key" -out "$name.csr" -subj "$subject" "$@" 2>/dev/null
  printf '%b' "$ext" > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA "$issuer.pem" -CAkey "$issuer.key" \
    -set_serial "0x$(openssl rand -hex 8)" -days 30 -out "$name.pem" -extfile "$name.ext" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

client_ext='basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n'

ca ca "/CN=cra test CA"
leaf server "/CN=localhost" ca \
  'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n'
leaf client "/O=Example/CN=agent-7" ca "$client_ext"
leaf nobody "/O=Example/CN=nobody" ca "$client_ext"
ca other-ca "/CN=another test CA"
leaf stranger "/O=Example/CN=agent-7" other-ca "$client_ext"
