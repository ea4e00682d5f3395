// What the BPF programs and the agent read inside a Go server, derived per target from the
// binary's own runtime type descriptors (agent/capture/go_types.h) rather than a table keyed by
// Go and x/net versions: every offset of sw_go_offsets is a field found by name, its type's
// kind and size checked. A field the capture cannot do without refuses the target, naming the
// type and the field; a field that only enriches the record (client addresses, certificate
// names, APF headers, write bodies, HTTP/1.1) turns that part off with a caveat.
//
// tests/unit/go_layout_test.cc compares every derived offset with the compiler's DWARF of the
// test API server built by each toolchain of the matrix.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "agent/capture/go_types.h"
#include "agent/core/result.h"
#include "bpf/events.h"

namespace stormwatch {

enum class Http2StackKind { kXNet, kStd, kStdInternal };

// One HTTP/2 server implementation that a Go binary may contain, by the names of its types
// and of the two functions probed.
struct Http2Stack {
  Http2StackKind kind;
  std::string name;          // the stack label of stormwatch_target_info
  std::string type_prefix;   // prefix of its type names: "golang.org/x/net/http2."
  std::string embed_prefix;  // prefix of embedded type names in its structs ("http2" bundled)
  std::string process_headers;  // (*serverConn).processHeaders
  std::string handler_done;     // (*responseWriter).handlerDone
};
const Http2Stack& XNetHttp2Stack();         // golang.org/x/net/http2
const Http2Stack& StdHttp2Stack();          // net/http's bundled copy (h2_bundle.go), Go <= 1.26
const Http2Stack& StdInternalHttp2Stack();  // net/http/internal/http2, Go 1.27+
// All, in the order they are attached and named.
const std::vector<Http2Stack>& Http2Stacks();

// A type or field the layout needs and the binary's type data does not have (or has with
// another shape): the labels of the refusal metric.
struct LayoutGap {
  std::string type;   // "golang.org/x/net/http2.responseWriterState"
  std::string field;  // "wroteBytes"; "" when the type itself is missing
  std::string message;
};

struct GoLayout {
  sw_go_offsets offsets{};
  // Parts turned off because a field was not found, for the log and target_info.
  std::vector<std::string> caveats;
  bool http1 = false;         // connReader/conn fields found: HTTP/1.1 can be captured
  bool write_bodies = false;  // request and bufio fields found: write bodies can be read
};

// The layout of `stack` in the binary whose types are `types`. Error: a field the capture needs;
// `gap` then names it.
Result<GoLayout> DeriveGoLayout(const GoTypes& types, const Http2Stack& stack, LayoutGap* gap);

}  // namespace stormwatch
