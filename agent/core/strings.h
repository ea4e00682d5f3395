// String helpers of the per-request path.
#pragma once

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

}  // namespace stormwatch
