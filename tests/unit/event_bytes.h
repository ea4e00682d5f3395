// A capture event's bytes as the BPF side writes them into the ring: the fixed part of the
// event struct up to its flexible `data` member, then the captured bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "bpf/events.h"

namespace stormwatch {

// `fixed_size` is offsetof(Event, data); `data` any contiguous bytes (.data(), .size()).
// Sized once and copied into (vector::insert after the fixed part tripped GCC 12's
// -Warray-bounds with a false positive).
template <typename Event, typename Bytes>
std::vector<uint8_t> EventBytes(const Event& fixed, size_t fixed_size, const Bytes& data) {
  std::vector<uint8_t> out(fixed_size + data.size());
  std::memcpy(out.data(), &fixed, fixed_size);
  if (data.size() > 0) std::memcpy(out.data() + fixed_size, data.data(), data.size());
  return out;
}

// An HTTP/2 request event: `header`, then each field as the BPF program copies it (name and
// value lengths, 16 bits each, then the name and the value).
inline std::vector<uint8_t> H2RequestEventBytes(
    const sw_event_header& header, const std::vector<std::pair<std::string_view, std::string_view>>& fields,
    const sw_sock_addr& peer = {}, const sw_sock_addr& local = {}) {
  std::vector<uint8_t> data;
  for (const auto& [name, value] : fields) {
    const uint16_t lens[2] = {static_cast<uint16_t>(name.size()), static_cast<uint16_t>(value.size())};
    const auto* len_bytes = reinterpret_cast<const uint8_t*>(lens);
    data.insert(data.end(), len_bytes, len_bytes + sizeof(lens));
    data.insert(data.end(), name.begin(), name.end());
    data.insert(data.end(), value.begin(), value.end());
  }
  sw_h2_request fixed{};
  fixed.hdr = header;
  fixed.field_count = fixed.fields_kept = static_cast<uint16_t>(fields.size());
  fixed.data_len = static_cast<uint32_t>(data.size());
  fixed.peer = peer;
  fixed.local = local;
  return EventBytes(fixed, offsetof(sw_h2_request, data), data);
}

}  // namespace stormwatch
