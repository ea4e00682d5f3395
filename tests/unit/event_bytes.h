// A capture event's bytes as the BPF side writes them into the ring: the fixed part of the
// event struct up to its flexible `data` member, then the captured bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

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

}  // namespace stormwatch
