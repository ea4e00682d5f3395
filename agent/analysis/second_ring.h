// Per-second values of a small struct of counters over the last `seconds` whole seconds, in a
// fixed ring, for detectors that count several things per second (SecondBuckets, storm.h, is
// the one-count case). Seconds are absolute (monotonic ns / 1e9). Not thread-safe.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace stormwatch {

// kInline > 0: that many seconds held in the object itself, no allocation (for rings made
// and reset in bulk, e.g. in the slots of a Space-Saving sketch, whose takeover assigns T{}).
template <typename T, size_t kInline = 0>
class SecondRing {
 public:
  explicit SecondRing(size_t seconds)
    requires(kInline == 0)
      : slots_(std::max<size_t>(seconds, 1)) {}
  SecondRing()
    requires(kInline > 0)
  = default;

  // The slot of second `s`, advancing the ring (and clearing skipped seconds) when `s` is
  // newer than any seen; nullptr when `s` is older than the ring keeps.
  T* Slot(int64_t s) {
    const auto n = static_cast<int64_t>(slots_.size());
    if (s > head_) {
      if (s - head_ >= n) {
        // Past the ring's span (a key seen again after long, or new): no second before `s`
        // holds anything; only its own slot is cleared, the others are read as empty (valid_from_)
        // until the ring advances over them. With many keys most are in this case, and
        // clearing whole rings was the detectors' largest memory traffic.
        valid_from_ = s;
        slots_[Index(s)] = T{};
      } else {
        // The skipped seconds, walking the index rather than dividing per slot.
        size_t i = Index(head_ + 1);
        for (int64_t t = head_ + 1; t <= s; ++t) {
          slots_[i] = T{};
          if (++i == slots_.size()) i = 0;
        }
      }
      head_ = s;
    } else if (s < Oldest()) {
      if (s <= head_ - n) return nullptr;
      // Within the span but before a jump: the stale slots from `s` on are cleared and held.
      for (int64_t t = s; t < valid_from_; ++t) slots_[Index(t)] = T{};
      valid_from_ = s;
    }
    return &slots_[Index(s)];
  }

  // The value of second `s`; T{} when outside the ring.
  T At(int64_t s) const {
    if (s > head_ || s < Oldest()) return T{};
    return slots_[Index(s)];
  }

  // Calls f(value) for every second of [from, to] the ring holds, oldest first (the others
  // are T{}): a window's sum without At()'s range check and modulo per second.
  template <typename F>
  void ForEachIn(int64_t from, int64_t to, F f) const {
    from = std::max(from, Oldest());
    to = std::min(to, head_);
    if (from > to) return;
    size_t i = Index(from);
    for (int64_t s = from; s <= to; ++s) {
      f(slots_[i]);
      if (++i == slots_.size()) i = 0;
    }
  }

  size_t seconds() const { return slots_.size(); }
  // Empty again, as newly made (the buffer kept, not cleared: Slot clears what it reuses).
  void Clear() {
    head_ = INT64_MIN / 2;
    valid_from_ = INT64_MIN / 2;
  }

 private:
  size_t Index(int64_t s) const {
    const auto n = static_cast<int64_t>(slots_.size());
    const int64_t i = s % n;  // one division: seconds before the epoch stay in range too
    return static_cast<size_t>(i < 0 ? i + n : i);
  }

  // The oldest second whose slot holds its value: the ring's span back from the newest, or
  // later when the ring jumped to a second past its span (the slots before hold stale values).
  int64_t Oldest() const {
    return std::max(head_ - static_cast<int64_t>(slots_.size()) + 1, valid_from_);
  }

  std::conditional_t<kInline == 0, std::vector<T>, std::array<T, kInline>> slots_{};
  int64_t head_ = INT64_MIN / 2;
  int64_t valid_from_ = INT64_MIN / 2;  // seconds before it read as T{}
};

}  // namespace stormwatch
