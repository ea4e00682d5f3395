// String helpers of the per-request path.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace stormwatch {

// `field` = `value`, the buffer kept: for the copies into records and slots reused request after
// request. Cheaper than assign() or operator= (libstdc++'s _M_replace allows `value` to overlap
// `field`, which the event bytes and parsed views copied here never do).
inline void SetField(std::string& field, std::string_view value) {
  field.clear();
  field.append(value.data(), value.size());
}

// Copies `value` to `at` (room for it there), returning the end: a short value (most label
// values and names are under 16 bytes) in two overlapping fixed-size moves instead of a call
// to memcpy, whose dispatch on the size costs more than the copy when values are joined
// several per request (HashFields, the exporter's label keys).
inline char* AppendShort(char* at, std::string_view value) {
  const size_t n = value.size();
  const char* s = value.data();
  if (n >= 16) {
    std::memcpy(at, s, n);
  } else if (n >= 8) {
    uint64_t head, tail;
    std::memcpy(&head, s, 8);
    std::memcpy(&tail, s + n - 8, 8);
    std::memcpy(at, &head, 8);
    std::memcpy(at + n - 8, &tail, 8);
  } else if (n >= 4) {
    uint32_t head, tail;
    std::memcpy(&head, s, 4);
    std::memcpy(&tail, s + n - 4, 4);
    std::memcpy(at, &head, 4);
    std::memcpy(at + n - 4, &tail, 4);
  } else if (n > 0) {
    at[0] = s[0];
    at[n / 2] = s[n / 2];
    at[n - 1] = s[n - 1];
  }
  return at + n;
}

}  // namespace stormwatch
