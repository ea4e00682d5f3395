// Decoding of the ring-buffer events of bpf/gohttp.bpf.c (layout in bpf/events.h).
// Pure: bytes in, a decoded event or an error out. Never trusts a length it was given.
#pragma once

#include <absl/container/inlined_vector.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "agent/core/result.h"
#include "agent/core/tcp_endpoint.h"

namespace stormwatch {

// Decoded events view the event's bytes (the ring buffer's record): valid while those are.
// Nothing is copied or allocated to decode one (the drain decodes ~15,000 a second).
struct HeaderField {
  std::string_view name;
  std::string_view value;
};

struct H2RequestEvent {
  uint32_t tgid = 0;
  uint32_t target = 0;
  uint64_t ts_ns = 0;
  uint64_t conn = 0;
  uint32_t stream_id = 0;
  std::optional<TcpEndpoint> local_address;  // the connection's ends; nullopt when unknown
  std::optional<TcpEndpoint> peer_address;
  uint64_t client_cert_der = 0;  // no token: the connection's client certificate in the target
  uint32_t client_cert_der_len = 0;
  uint16_t field_count = 0;  // fields the frame had
  // Fields kept (may be fewer: see truncated()); client-go sends 8 to 10.
  absl::InlinedVector<HeaderField, 16> fields;
  bool truncated() const { return fields.size() < field_count; }
};

struct H2ResponseEvent {
  uint32_t tgid = 0;
  uint32_t target = 0;
  uint64_t ts_ns = 0;
  uint64_t conn = 0;
  uint32_t stream_id = 0;
  int64_t status = 0;
  int64_t wrote_bytes = 0;
  std::string_view priority_level_uid;  // X-Kubernetes-PF-PriorityLevel-UID
  std::string_view flow_schema_uid;     // X-Kubernetes-PF-FlowSchema-UID
  std::string_view retry_after;         // Retry-After, as sent
  bool header_walk_incomplete = false;
  // The start of a write's response body (read for object facts while the event lives, never
  // copied: a body may be a Secret).
  std::string_view body_prefix;
};

using CaptureEvent = std::variant<H2RequestEvent, H2ResponseEvent>;

Result<CaptureEvent> DecodeCaptureEvent(std::span<const uint8_t> bytes);

// The same into events reused from event to event: the drain's way, where a request's inline
// field array (0.5 KB) is written in place instead of moved out of a Result and a variant, and
// one event of each kind is kept (requests and responses alternate: a variant would be made
// afresh at every event). Which one `bytes` held, or the error; an error leaves both
// unspecified.
enum class H2EventKind { kRequest, kResponse };
Result<H2EventKind> DecodeH2EventInto(std::span<const uint8_t> bytes, H2RequestEvent& request,
                                      H2ResponseEvent& response);

}  // namespace stormwatch
