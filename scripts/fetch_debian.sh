#!/usr/bin/env bash
# Downloads Debian packages from a newer suite (trixie, forky, sid) and unpacks them into a
# folder of the build, never onto the bookworm system: apt gets a sources list, a state folder
# and an empty dpkg status of its own, `apt-get download` fetches the .debs, `dpkg -x` unpacks.
#
#   scripts/fetch_debian.sh DEST SUITE PACKAGE[=VERSION]...
#
# DEST/SUITE/root is the unpacked tree (e.g. DEST/sid/root/usr/lib/go-1.27/bin/go); the .debs
# stay in DEST/SUITE/debs, so a second run with the same packages downloads nothing. Used by
# scripts/setup.sh for the Go toolchain matrix, x/net versions, etcd 3.5 and the real upstream
# API server's sources.
set -euo pipefail

if [ $# -lt 3 ]; then
  echo "usage: $0 DEST SUITE PACKAGE..." >&2
  exit 2
fi
DEST=$1
SUITE=$2
shift 2

STATE="$DEST/$SUITE/apt"
DEBS="$DEST/$SUITE/debs"
ROOT="$DEST/$SUITE/root"
mkdir -p "$STATE/lists/partial" "$STATE/cache/archives/partial" "$STATE/etc/preferences.d" "$DEBS" "$ROOT"
: >"$STATE/status"
cat >"$STATE/sources.list" <<EOF
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $SUITE main
EOF

APT_OPTS=(
  -o "Dir::Etc::sourcelist=$STATE/sources.list"
  -o "Dir::Etc::sourceparts=-"
  -o "Dir::Etc::preferencesparts=$STATE/etc/preferences.d"
  -o "Dir::State::Lists=$STATE/lists"
  -o "Dir::State::status=$STATE/status"
  -o "Dir::Cache=$STATE/cache"
  -o "APT::Architecture=amd64"
  -o "Debug::NoLocking=1"
  -o "APT::Sandbox::User=root"   # the state folders are ours, not _apt's
  -q
)

# The index is refreshed at most once an hour: CI runs on a fresh machine anyway.
stamp="$STATE/updated"
if [ ! -f "$stamp" ] || [ -n "$(find "$stamp" -mmin +60 2>/dev/null)" ]; then
  apt-get "${APT_OPTS[@]}" update >/dev/null
  touch "$stamp"
fi

missing=()
for pkg in "$@"; do
  name=${pkg%%=*}
  if ! ls "$DEBS/${name}_"*.deb >/dev/null 2>&1; then missing+=("$pkg"); fi
done
if [ ${#missing[@]} -gt 0 ]; then
  (cd "$DEBS" && apt-get "${APT_OPTS[@]}" download "${missing[@]}" >/dev/null)
fi
for pkg in "$@"; do
  name=${pkg%%=*}
  for deb in "$DEBS/${name}_"*.deb; do
    marker="$ROOT/.unpacked-$(basename "$deb")"
    [ -f "$marker" ] && continue
    dpkg -x "$deb" "$ROOT"
    touch "$marker"
  done
done
