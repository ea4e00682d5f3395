// How often each key was seen lately, approximately, in fixed memory: TinyLFU's admission
// sketch (Einziger, Friedman, Manes). A table that turns over (more live keys than its
// capacity) asks it whether a newcomer has been seen more often than the entry it would evict;
// when keys are alike that is no, and the table keeps its entries instead of evicting one per
// request. A heavy newcomer (a client that starts a storm) is seen more often within a few of
// its requests and gets in.
//
// A Count-Min sketch of 8-bit counters with conservative update: four counters per key, all in
// one 64-byte block (one cache line per key, not four), an estimate the minimum of the four
// (never below the true count since the last ageing). Every `sample` additions all counters are
// halved, so old traffic fades. Keys must already be well-mixed hashes (the agent's keyed
// 64-bit keys are): their bits pick the block and the counters, nothing is hashed again.
// Not thread-safe.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace stormwatch {

class FrequencySketch {
 public:
  // Sized for a table of `capacity` keys: 16 counters per key (16 bytes), ageing every
  // 10 x capacity additions (TinyLFU's sample).
  explicit FrequencySketch(size_t capacity)
      : blocks_(std::bit_ceil(std::max<size_t>(capacity / 4, 1))),
        sample_(10 * std::max<size_t>(capacity, 1)) {}

  // Counts one more sighting of `key`; returns its estimate after it.
  uint8_t Add(uint64_t key) {
    uint8_t* counters = blocks_[BlockOf(key)].counters.data();
    const Ways w = WaysOf(key);
    const uint8_t c0 = counters[w.index[0]], c1 = counters[w.index[1]];
    const uint8_t c2 = counters[w.index[2]], c3 = counters[w.index[3]];
    uint8_t least = std::min(std::min(c0, c1), std::min(c2, c3));
    if (least < UINT8_MAX) {
      // Conservative update: only the counters at the minimum grow (the others already
      // over-count this key), which keeps estimates of light keys low. The ways are apart in
      // the block, so no counter is two of them.
      counters[w.index[0]] = static_cast<uint8_t>(c0 + (c0 == least));
      counters[w.index[1]] = static_cast<uint8_t>(c1 + (c1 == least));
      counters[w.index[2]] = static_cast<uint8_t>(c2 + (c2 == least));
      counters[w.index[3]] = static_cast<uint8_t>(c3 + (c3 == least));
      ++least;
    }
    if (++additions_ >= sample_) Age();
    return least;
  }

  // The estimate of `key`: at least its sightings since the last ageing, often exactly.
  uint8_t Estimate(uint64_t key) const {
    const uint8_t* counters = blocks_[BlockOf(key)].counters.data();
    const Ways w = WaysOf(key);
    return std::min(std::min(counters[w.index[0]], counters[w.index[1]]),
                    std::min(counters[w.index[2]], counters[w.index[3]]));
  }

  size_t bytes() const { return blocks_.size() * sizeof(Block); }
  uint64_t agings() const { return agings_; }

 private:
  static constexpr size_t kWays = 4;
  static constexpr size_t kWayWidth = 16;  // counters per way in a block
  struct alignas(64) Block {
    std::array<uint8_t, kWays * kWayWidth> counters{};
  };

  size_t BlockOf(uint64_t key) const { return key & (blocks_.size() - 1); }
  // Where a key's counter of each way sits in its block. Bits above those of any block number
  // (at most 2^32 blocks) pick it, four bits per way. Written out way by way, not looped:
  // the sketch is asked several times per request (ClientCap, ClientPeers, the tables'
  // admission), and the loop cost twice the instructions (docs/benchmark.md).
  struct Ways {
    std::array<uint32_t, kWays> index;
  };
  static Ways WaysOf(uint64_t key) {
    const auto nibble = [key](unsigned way) {
      return static_cast<uint32_t>(way * kWayWidth + ((key >> (32 + 4 * way)) & (kWayWidth - 1)));
    };
    return {{nibble(0), nibble(1), nibble(2), nibble(3)}};
  }
  static_assert(kWays == 4, "WaysOf, Add and Estimate name each way");

  void Age() {
    for (Block& block : blocks_) {
      for (uint8_t& c : block.counters) c >>= 1;
    }
    additions_ = 0;
    ++agings_;
  }

  std::vector<Block> blocks_;
  uint64_t sample_;
  uint64_t additions_ = 0;
  uint64_t agings_ = 0;
};

}  // namespace stormwatch
