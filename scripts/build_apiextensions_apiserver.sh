#!/usr/bin/env bash
# Builds the real upstream API server k8s.io/apiextensions-apiserver (0.36.x = Kubernetes 1.36)
# from Debian sid's golang-*-dev source packages, in GOPATH mode, with Go 1.26 from forky:
# no Go module proxy and no GitHub are needed, only Debian's archive.
#
#   scripts/build_apiextensions_apiserver.sh DEBIAN_DIR OUT_DIR
#
# DEBIAN_DIR gets sid/ (the sources, via fetch_debian.sh) and forky/ (Go 1.26, fetched only if
# DEBIAN_DIR/forky/root/usr/lib/go-1.26/bin/go is missing). OUT_DIR gets
#   apiextensions-apiserver             stripped (-s -w), as releases are
#   apiextensions-apiserver.unstripped  with symbols, for `go tool nm`
#   apiextensions-apiserver.packages    the Debian packages (name_version) it was built from
# A second run fetches nothing new and skips the build while the outputs are newer than the
# inputs (unpacked packages, the Go toolchain, this script). Env: GOCACHE (default
# DEBIAN_DIR/go-build-cache), CGO_ENABLED (default 0: a static binary like Kubernetes'
# release builds, and no C compiler needed).
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 DEBIAN_DIR OUT_DIR" >&2
  exit 2
fi
mkdir -p "$1" "$2"
DEBIAN_DIR=$(cd "$1" && pwd)
OUT_DIR=$(cd "$2" && pwd)
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
FETCH="$(dirname "$SELF")/fetch_debian.sh"
TOP=golang-k8s-apiextensions-apiserver-dev

# Go 1.26: the Kubernetes 1.36 sources need it (go.mod says go 1.26.0); bookworm has none.
GOROOT_DIR="$DEBIAN_DIR/forky/root/usr/lib/go-1.26"
if [ ! -x "$GOROOT_DIR/bin/go" ] || [ ! -d "$GOROOT_DIR/src/net/http" ]; then
  bash "$FETCH" "$DEBIAN_DIR" forky golang-1.26-go golang-1.26-src
fi

# The sources: the top package first (this also makes the apt state read below), then the
# closure of its golang-*-dev dependencies, computed from sid's index rather than pinned, so
# that the list follows sid. Virtual names (<...>) are skipped: their providers are listed.
bash "$FETCH" "$DEBIAN_DIR" sid "$TOP"
S="$DEBIAN_DIR/sid/apt"
APT_OPTS=(
  -o "Dir::Etc::sourcelist=$S/sources.list" -o "Dir::Etc::sourceparts=-"
  -o "Dir::State::Lists=$S/lists" -o "Dir::State::status=$S/status" -o "Dir::Cache=$S/cache"
  -o "APT::Architecture=amd64" -o "Debug::NoLocking=1" -q
)
mapfile -t PKGS < <(apt-cache "${APT_OPTS[@]}" depends --recurse --no-recommends --no-suggests \
  --no-conflicts --no-breaks --no-replaces --no-enhances "$TOP" | grep -E '^golang-.*-dev$' | sort -u)
if [ ${#PKGS[@]} -lt 50 ]; then
  echo "dependency closure of $TOP looks wrong (${#PKGS[@]} packages)" >&2
  exit 1
fi
bash "$FETCH" "$DEBIAN_DIR" sid "${PKGS[@]}"

BIN="$OUT_DIR/apiextensions-apiserver"
UNSTRIPPED="$BIN.unstripped"
# Inputs are judged by dpkg -x's marker files, touched when a .deb is unpacked (the unpacked
# files and the .debs keep the archive's old mtimes, which would hide an update).
if [ -x "$BIN" ] && [ -x "$UNSTRIPPED" ] && [ -z "$(find "$DEBIAN_DIR/sid/root" "$DEBIAN_DIR/forky/root" \
     -maxdepth 1 -name '.unpacked-*' \( -newer "$BIN" -o -newer "$UNSTRIPPED" \) -print -quit)" ] &&
   [ ! "$SELF" -nt "$BIN" ] && [ ! "$SELF" -nt "$UNSTRIPPED" ]; then
  echo "up to date: $BIN"
  exit 0
fi

# GOPATH mode over Debian's /usr/share/gocode tree: Debian ships no go.sum-complete module
# cache, and its packages are laid out by import path. GOTOOLCHAIN=local stops any toolchain
# download; -buildvcs=false since the tree is no VCS checkout. The env file of the user
# (go env -w) is overridden by these variables.
export GOROOT="$GOROOT_DIR"
export GOPATH="$DEBIAN_DIR/sid/root/usr/share/gocode"
export GOTOOLCHAIN=local GO111MODULE=off GOFLAGS=-buildvcs=false GOPROXY=off
export GOCACHE="${GOCACHE:-$DEBIAN_DIR/go-build-cache}"
export CGO_ENABLED="${CGO_ENABLED:-0}"
GO="$GOROOT/bin/go"
SRC="$GOPATH/src/k8s.io/apiextensions-apiserver"
"$GO" version

cd "$SRC"
start=$(date +%s)
# Build to temporary names and rename, so that an interrupted build never looks up to date.
"$GO" build -trimpath -ldflags "-s -w" -o "$BIN.tmp" .
mid=$(date +%s)
"$GO" build -trimpath -o "$UNSTRIPPED.tmp" .
end=$(date +%s)
mv "$UNSTRIPPED.tmp" "$UNSTRIPPED"
mv "$BIN.tmp" "$BIN"
(cd "$DEBIAN_DIR/sid/debs" && for p in "${PKGS[@]}"; do ls "${p}_"*.deb; done) |
  sed 's/_all\.deb$//; s/_amd64\.deb$//; s/%3a/:/' >"$BIN.packages"
echo "built $BIN ($(stat -c %s "$BIN") bytes, $((mid - start))s) and $UNSTRIPPED ($(stat -c %s "$UNSTRIPPED") bytes, $((end - mid))s) from ${#PKGS[@]} packages"
