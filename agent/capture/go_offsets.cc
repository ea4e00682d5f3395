#include "agent/capture/go_offsets.h"

#include <charconv>
#include <cstring>
#include <set>

namespace stormwatch {
namespace {

// The layout read by bpf/gohttp.bpf.c since responseWriterState lost its `body` field:
// golang.org/x/net/http2 v0.7.0 (Debian bookworm) and net/http's bundled copy from Go 1.20 on.
// Checked against the source (x/net http2/server.go, frame.go, hpack/hpack.go; Go's
// src/net/http/h2_bundle.go) and the compiler's DWARF of the test API server built by each
// toolchain (tests/unit/go_offsets_test.cc).
constexpr sw_go_offsets kLayoutWithoutBody = {
    .mhf_fields = 8,        // MetaHeadersFrame{*HeadersFrame; Fields []HeaderField; Truncated}
    .frame_stream_id = 8,   // FrameHeader{valid bool; Type; Flags; Length uint32; StreamID}
    .field_size = 40,       // HeaderField{Name, Value string; Sensitive bool}
    .field_name = 0,
    .field_value = 16,
    .rw_rws = 0,            // responseWriter{rws *responseWriterState}
    .rws_stream = 0,        // {stream, req, conn, bw, handlerHeader, snapHeader, trailers []string,
    .rws_status = 72,       //  status int, 3-4 bools, sentContentLen int64, wroteBytes int64, ...}
    .rws_wrote_bytes = 96,
    .stream_sc = 0,         // stream{sc *serverConn; id uint32; ...}
    .stream_id = 8,
    .rws_req = 8,
    .rws_bw = 24,
    .rws_handler_header = 32,
    .capture_write_bodies = 0,  // set per target
    .sc_conn = 16,          // serverConn{srv *Server; hs *http.Server; conn net.Conn; ...}
};

// net/http's bundled copy up to Go 1.19: responseWriterState{stream, req, body *requestBody,
// conn, ...}: one more pointer before status and wroteBytes.
constexpr sw_go_offsets kStdLayoutWithBody = {
    .mhf_fields = 8,
    .frame_stream_id = 8,
    .field_size = 40,
    .field_name = 0,
    .field_value = 16,
    .rw_rws = 0,
    .rws_stream = 0,
    .rws_status = 80,
    .rws_wrote_bytes = 104,
    .stream_sc = 0,
    .stream_id = 8,
    .rws_req = 8,
    .rws_bw = 32,
    .rws_handler_header = 40,
    .capture_write_bodies = 0,
    .sc_conn = 16,
};

constexpr const char* kDebianXNet = "v0.7.0";  // golang-golang-x-net-dev 1:0.7.0+dfsg-1

bool SameLayout(const sw_go_offsets& a, const sw_go_offsets& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

std::string StackName(Http2StackKind kind) {
  return kind == Http2StackKind::kXNet ? XNetHttp2Stack().name : StdHttp2Stack().name;
}

}  // namespace

Result<GoVersion> GoVersion::Parse(std::string_view text) {
  if (!text.starts_with("go")) return Error{"not a Go release version: '" + std::string(text) + "'"};
  GoVersion v;
  const char* p = text.data() + 2;
  const char* end = text.data() + text.size();
  int* parts[] = {&v.major, &v.minor, &v.patch};
  for (int i = 0; i < 3; ++i) {
    auto [next, ec] = std::from_chars(p, end, *parts[i]);
    if (ec != std::errc() || *parts[i] < 0) {
      if (i < 2) return Error{"malformed Go version '" + std::string(text) + "'"};
      break;  // "go1.21rc2" was stopped at the suffix below; "go1.21." is a suffix "."
    }
    p = next;
    if (i < 2 && p + 1 < end && *p == '.' && p[1] >= '0' && p[1] <= '9') {
      ++p;
    } else {
      break;
    }
  }
  v.suffix.assign(p, end);
  if (v.major != 1) return Error{"unsupported Go major version in '" + std::string(text) + "'"};
  return v;
}

const Http2Stack& XNetHttp2Stack() {
  static const Http2Stack kStack = {
      Http2StackKind::kXNet,
      "x/net",
      "golang.org/x/net/http2.(*serverConn).processHeaders",
      "golang.org/x/net/http2.(*responseWriter).handlerDone",
  };
  return kStack;
}

const Http2Stack& StdHttp2Stack() {
  static const Http2Stack kStack = {
      Http2StackKind::kStd,
      "std",
      "net/http.(*http2serverConn).processHeaders",
      "net/http.(*http2responseWriter).handlerDone",
  };
  return kStack;
}

const std::vector<Http2Stack>& Http2Stacks() {
  static const std::vector<Http2Stack> kStacks = {XNetHttp2Stack(), StdHttp2Stack()};
  return kStacks;
}

// Proven = the end-to-end capture matrix (tests/e2e/test_capture_matrix.py) runs the test API
// server built by that toolchain, serving HTTP/2 with that stack, and counts match exactly.
const std::vector<ProvenGoHttp2Entry>& ProvenGoHttp2Table() {
  static const std::vector<ProvenGoHttp2Entry> kTable = {
      {Http2StackKind::kXNet, 19, kDebianXNet, &kLayoutWithoutBody},
      {Http2StackKind::kXNet, 21, kDebianXNet, &kLayoutWithoutBody},
      {Http2StackKind::kXNet, 22, kDebianXNet, &kLayoutWithoutBody},
      {Http2StackKind::kXNet, 23, kDebianXNet, &kLayoutWithoutBody},
      // Measured on a stripped release kube-apiserver v1.28.7 (Go 1.21, x/net v0.19.0): Fields
      // at +8, status at rws+72, wroteBytes at rws+96 (../shared/DESIGN.md). Not rebuildable
      // here (no module proxy), so proven by that measurement rather than by the matrix.
      {Http2StackKind::kXNet, 21, "v0.19.0", &kLayoutWithoutBody},
      {Http2StackKind::kStd, 19, "", &kStdLayoutWithBody},
      {Http2StackKind::kStd, 21, "", &kLayoutWithoutBody},
      {Http2StackKind::kStd, 22, "", &kLayoutWithoutBody},
      {Http2StackKind::kStd, 23, "", &kLayoutWithoutBody},
  };
  return kTable;
}

std::string ProvenGoReleasesText(Http2StackKind stack) {
  std::set<int> minors;  // the table may list one release twice (x/net rows, GOPATH rows)
  for (const auto& e : ProvenGoHttp2Table()) {
    if (e.stack == stack) minors.insert(e.go_minor);
  }
  std::string out;
  for (int minor : minors) out += (out.empty() ? "go1." : ", go1.") + std::to_string(minor);
  return out;
}

Result<GoHttp2Layout> LookupGoHttp2Layout(const Http2Stack& stack, std::string_view go_version,
                                          std::string_view xnet_version, bool module_info) {
  const std::string where = StackName(stack.kind) + " HTTP/2 stack";
  auto go = GoVersion::Parse(go_version);
  if (!go) {
    return Error{where + ": Go version '" + std::string(go_version) + "' is not proven (" +
                 go.error() + "; proven: " + ProvenGoReleasesText(stack.kind) + ")"};
  }
  if (!go->is_release()) {
    return Error{where + ": Go " + std::string(go_version) +
                 " is not a plain release (pre-release, experiment or vendor build) and is not "
                 "proven (proven: " + ProvenGoReleasesText(stack.kind) + " releases)"};
  }
  std::vector<const ProvenGoHttp2Entry*> rows;
  for (const auto& e : ProvenGoHttp2Table()) {
    if (e.stack == stack.kind && go->major == 1 && e.go_minor == go->minor) rows.push_back(&e);
  }
  if (rows.empty()) {
    return Error{where + ": Go " + std::string(go_version) + " is not proven (proven: " +
                 ProvenGoReleasesText(stack.kind) + "); struct offsets and register use may differ"};
  }
  const std::string go_release = "go1." + std::to_string(go->minor);
  if (stack.kind == Http2StackKind::kStd) {
    return GoHttp2Layout{*rows.front()->offsets, go_release + " std", ""};
  }

  std::string proven_xnet;
  for (const auto* r : rows) proven_xnet += (proven_xnet.empty() ? "" : ", ") + r->xnet;
  if (!module_info) {
    // GOPATH build: the x/net copy compiled in is whatever was on GOPATH. Accept it only if
    // every proven x/net version of this Go release has one layout, and say so.
    for (const auto* r : rows) {
      if (!SameLayout(*r->offsets, *rows.front()->offsets)) {
        return Error{where + ": binary has no module information (GOPATH build), so its x/net "
                     "version is unknown, and the proven x/net versions of " + go_release +
                     " differ in layout"};
      }
    }
    return GoHttp2Layout{*rows.front()->offsets, go_release + " + x/net " + proven_xnet,
                         "binary has no module information (GOPATH build): x/net version "
                         "unknown, assumed to have the layout of x/net " + proven_xnet};
  }
  if (xnet_version.empty()) {
    return Error{where + ": the binary has module information but no golang.org/x/net "
                 "version for its x/net code; not proven (proven: x/net " + proven_xnet + ")"};
  }
  for (const auto* r : rows) {
    if (r->xnet == xnet_version) {
      return GoHttp2Layout{*r->offsets, go_release + " + x/net " + r->xnet, ""};
    }
  }
  return Error{where + ": golang.org/x/net " + std::string(xnet_version) + " with Go " +
               std::string(go_version) + " is not proven (proven with " + go_release +
               ": x/net " + proven_xnet + ")"};
}

}  // namespace stormwatch
