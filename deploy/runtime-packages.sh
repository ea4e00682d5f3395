#!/usr/bin/env bash
# Prints the Debian packages, as package=version, that provide the shared libraries BINARY
# links against: what the slim stage of the Dockerfile installs. Derived from the built binary
# (ldd + dpkg), so the image cannot drift from the build (e.g. libbpf1 from bookworm-backports,
# pinned to the version the agent was built with).
#   deploy/runtime-packages.sh build/stormwatch
set -euo pipefail
bin=${1:?usage: runtime-packages.sh BINARY}

owner() {  # the package owning a library path; bookworm is usr-merged, dpkg knows one spelling
  local p=$1
  for cand in "$p" "$(readlink -f "$p")" "${p#/usr}" "/usr$p"; do
    if out=$(dpkg -S "$cand" 2>/dev/null); then
      echo "${out%%: *}"
      return 0
    fi
  done
  echo "runtime-packages: no package owns $p" >&2
  return 1
}

missing=$(ldd "$bin" | awk '/not found/{print $1}')
if [ -n "$missing" ]; then
  echo "runtime-packages: unresolved libraries: $missing" >&2
  exit 1
fi
ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u |
  while read -r lib; do owner "$lib"; done | sort -u |
  while read -r pkg; do dpkg-query -W -f='${Package}=${Version}\n' "$pkg"; done
