#include "agent/protocol/h2_events.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "agent/core/tcp_endpoint.h"
#include "bpf/events.h"

namespace stormwatch {
namespace {

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Bytes, not text: formatting two addresses per request cost more than the rest of the decode.
std::optional<TcpEndpoint> SockAddrEndpoint(const sw_sock_addr& a) {
  if (a.ip_len != 4 && a.ip_len != 16) return std::nullopt;
  return TcpEndpointOf(std::span<const uint8_t>(a.ip, a.ip_len), a.port);
}

void CopyHeader(const sw_event_header& h, auto& out) {
  out.tgid = h.tgid;
  out.target = h.target;
  out.ts_ns = h.ts_ns;
  out.conn = h.conn;
  out.stream_id = h.stream_id;
}

// Every member of `ev` is written (it is reused from event to event).
std::optional<Error> DecodeRequest(std::span<const uint8_t> bytes, H2RequestEvent& ev) {
  constexpr size_t kFixed = offsetof(sw_h2_request, data);
  if (bytes.size() < kFixed) return Error{"h2 request event shorter than its header"};
  sw_h2_request fixed;
  std::memcpy(&fixed, bytes.data(), kFixed);
  if (fixed.data_len > bytes.size() - kFixed) return Error{"h2 request data_len past the event"};

  CopyHeader(fixed.hdr, ev);
  ev.field_count = fixed.field_count;
  ev.local_address = SockAddrEndpoint(fixed.local);
  ev.peer_address = SockAddrEndpoint(fixed.peer);
  ev.client_cert_der = fixed.client_cert_der;
  ev.client_cert_der_len = fixed.client_cert_der_len;
  // fields_kept is the event's word: each field takes at least 4 bytes of data_len, so at most
  // data_len / 4 fit, and a word beyond that fails at the header check after them. Sized once
  // and filled in place (a push_back per field cost a third of the decode).
  const size_t fit = std::min<size_t>(fixed.fields_kept, fixed.data_len / 4);
  ev.fields.resize(fit);
  HeaderField* out = ev.fields.data();
  const uint8_t* p = bytes.data() + kFixed;
  const uint8_t* end = p + fixed.data_len;
  for (size_t i = 0; i < fixed.fields_kept; ++i) {
    const auto fail = [&](const char* what) {
      ev.fields.resize(i);  // the fields read whole
      return Error{what};
    };
    if (i == fit || end - p < 4) return fail("h2 request field header past the data");
    const uint16_t name_len = Load<uint16_t>(p);
    const uint16_t value_len = Load<uint16_t>(p + 2);
    p += 4;
    if (end - p < name_len + value_len) return fail("h2 request field past the data");
    const char* name = reinterpret_cast<const char*>(p);
    out[i] = {std::string_view(name, name_len), std::string_view(name + name_len, value_len)};
    p += name_len + value_len;
  }
  return std::nullopt;
}

// Every member of `ev` is written (it is reused from event to event).
std::optional<Error> DecodeResponse(std::span<const uint8_t> bytes, H2ResponseEvent& ev) {
  // The BPF program sends the fixed part and only body_len bytes of the body.
  constexpr size_t kFixed = offsetof(sw_h2_response, body);
  if (bytes.size() < kFixed) return Error{"h2 response event too short"};
  sw_h2_response raw;
  std::memcpy(&raw, bytes.data(), kFixed);
  if (raw.body_len > SW_BODY_PREFIX || bytes.size() < kFixed + raw.body_len) {
    return Error{"h2 response body prefix past the event"};
  }
  if (raw.priority_level_uid_len >= SW_UID_MAX || raw.flow_schema_uid_len >= SW_UID_MAX ||
      raw.retry_after_len >= SW_RETRY_AFTER_MAX) {
    return Error{"h2 response header value length out of range"};
  }
  CopyHeader(raw.hdr, ev);
  ev.status = raw.status;
  ev.wrote_bytes = raw.wrote_bytes;
  // Views of the event's bytes (`raw` is a copy on the stack).
  const auto* event = reinterpret_cast<const char*>(bytes.data());
  ev.priority_level_uid = std::string_view(event + offsetof(sw_h2_response, priority_level_uid),
                                           raw.priority_level_uid_len);
  ev.flow_schema_uid = std::string_view(event + offsetof(sw_h2_response, flow_schema_uid),
                                        raw.flow_schema_uid_len);
  ev.retry_after = std::string_view(event + offsetof(sw_h2_response, retry_after), raw.retry_after_len);
  ev.header_walk_incomplete = raw.header_walk_incomplete != 0;
  ev.body_prefix = std::string_view(event + kFixed, raw.body_len);
  return std::nullopt;
}

}  // namespace

Result<H2EventKind> DecodeH2EventInto(std::span<const uint8_t> bytes, H2RequestEvent& request,
                                      H2ResponseEvent& response) {
  if (bytes.size() < sizeof(sw_event_header)) return Error{"event shorter than its header"};
  switch (Load<uint32_t>(bytes.data())) {
    case SW_EV_H2_REQUEST:
      if (std::optional<Error> error = DecodeRequest(bytes, request)) return *std::move(error);
      return H2EventKind::kRequest;
    case SW_EV_H2_RESPONSE:
      if (std::optional<Error> error = DecodeResponse(bytes, response)) return *std::move(error);
      return H2EventKind::kResponse;
    default:
      return Error{"unknown event type"};
  }
}

Result<CaptureEvent> DecodeCaptureEvent(std::span<const uint8_t> bytes) {
  H2RequestEvent request;
  H2ResponseEvent response;
  Result<H2EventKind> kind = DecodeH2EventInto(bytes, request, response);
  if (!kind.ok()) return kind.error();
  if (*kind == H2EventKind::kRequest) return CaptureEvent(std::move(request));
  return CaptureEvent(response);
}

}  // namespace stormwatch
