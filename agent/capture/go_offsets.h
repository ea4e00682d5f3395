// The versioned table of Go HTTP/2 server internals the BPF programs read.
//
// Keyed by (HTTP/2 stack, Go minor release, golang.org/x/net version for the x/net stack).
// Every entry is proven end to end: tests/e2e/test_capture_matrix.py builds the test API server
// with that Go toolchain (and Debian's x/net), serves HTTP/2 with that stack, and compares the
// agent's counts with the server's exactly. A binary outside the table is refused with the
// reason, never guessed at.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "agent/core/result.h"
#include "bpf/events.h"

namespace stormwatch {

// "go1.21.13" -> {1, 21, 13, ""}; "go1.22rc1" -> {1, 22, 0, "rc1"};
// "go1.21.13 X:boringcrypto" -> {1, 21, 13, " X:boringcrypto"}. "devel ..." is an error.
struct GoVersion {
  int major = 0, minor = 0, patch = 0;
  std::string suffix;  // anything after the numbers: a pre-release, an experiment, a vendor tag
  static Result<GoVersion> Parse(std::string_view text);
  bool is_release() const { return suffix.empty(); }
  auto operator<=>(const GoVersion&) const = default;
};

enum class Http2StackKind { kXNet, kStd };

// The functions probed in one HTTP/2 server stack of a Go binary.
struct Http2Stack {
  Http2StackKind kind;
  std::string name;             // "x/net" or "std": the stack label of stormwatch_target_info
  std::string process_headers;  // (*serverConn).processHeaders
  std::string handler_done;     // (*responseWriter).handlerDone
};
const Http2Stack& XNetHttp2Stack();  // golang.org/x/net/http2
const Http2Stack& StdHttp2Stack();   // net/http's bundled copy (h2_bundle.go)
// Both, in the order they are attached and named: x/net, std.
const std::vector<Http2Stack>& Http2Stacks();

struct GoHttp2Layout {
  sw_go_offsets offsets;
  std::string proven_for;  // which builds proved it, for logs
  std::string note;        // caveat, e.g. the x/net version could not be read
};

// One row of the proven table (for logs, the README and the tests).
struct ProvenGoHttp2Entry {
  Http2StackKind stack;
  int go_minor;            // Go 1.<go_minor>.x releases (no pre-releases, no experiments)
  std::string xnet;        // golang.org/x/net version, exact; "" for the std stack
  const sw_go_offsets* offsets;
};
const std::vector<ProvenGoHttp2Entry>& ProvenGoHttp2Table();

// Picks the layout of `stack` in a binary built by `go_version` (from .go.buildinfo) with
// golang.org/x/net `xnet_version`. `module_info` says whether the binary carries module
// information at all: GOPATH builds (Debian's etcd, the test API server) carry none, so their
// x/net version is unknown; they are accepted when the Go version is proven and every proven
// x/net version of that Go release has the same layout, with a caveat in `note`. A module
// build whose x/net version is not in the table (or missing) is refused.
Result<GoHttp2Layout> LookupGoHttp2Layout(const Http2Stack& stack, std::string_view go_version,
                                          std::string_view xnet_version, bool module_info);

// "go1.19, go1.21, go1.22, go1.23": the proven Go releases of a stack, for messages.
std::string ProvenGoReleasesText(Http2StackKind stack);

}  // namespace stormwatch
