#include "agent/capture/go_offsets.h"

#include <charconv>
#include <set>

namespace stormwatch {
namespace {

// Go toolchains proven end to end (tests/e2e builds the test API server with each).
const std::set<std::pair<int, int>>& ProvenGoReleases() {
  static const std::set<std::pair<int, int>> kProven = {{1, 19}};
  return kProven;
}

// golang.org/x/net/http2 layout since responseWriterState lost its `body` field; proven on
// x/net v0.7.0 (Debian bookworm) and v0.19.0 (kube-apiserver v1.28.7, DESIGN.md).
constexpr sw_go_offsets kXNetLayout = {
    .mhf_fields = 8,        // MetaHeadersFrame{*HeadersFrame; Fields []HeaderField; ...}
    .frame_stream_id = 8,   // FrameHeader{valid bool; Type; Flags; Length uint32; StreamID}
    .field_size = 40,       // HeaderField{Name, Value string; Sensitive bool}
    .field_name = 0,
    .field_value = 16,
    .rw_rws = 0,            // responseWriter{rws *responseWriterState}
    .rws_stream = 0,        // {stream, req, conn, bw, handlerHeader, snapHeader, trailers,
    .rws_status = 72,       //  status int, 4 bools, sentContentLen, wroteBytes int64, ...}
    .rws_wrote_bytes = 96,
    .stream_sc = 0,         // stream{sc *serverConn; id uint32; ...}
    .stream_id = 8,
};

std::pair<int, int> ParseSemverMinor(std::string_view v) {
  // "v0.19.0" -> {0, 19}; pseudo-versions keep their base.
  if (!v.empty() && v[0] == 'v') v.remove_prefix(1);
  int major = -1, minor = -1;
  auto dot = v.find('.');
  if (dot == std::string_view::npos) return {-1, -1};
  std::from_chars(v.data(), v.data() + dot, major);
  auto rest = v.substr(dot + 1);
  std::from_chars(rest.data(), rest.data() + rest.size(), minor);
  return {major, minor};
}

}  // namespace

Result<GoVersion> GoVersion::Parse(std::string_view text) {
  if (!text.starts_with("go")) return Error{"not a Go release version: '" + std::string(text) + "'"};
  GoVersion v;
  const char* p = text.data() + 2;
  const char* end = text.data() + text.size();
  int* parts[] = {&v.major, &v.minor, &v.patch};
  for (int i = 0; i < 3 && p < end; ++i) {
    auto [next, ec] = std::from_chars(p, end, *parts[i]);
    if (ec != std::errc()) {
      if (i < 2) return Error{"malformed Go version '" + std::string(text) + "'"};
      break;
    }
    p = next;
    if (p < end && *p == '.') ++p; else break;  // "go1.21rc2": stop at the suffix
  }
  if (v.major != 1) return Error{"unsupported Go major version in '" + std::string(text) + "'"};
  return v;
}

const Http2Stack& XNetHttp2Stack() {
  static const Http2Stack kStack = {
      "x/net",
      "golang.org/x/net/http2.(*serverConn).processHeaders",
      "golang.org/x/net/http2.(*responseWriter).handlerDone",
  };
  return kStack;
}

Result<GoHttp2Layout> LookupGoHttp2Layout(std::string_view go_version,
                                          std::string_view xnet_version) {
  auto go = GoVersion::Parse(go_version);
  if (!go) return Error{go.error()};
  if (!ProvenGoReleases().contains({go->major, go->minor})) {
    return Error{"Go " + std::string(go_version) +
                 " is not proven (proven: go1.19); offsets and register use may differ"};
  }
  GoHttp2Layout layout{kXNetLayout, "go1.19 + x/net v0.7.0", ""};
  if (xnet_version.empty()) {
    layout.note = "binary has no module information (GOPATH build): x/net version unknown";
    return layout;
  }
  auto [major, minor] = ParseSemverMinor(xnet_version);
  if (major != 0 || minor < 7 || minor > 19) {
    return Error{"golang.org/x/net " + std::string(xnet_version) +
                 " is not proven (proven: v0.7.0 .. v0.19.x)"};
  }
  return layout;
}

}  // namespace stormwatch
