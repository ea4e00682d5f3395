// Each object's last writer, as its client's 64-bit key and the second of the write, for up to
// `capacity` objects held in sets of four that share one cache line. Recording a write reads and
// writes that one line, where a map of 100,000 objects read its index, an entry and the links
// of its order, and kept a reference to the writer's identity (a line of its own, mostly of a
// client no other table still holds). A new object takes a free entry of its set, else the
// entry written longest ago (an eviction). The object key stands as a 32-bit tag beside the
// set's choice: two objects of one set would have to agree in those 32 bits to be taken for one
// another. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

namespace stormwatch {

class SetAssociativeWriters {
 public:
  static constexpr size_t kWays = 4;
  struct Write {
    uint64_t client_key = 0;
    int64_t at_s = 0;  // the second of the write (now_ns / 1e9, at most 2^32 - 2)
  };

  // Holds `capacity` objects, rounded up to whole sets (at least one).
  explicit SetAssociativeWriters(size_t capacity)
      : sets_count_(capacity == 0 ? 1 : (capacity + kWays - 1) / kWays) {}

  void Record(uint64_t object_key, uint64_t client_key, int64_t now_ns) {
    if (!sets_) sets_.reset(new Set[sets_count_]());  // memory only once something is written
    Set& set = sets_[SetOf(object_key)];
    const uint32_t tag = static_cast<uint32_t>(object_key);
    const uint32_t at = static_cast<uint32_t>(now_ns / 1'000'000'000 + 1);  // 0: a free entry
    size_t way = kWays, oldest = 0;
    for (size_t i = 0; i < kWays; ++i) {
      if (set.at[i] != 0 && set.tag[i] == tag) {
        way = i;
        break;
      }
      if (set.at[i] < set.at[oldest]) oldest = i;
    }
    if (way == kWays) {  // not held: a free entry (at 0 is the smallest), else the oldest
      way = oldest;
      if (set.at[way] != 0) {
        ++evictions_;
      } else {
        ++size_;
      }
      set.tag[way] = tag;
    }
    set.at[way] = at;
    set.client[way] = client_key;
  }

  std::optional<Write> Find(uint64_t object_key) const {
    if (!sets_) return std::nullopt;
    const Set& set = sets_[SetOf(object_key)];
    const uint32_t tag = static_cast<uint32_t>(object_key);
    for (size_t i = 0; i < kWays; ++i) {
      if (set.at[i] != 0 && set.tag[i] == tag) {
        return Write{set.client[i], static_cast<int64_t>(set.at[i]) - 1};
      }
    }
    return std::nullopt;
  }

  size_t size() const { return size_; }
  size_t capacity() const { return sets_count_ * kWays; }
  uint64_t evictions() const { return evictions_; }
  // Bytes held (0 until the first write).
  size_t bytes() const { return sets_ ? sets_count_ * sizeof(Set) : 0; }

 private:
  struct alignas(64) Set {
    uint32_t tag[kWays];
    uint32_t at[kWays];  // second + 1; 0 = free
    uint64_t client[kWays];
  };
  static_assert(sizeof(Set) == 64);

  // The set of a key: its high 32 bits scaled to the set count (no division, no power of two
  // needed), the low 32 bits being the tag.
  size_t SetOf(uint64_t object_key) const {
    return static_cast<size_t>(((object_key >> 32) * static_cast<uint64_t>(sets_count_)) >> 32);
  }

  size_t sets_count_;
  std::unique_ptr<Set[]> sets_;
  size_t size_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace stormwatch
