// The versioned table of Go HTTP/2 server internals the BPF programs read.
// Every entry is proven by a test binary built with that Go toolchain and x/net version
// (tests/e2e); a binary outside the table is refused with the reason, never guessed at.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "agent/core/result.h"
#include "bpf/events.h"

namespace stormwatch {

struct GoVersion {
  int major = 0, minor = 0, patch = 0;
  static Result<GoVersion> Parse(std::string_view text);  // "go1.19.8", "go1.21rc2"
  auto operator<=>(const GoVersion&) const = default;
};

// The functions probed in one HTTP/2 server stack of a Go binary.
struct Http2Stack {
  std::string name;                 // "x/net" or "std"
  std::string process_headers;      // (*serverConn).processHeaders
  std::string handler_done;         // (*responseWriter).handlerDone
};
const Http2Stack& XNetHttp2Stack();

struct GoHttp2Layout {
  sw_go_offsets offsets;
  std::string proven_for;  // which builds proved it, for logs and the target_info metric
  std::string note;        // caveat, e.g. the x/net version could not be read
};

// Picks the layout for a binary built by `go_version` with golang.org/x/net `xnet_version`
// ("" when the binary carries no module information, as GOPATH builds do).
Result<GoHttp2Layout> LookupGoHttp2Layout(std::string_view go_version,
                                          std::string_view xnet_version);

}  // namespace stormwatch
