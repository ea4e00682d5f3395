// Decoding of the HTTP/1.1-over-TLS ring-buffer events (struct sw_tls_data / sw_tls_close in
// bpf/events.h). Pure: bytes in, a decoded event or an error out. Never trusts a length it was
// given. The decoded data and tail are views into the given bytes (no copy of the plaintext,
// which may hold a bearer token): they live as long as those bytes do.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <variant>

#include "agent/core/result.h"

namespace stormwatch {

enum class TlsDirection { kRead, kWrite };  // kRead: bytes from the peer (requests, server side)

// The plaintext of one crypto/tls.(*Conn).Read (the bytes it returned) or Write (the bytes it
// was given). When the call moved more than was captured, `data` is its prefix and `tail` its
// last bytes; the bytes in between went by unseen.
struct TlsDataEvent {
  uint32_t tgid = 0;
  uint32_t target = 0;
  uint64_t ts_ns = 0;
  uint64_t conn = 0;  // the *tls.Conn in the target
  TlsDirection direction = TlsDirection::kRead;
  uint32_t total_len = 0;  // bytes the call moved
  std::string_view data;   // the first min(total_len, SW_TLS_CAPTURE) bytes
  std::string_view tail;   // the call's last bytes, only when data is shorter than total_len
};

struct TlsCloseEvent {
  uint32_t tgid = 0;
  uint32_t target = 0;
  uint64_t ts_ns = 0;
  uint64_t conn = 0;
};

using TlsEvent = std::variant<TlsDataEvent, TlsCloseEvent>;

// Decodes an SW_EV_TLS_DATA or SW_EV_TLS_CLOSE event; any other type is an error.
Result<TlsEvent> DecodeTlsEvent(std::span<const uint8_t> bytes);

}  // namespace stormwatch
