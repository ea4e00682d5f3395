// TinyLFU's admission sketch (agent/core/frequency_sketch.h): exact counts for keys apart,
// never an estimate below the true count, saturation, and ageing every 10 x capacity additions.
#include "agent/core/frequency_sketch.h"

#include <gtest/gtest.h>

#include <array>
#include <random>
#include <unordered_map>

namespace stormwatch {
namespace {

TEST(FrequencySketch, CountsKeysApartExactly) {
  FrequencySketch sketch(64);
  // Keys whose four counters differ from every other key's (bits 32-47 one nibble per way).
  auto key = [](uint64_t i) { return (i * 0x1111) << 32 | 7; };  // one block for all
  for (uint64_t i = 0; i < 16; ++i) {
    for (uint64_t n = 0; n <= i; ++n) EXPECT_EQ(sketch.Add(key(i)), n + 1);
  }
  for (uint64_t i = 0; i < 16; ++i) EXPECT_EQ(sketch.Estimate(key(i)), i + 1) << i;
  EXPECT_EQ(sketch.Estimate(key(0) + 1), 0u);  // another block: never seen
}

// Conservative update, way by way: only a key's counters at its minimum grow. Key a's counter
// in `way` is shared with b; its other three with c. a's estimate rests on its `way` counter
// alone (c inflated the others), so a's estimate moves if b's sighting grows that counter.
TEST(FrequencySketch, GrowsOnlyTheCountersAtTheMinimumInEveryWay) {
  // A key of one block whose counter in way w is nibbles[w] (bits 32 + 4w).
  auto key = [](std::array<uint64_t, 4> nibbles) {
    return (nibbles[3] << 12 | nibbles[2] << 8 | nibbles[1] << 4 | nibbles[0]) << 32 | 7;
  };
  for (size_t way = 0; way < 4; ++way) {
    FrequencySketch sketch(64);
    std::array<uint64_t, 4> a{1, 1, 1, 1}, b{3, 3, 3, 3}, c = a;
    b[way] = 1;  // b shares a's counter in `way` only
    c[way] = 2;  // c shares a's other three
    for (int i = 0; i < 5; ++i) sketch.Add(key(a));
    for (int i = 0; i < 10; ++i) sketch.Add(key(c));
    ASSERT_EQ(sketch.Estimate(key(c)), 10u) << way;
    ASSERT_EQ(sketch.Estimate(key(a)), 5u) << way;  // its `way` counter, not c's
    EXPECT_EQ(sketch.Add(key(b)), 1u) << way;        // its three own counters grew
    EXPECT_EQ(sketch.Estimate(key(a)), 5u) << way;  // the shared one, at 5 > 0, did not
  }
}

TEST(FrequencySketch, NeverEstimatesBelowTheTrueCount) {
  FrequencySketch sketch(1024);
  std::mt19937_64 random(42);
  std::unordered_map<uint64_t, uint64_t> truth;
  std::vector<uint64_t> keys;
  for (int i = 0; i < 2000; ++i) keys.push_back(random());
  // 9,000 additions: below the 10,240 of the first ageing.
  for (int i = 0; i < 9000; ++i) {
    const uint64_t k = keys[random() % (i % 3 == 0 ? 20 : keys.size())];  // 20 heavy keys
    sketch.Add(k);
    ++truth[k];
  }
  ASSERT_EQ(sketch.agings(), 0u);
  size_t exact = 0;
  for (const auto& [k, n] : truth) {
    ASSERT_GE(sketch.Estimate(k), std::min<uint64_t>(n, 255)) << k;
    exact += sketch.Estimate(k) == n;
  }
  // Conservative update keeps most light keys exact at this load (16 counters per key).
  EXPECT_GT(exact, truth.size() * 9 / 10);
  EXPECT_EQ(sketch.bytes(), 1024u / 4 * 64);
}

TEST(FrequencySketch, SaturatesAndAgesByHalving) {
  FrequencySketch sketch(100);  // ageing every 1,000 additions
  const uint64_t heavy = 0x0123456789abcdefULL;
  for (int i = 0; i < 300; ++i) sketch.Add(heavy);
  EXPECT_EQ(sketch.Estimate(heavy), 255u);  // saturated, not wrapped
  const uint64_t light = 0xfedcba9876543210ULL;
  for (int i = 0; i < 40; ++i) sketch.Add(light);
  EXPECT_EQ(sketch.Estimate(light), 40u);
  EXPECT_EQ(sketch.agings(), 0u);
  for (int i = 0; i < 659; ++i) sketch.Add(heavy);  // the 999th addition
  EXPECT_EQ(sketch.agings(), 0u);
  sketch.Add(light);  // the 1,000th: 41, then halved
  EXPECT_EQ(sketch.agings(), 1u);
  EXPECT_EQ(sketch.Estimate(light), 20u);
  EXPECT_EQ(sketch.Estimate(heavy), 127u);
}

}  // namespace
}  // namespace stormwatch
