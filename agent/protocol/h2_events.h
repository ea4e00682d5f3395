// Decoding of the ring-buffer events of bpf/gohttp.bpf.c (layout in bpf/events.h).
// Pure: bytes in, a decoded event or an error out. Never trusts a length it was given.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "agent/core/result.h"
#include "agent/core/tcp_endpoint.h"

namespace stormwatch {

struct HeaderField {
  std::string name;
  std::string value;
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
  std::vector<HeaderField> fields;  // fields kept (may be fewer: see truncated())
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
  std::string priority_level_uid;  // X-Kubernetes-PF-PriorityLevel-UID
  std::string flow_schema_uid;     // X-Kubernetes-PF-FlowSchema-UID
  std::string retry_after;         // Retry-After, as sent
  bool header_walk_incomplete = false;
  // The start of a write's response body (kept only until its object facts are parsed: a
  // body may be a Secret and never leaves the process).
  std::string body_prefix;
};

using CaptureEvent = std::variant<H2RequestEvent, H2ResponseEvent>;

Result<CaptureEvent> DecodeCaptureEvent(std::span<const uint8_t> bytes);

}  // namespace stormwatch
