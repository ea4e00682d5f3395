// The string helpers of the per-request path (agent/core/strings.h).
#include "agent/core/strings.h"

#include <gtest/gtest.h>

#include <string>

namespace stormwatch {
namespace {

// Every length across the size classes: the bytes arrive in order, none is written past them,
// and a value read from the middle of a larger buffer is copied from there alone.
TEST(StringsTest, AppendShortCopiesEveryLengthExactly) {
  const std::string source = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP";
  for (size_t length = 0; length <= 40; ++length) {
    for (size_t from : {size_t{0}, size_t{3}, size_t{11}}) {
      const std::string_view value(source.data() + from, length);
      std::string out(64, '#');
      char* end = AppendShort(out.data() + 5, value);
      EXPECT_EQ(end, out.data() + 5 + length) << length;
      EXPECT_EQ(out.substr(0, 5), "#####") << length;
      EXPECT_EQ(out.substr(5, length), value) << length << " from " << from;
      EXPECT_EQ(out.substr(5 + length), std::string(64 - 5 - length, '#')) << length;
    }
  }
}

}  // namespace
}  // namespace stormwatch
