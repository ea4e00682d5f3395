// Base64url without padding (RFC 4648 §5), as JWT segments are written: for tests and
// benchmarks that build tokens. libsodium's encoder, the same library that decodes them.
#pragma once

#include <sodium.h>

#include <cstring>
#include <string>
#include <string_view>

namespace stormwatch {

inline std::string Base64UrlEncode(std::string_view in) {
  std::string out(sodium_base64_ENCODED_LEN(in.size(), sodium_base64_VARIANT_URLSAFE_NO_PADDING),
                  '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(in.data()),
                    in.size(), sodium_base64_VARIANT_URLSAFE_NO_PADDING);
  out.resize(std::strlen(out.c_str()));
  return out;
}

}  // namespace stormwatch
