#include "agent/protocol/tls_events.h"

#include <cstddef>
#include <cstring>

#include "bpf/events.h"

namespace stormwatch {
namespace {

std::string_view View(const uint8_t* p, size_t n) {
  return {reinterpret_cast<const char*>(p), n};
}

void CopyHeader(const sw_event_header& h, auto& out) {
  out.tgid = h.tgid;
  out.target = h.target;
  out.ts_ns = h.ts_ns;
  out.conn = h.conn;
}

Result<TlsEvent> DecodeData(std::span<const uint8_t> bytes) {
  constexpr size_t kFixed = offsetof(sw_tls_data, data);
  if (bytes.size() < kFixed) return Error{"tls data event shorter than its header"};
  sw_tls_data fixed;
  std::memcpy(&fixed, bytes.data(), kFixed);
  if (fixed.direction != SW_TLS_READ && fixed.direction != SW_TLS_WRITE) {
    return Error{"tls data event with an unknown direction"};
  }
  if (fixed.captured > SW_TLS_CAPTURE || fixed.captured > fixed.total_len) {
    return Error{"tls data event captured more than the call moved"};
  }
  if (fixed.captured > bytes.size() - kFixed) return Error{"tls data event data past the event"};
  if (fixed.tail_len > SW_TLS_TAIL || fixed.tail_len > fixed.total_len) {
    return Error{"tls data event tail longer than possible"};
  }

  TlsDataEvent ev;
  CopyHeader(fixed.hdr, ev);
  ev.direction = fixed.direction == SW_TLS_READ ? TlsDirection::kRead : TlsDirection::kWrite;
  ev.total_len = fixed.total_len;
  ev.data = View(bytes.data() + kFixed, fixed.captured);
  // A tail only means something when bytes were not captured: then it ends the call.
  if (fixed.captured < fixed.total_len) {
    ev.tail = View(bytes.data() + offsetof(sw_tls_data, tail), fixed.tail_len);
  }
  return TlsEvent{ev};
}

}  // namespace

Result<TlsEvent> DecodeTlsEvent(std::span<const uint8_t> bytes) {
  if (bytes.size() < sizeof(sw_event_header)) return Error{"event shorter than its header"};
  uint32_t type;
  std::memcpy(&type, bytes.data(), sizeof(type));
  switch (type) {
    case SW_EV_TLS_DATA:
      return DecodeData(bytes);
    case SW_EV_TLS_CLOSE: {
      static_assert(sizeof(sw_tls_close) == sizeof(sw_event_header));
      sw_tls_close raw;
      std::memcpy(&raw, bytes.data(), sizeof(raw));
      TlsCloseEvent ev;
      CopyHeader(raw.hdr, ev);
      return TlsEvent{ev};
    }
    default:
      return Error{"not a tls event"};
  }
}

}  // namespace stormwatch
