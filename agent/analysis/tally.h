// Counts of a few distinct strings (priority levels, verbs, codes...): the first `capacity`
// distinct values are counted exactly, later ones are lumped into other(), so memory stays
// bounded whatever a client sends. Not thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace stormwatch {

class Tally {
 public:
  explicit Tally(size_t capacity = 8) : capacity_(capacity) {}

  // Nothing counted, as newly made (the buffer kept).
  void Clear() {
    counts_.clear();
    other_ = 0;
  }

  void Add(const std::string& value, uint64_t n = 1) {
    for (auto& [v, count] : counts_) {
      if (v == value) {
        count += n;
        return;
      }
    }
    if (counts_.size() < capacity_) {
      counts_.emplace_back(value, n);
    } else {
      other_ += n;
    }
  }

  uint64_t Count(const std::string& value) const {
    for (const auto& [v, count] : counts_) {
      if (v == value) return count;
    }
    return 0;
  }

  // Up to `n` values, most counted first; ties keep the order values were first seen.
  std::vector<std::pair<std::string, uint64_t>> Top(size_t n) const {
    std::vector<std::pair<std::string, uint64_t>> top = counts_;
    std::stable_sort(top.begin(), top.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    if (top.size() > n) top.resize(n);
    return top;
  }

  // The most counted value; "" when nothing was counted.
  std::string Most() const {
    auto top = Top(1);
    return top.empty() ? std::string() : top.front().first;
  }

  uint64_t other() const { return other_; }
  bool empty() const { return counts_.empty(); }

 private:
  size_t capacity_;
  std::vector<std::pair<std::string, uint64_t>> counts_;
  uint64_t other_ = 0;
};

}  // namespace stormwatch
