// The objects' last-writer table: each object's latest write kept, a full set gives up the
// entry written longest ago (and only within that set), capacity rounded to whole sets.
#include "agent/core/set_associative_writers.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace stormwatch {
namespace {

constexpr int64_t kSec = 1'000'000'000;

// Keys of one set: the set comes from the high 32 bits, the tag from the low ones.
uint64_t InSet(uint64_t set_bits, uint32_t tag) { return set_bits << 32 | tag; }

TEST(SetAssociativeWriters, KeepsEachObjectsLatestWriteAndEvictsTheSetsOldest) {
  SetAssociativeWriters writers(8);  // two sets of four
  EXPECT_EQ(writers.capacity(), 8u);
  EXPECT_EQ(writers.bytes(), 0u);  // nothing allocated before the first write
  EXPECT_FALSE(writers.Find(InSet(0, 1)));

  for (uint32_t i = 1; i <= 4; ++i) writers.Record(InSet(0, i), 100 + i, i * kSec);
  writers.Record(InSet(0xFFFFFFFF, 1), 999, 0);  // the other set: same tag, another object
  EXPECT_EQ(writers.bytes(), 128u);
  EXPECT_EQ(writers.size(), 5u);
  writers.Record(InSet(0, 1), 201, 10 * kSec + kSec / 2);  // object 1 written again
  ASSERT_TRUE(writers.Find(InSet(0, 1)));
  EXPECT_EQ(writers.Find(InSet(0, 1))->client_key, 201u);
  EXPECT_EQ(writers.Find(InSet(0, 1))->at_s, 10);
  EXPECT_EQ(writers.size(), 5u);
  EXPECT_EQ(writers.evictions(), 0u);

  // A fifth object of the full set takes the entry written longest ago: object 2's (2 s).
  writers.Record(InSet(0, 5), 105, 11 * kSec);
  EXPECT_EQ(writers.evictions(), 1u);
  EXPECT_EQ(writers.size(), 5u);
  EXPECT_FALSE(writers.Find(InSet(0, 2)));
  for (uint32_t i : {1u, 3u, 4u, 5u}) EXPECT_TRUE(writers.Find(InSet(0, i))) << i;
  EXPECT_EQ(writers.Find(InSet(0, 3))->client_key, 103u);
  EXPECT_EQ(writers.Find(InSet(0, 3))->at_s, 3);
  // The other set was not touched, and its write at second 0 is not taken for a free entry.
  ASSERT_TRUE(writers.Find(InSet(0xFFFFFFFF, 1)));
  EXPECT_EQ(writers.Find(InSet(0xFFFFFFFF, 1))->client_key, 999u);
  EXPECT_EQ(writers.Find(InSet(0xFFFFFFFF, 1))->at_s, 0);
}

TEST(SetAssociativeWriters, CapacityIsWholeSets) {
  EXPECT_EQ(SetAssociativeWriters(0).capacity(), 4u);
  EXPECT_EQ(SetAssociativeWriters(1).capacity(), 4u);
  EXPECT_EQ(SetAssociativeWriters(10).capacity(), 12u);
  EXPECT_EQ(SetAssociativeWriters(100'000).capacity(), 100'000u);
}

// Many more objects than entries, keys spread as hashes are: the table stays at its capacity,
// every object recorded is either held or counted as evicted, and the latest writes stay.
TEST(SetAssociativeWriters, ManyObjectsStayWithinCapacityAndAreAccountedFor) {
  SetAssociativeWriters writers(1000);
  uint64_t x = 0x9E3779B97F4A7C15;
  auto next = [&] {  // splitmix64
    uint64_t z = (x += 0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
    return z ^ (z >> 31);
  };
  uint64_t last = 0;
  for (int i = 0; i < 100'000; ++i) {
    last = next();
    writers.Record(last, i, i * kSec);
  }
  EXPECT_EQ(writers.size(), 1000u);
  EXPECT_EQ(writers.size() + writers.evictions(), 100'000u);
  ASSERT_TRUE(writers.Find(last));
  EXPECT_EQ(writers.Find(last)->client_key, 99'999u);
  EXPECT_EQ(writers.bytes(), 250u * 64);
}

}  // namespace
}  // namespace stormwatch
