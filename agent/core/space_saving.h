// Space-Saving (Metwally et al.): approximate top counts of a stream of keys in fixed memory,
// the one heavy-hitter sketch of the agent (which clients get their own metric series, by
// their 64-bit label keys; which peer IPs of a client are kept, by string). Each count
// over-estimates by at most its `error`; count - error is a guaranteed lower bound. A key that is not tracked takes the slot with the
// smallest count and inherits that count as its error, so a heavy key is never pushed out by
// many light ones. Each slot can carry a Payload (what the caller keeps per key, reset when the
// slot changes hands). Not thread-safe.
// Small sketches (ClientPeers' 8 IPs per client, one per live client) find keys by scanning
// their used slots: cheaper than hashing the key, and no index to keep.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace stormwatch {

template <typename Payload = std::monostate, typename Key = std::string>
class SpaceSaving {
 public:
  static constexpr size_t kScanCapacity = 16;
  // How a key is passed and indexed: strings as views of the slots' own copies.
  using KeyArg = std::conditional_t<std::is_same_v<Key, std::string>, std::string_view, Key>;

  explicit SpaceSaving(size_t capacity) : slots_(capacity), scan_(capacity <= kScanCapacity) {
    free_.reserve(capacity);
    heap_.reserve(capacity);
    for (size_t i = capacity; i > 0; --i) free_.push_back(static_cast<uint32_t>(i - 1));
  }
  // Moves keep every slot where it is (the index views the slots' keys); copies would not.
  SpaceSaving(SpaceSaving&&) noexcept = default;
  SpaceSaving& operator=(SpaceSaving&&) noexcept = default;
  SpaceSaving(const SpaceSaving&) = delete;
  SpaceSaving& operator=(const SpaceSaving&) = delete;

  // Counts `amount` more for `key`; its slot's payload (nullptr only with capacity 0).
  Payload* Add(KeyArg key, uint64_t amount = 1);
  void Erase(KeyArg key);
  // Lower bound of `key`'s count (0 when not tracked).
  uint64_t Guaranteed(KeyArg key) const;
  // Keys with a positive lower bound, highest first (ties: the smaller key first).
  std::vector<std::pair<Key, uint64_t>> Top(size_t n) const;
  // Every tracked key: f(key, count, error, payload), in no order.
  template <typename F>
  void ForEach(F f) const {
    for (uint32_t i : heap_) {
      f(KeyArg(slots_[i].key), slots_[i].count, slots_[i].error, slots_[i].payload);
    }
  }
  // Forgets every key, as a new sketch of the same capacity, keeping its buffers.
  void Clear();
  // Halves every count: older traffic weighs less ("recent" counts).
  void Decay();
  size_t size() const { return heap_.size(); }
  size_t capacity() const { return slots_.size(); }

 private:
  static constexpr uint32_t kNotInHeap = UINT32_MAX;
  static constexpr uint32_t kNoSlot = UINT32_MAX;
  struct Slot {
    Key key{};  // the index's string keys view these (slots_ never reallocates)
    uint64_t count = 0, error = 0;
    uint32_t heap_pos = kNotInHeap;
    Payload payload{};
  };
  // A min-heap of the used slots by (count, slot number): its top is the slot a newcomer
  // replaces. Updates move one slot up or down the heap; nothing is allocated per update.
  bool Before(uint32_t a, uint32_t b) const {
    return slots_[a].count != slots_[b].count ? slots_[a].count < slots_[b].count : a < b;
  }
  void Place(size_t pos, uint32_t slot) {
    heap_[pos] = slot;
    slots_[slot].heap_pos = static_cast<uint32_t>(pos);
  }
  // The slot holding `key`, or kNoSlot.
  uint32_t Find(KeyArg key) const {
    if (scan_) {
      for (uint32_t i : heap_) {
        if (slots_[i].key == key) return i;
      }
      return kNoSlot;
    }
    auto it = index_.find(key);
    return it == index_.end() ? kNoSlot : it->second;
  }
  void Index(uint32_t i) {
    if (!scan_) index_.emplace(KeyArg(slots_[i].key), i);
  }
  void Unindex(uint32_t i) {
    if (!scan_) index_.erase(KeyArg(slots_[i].key));
  }
  void SiftUp(size_t pos);
  void SiftDown(size_t pos);
  void RemoveFromHeap(uint32_t slot);
  // Keeps a string key's buffer for the slot's next key.
  static void ClearKey(Key& key) {
    if constexpr (std::is_same_v<Key, std::string>) {
      key.clear();
    } else {
      key = Key{};
    }
  }
  void Free(uint32_t i) {
    Slot& slot = slots_[i];
    ClearKey(slot.key);
    slot.count = slot.error = 0;
    slot.heap_pos = kNotInHeap;
    slot.payload = Payload{};
    free_.push_back(i);
  }

  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  std::vector<uint32_t> heap_;  // every used slot
  bool scan_;
  absl::flat_hash_map<KeyArg, uint32_t> index_;  // empty when scan_
};

template <typename Payload, typename Key>
void SpaceSaving<Payload, Key>::SiftUp(size_t pos) {
  const uint32_t slot = heap_[pos];
  while (pos > 0) {
    const size_t parent = (pos - 1) / 2;
    if (!Before(slot, heap_[parent])) break;
    Place(pos, heap_[parent]);
    pos = parent;
  }
  Place(pos, slot);
}

template <typename Payload, typename Key>
void SpaceSaving<Payload, Key>::SiftDown(size_t pos) {
  const uint32_t slot = heap_[pos];
  for (;;) {
    size_t child = 2 * pos + 1;
    if (child >= heap_.size()) break;
    if (child + 1 < heap_.size() && Before(heap_[child + 1], heap_[child])) ++child;
    if (!Before(heap_[child], slot)) break;
    Place(pos, heap_[child]);
    pos = child;
  }
  Place(pos, slot);
}

template <typename Payload, typename Key>
void SpaceSaving<Payload, Key>::RemoveFromHeap(uint32_t slot) {
  const size_t pos = slots_[slot].heap_pos;
  const uint32_t last = heap_.back();
  heap_.pop_back();
  slots_[slot].heap_pos = kNotInHeap;
  if (last == slot) return;
  Place(pos, last);
  SiftUp(pos);
  SiftDown(slots_[last].heap_pos);
}

template <typename Payload, typename Key>
Payload* SpaceSaving<Payload, Key>::Add(KeyArg key, uint64_t amount) {
  if (const uint32_t found = Find(key); found != kNoSlot) {
    Slot& slot = slots_[found];
    slot.count += amount;
    SiftDown(slot.heap_pos);  // a larger count sinks
    return &slot.payload;
  }
  uint32_t i;
  uint64_t error = 0;
  if (!free_.empty()) {
    i = free_.back();
    free_.pop_back();
    heap_.push_back(i);
    slots_[i].heap_pos = static_cast<uint32_t>(heap_.size() - 1);
  } else if (!heap_.empty()) {
    // Full: the newcomer inherits the smallest count as its possible over-estimate.
    i = heap_.front();
    Unindex(i);
    error = slots_[i].count;
    slots_[i].payload = Payload{};
  } else {
    return nullptr;  // capacity 0
  }
  Slot& slot = slots_[i];
  if constexpr (std::is_same_v<Key, std::string>) {
    slot.key.assign(key);  // reuses the slot's buffer
  } else {
    slot.key = key;
  }
  slot.count = error + amount;
  slot.error = error;
  Index(i);
  SiftUp(slot.heap_pos);
  SiftDown(slot.heap_pos);
  return &slot.payload;
}

template <typename Payload, typename Key>
void SpaceSaving<Payload, Key>::Clear() {
  for (uint32_t i : heap_) {
    Slot& slot = slots_[i];
    ClearKey(slot.key);
    slot.count = slot.error = 0;
    slot.heap_pos = kNotInHeap;
    slot.payload = Payload{};
  }
  index_.clear();
  heap_.clear();
  free_.clear();
  for (size_t i = slots_.size(); i > 0; --i) free_.push_back(static_cast<uint32_t>(i - 1));
}

template <typename Payload, typename Key>
void SpaceSaving<Payload, Key>::Erase(KeyArg key) {
  const uint32_t i = Find(key);
  if (i == kNoSlot) return;
  Unindex(i);
  RemoveFromHeap(i);
  Free(i);
}

template <typename Payload, typename Key>
uint64_t SpaceSaving<Payload, Key>::Guaranteed(KeyArg key) const {
  const uint32_t i = Find(key);
  if (i == kNoSlot) return 0;
  const Slot& slot = slots_[i];
  return slot.count - slot.error;
}

template <typename Payload, typename Key>
std::vector<std::pair<Key, uint64_t>> SpaceSaving<Payload, Key>::Top(size_t n) const {
  std::vector<std::pair<Key, uint64_t>> top;
  for (uint32_t i : heap_) {
    if (uint64_t g = slots_[i].count - slots_[i].error; g > 0) top.emplace_back(slots_[i].key, g);
  }
  auto heavier = [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  };
  if (top.size() > n) {
    std::partial_sort(top.begin(), top.begin() + static_cast<std::ptrdiff_t>(n), top.end(), heavier);
    top.resize(n);
  } else {
    std::sort(top.begin(), top.end(), heavier);
  }
  return top;
}

template <typename Payload, typename Key>
void SpaceSaving<Payload, Key>::Decay() {
  heap_.clear();
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    Slot& slot = slots_[i];
    if (slot.heap_pos == kNotInHeap) continue;  // free
    slot.count /= 2;
    slot.error /= 2;
    if (slot.count == 0) {
      Unindex(i);
      Free(i);
    } else {
      heap_.push_back(i);
    }
  }
  // Halving keeps no heap order (counts tie): rebuilt bottom-up.
  for (size_t pos = 0; pos < heap_.size(); ++pos) slots_[heap_[pos]].heap_pos = static_cast<uint32_t>(pos);
  for (size_t pos = heap_.size() / 2; pos-- > 0;) SiftDown(pos);
}

}  // namespace stormwatch
