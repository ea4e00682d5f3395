// Space-Saving (Metwally et al.): approximate top counts of a stream of keys in fixed memory,
// the one heavy-hitter sketch of the agent (which clients get their own metric series, by
// their 64-bit label keys; which peer IPs of a client are kept, by their 16 bytes). Each count
// over-estimates by at most its `error`; count - error is a guaranteed lower bound. A key that
// is not tracked takes the slot of the smallest count and inherits that count as its error, so
// a heavy key is never pushed out by many light ones. Each slot can carry a Payload (what the
// caller keeps per key, reset when the slot changes hands). Not thread-safe.
//
// Kept as the paper's Stream-Summary: buckets of equal count in a list ordered by count, each
// a list of its slots in the order they reached that count. An update moves one slot to the
// next bucket up: O(1) for the usual +1, where a heap sifted the slot through every slot of
// its count (a dozen levels with thousands of folded clients). Among equal smallest counts the
// slot replaced is the one that has held that count longest.
// Small sketches (ClientPeers' 8 IPs per client, one per live client) keep no buckets, index
// or free list: they scan their few slots for a key and for the slot to replace (the smallest
// count, held longest), which costs less than hashing the key and keeps each sketch small.
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

  explicit SpaceSaving(size_t capacity)
      : slots_(capacity), payloads_(capacity), scan_(capacity <= kScanCapacity) {
    if (scan_) return;
    buckets_.resize(capacity);
    FreeAll();
  }
  // Moves keep every slot where it is (the index views the slots' keys); copies would not.
  SpaceSaving(SpaceSaving&&) noexcept = default;
  SpaceSaving& operator=(SpaceSaving&&) noexcept = default;
  SpaceSaving(const SpaceSaving&) = delete;
  SpaceSaving& operator=(const SpaceSaving&) = delete;

  // Counts `amount` (at least 1) more for `key`; its slot's payload (nullptr only with
  // capacity 0).
  Payload* Add(KeyArg key, uint64_t amount = 1);
  void Erase(KeyArg key);
  // Lower bound of `key`'s count (0 when not tracked).
  uint64_t Guaranteed(KeyArg key) const;
  // `key`'s payload, nullptr when not tracked.
  const Payload* PayloadOf(KeyArg key) const;
  // Keys with a positive lower bound, highest first (ties: the smaller key first).
  std::vector<std::pair<Key, uint64_t>> Top(size_t n) const;
  // Every tracked key: f(key, count, error, payload), in no order.
  template <typename F>
  void ForEach(F f) const {
    if (scan_) {
      for (const Slot& slot : slots_) {
        if (slot.bucket != kNone) {
          f(KeyArg(slot.key), slot.count, slot.error, payloads_[&slot - slots_.data()]);
        }
      }
      return;
    }
    for (uint32_t b = min_bucket_; b != kNone; b = buckets_[b].next) {
      for (uint32_t i = buckets_[b].head; i != kNone; i = slots_[i].next) {
        f(KeyArg(slots_[i].key), slots_[i].count, slots_[i].error, payloads_[i]);
      }
    }
  }
  // Forgets every key, as a new sketch of the same capacity, keeping its buffers.
  void Clear();
  // Halves every count: older traffic weighs less ("recent" counts).
  void Decay();
  // The key a key not tracked would replace: the oldest slot of the smallest count, when the
  // sketch is full and keeps buckets (nullptr otherwise: a newcomer takes a free slot, or a
  // small sketch scans for it).
  const Key* NextVictim() const {
    if (scan_ || !free_slots_.empty() || min_bucket_ == kNone) return nullptr;
    return &slots_[buckets_[min_bucket_].head].key;
  }
  size_t size() const { return used_; }
  size_t capacity() const { return slots_.size(); }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Slot {
    Key key{};  // the index's string keys view these (slots_ never reallocates)
    uint64_t count = 0, error = 0;
    uint64_t seq = 0;  // when it reached its count: orders a bucket (and rebuilds it in Decay)
    uint32_t bucket = kNone;  // kNone: free; kScanned: used in a small sketch (no buckets)
    uint32_t prev = kNone, next = kNone;  // within its bucket
  };
  struct Bucket {
    uint64_t count = 0;
    uint32_t head = kNone, tail = kNone;  // its slots, oldest first
    uint32_t prev = kNone, next = kNone;  // buckets by count, smallest first
  };

  static constexpr uint32_t kScanned = kNone - 1;

  // The slot holding `key`, or kNone.
  uint32_t Find(KeyArg key) const {
    if (scan_) {
      // Up to the last used slot: used slots come first (a free one is taken lowest first), so
      // a sketch with one key reads one slot, an empty one none.
      uint32_t left = static_cast<uint32_t>(used_);
      for (uint32_t i = 0; left > 0 && i < slots_.size(); ++i) {
        if (slots_[i].bucket == kNone) continue;
        if (slots_[i].key == key) return i;
        --left;
      }
      return kNone;
    }
    auto it = index_.find(key);
    return it == index_.end() ? kNone : it->second;
  }
  void Index(uint32_t i) {
    if (!scan_) index_.emplace(KeyArg(slots_[i].key), i);
  }
  void Unindex(uint32_t i) {
    if (!scan_) index_.erase(KeyArg(slots_[i].key));
  }
  // Takes slot `i` out of its bucket, freeing the bucket when it empties. Returns the bucket
  // after which a larger count belongs: its own if it stays, else the one before it (kNone:
  // search from the smallest).
  uint32_t Unlink(uint32_t i);
  // Puts slot `i` (count set) at the tail of the bucket of its count, searching upwards from
  // the bucket after `after` (kNone: from the smallest), making the bucket when missing.
  void Link(uint32_t i, uint32_t after);
  // Moves slot `i` (in a bucket) to `count` (larger than its own).
  void Raise(uint32_t i, uint64_t count);
  // A small sketch's slot of `key`, else the slot a key not tracked takes: the first free one,
  // else the smallest (count, seq). One pass: a full sketch missing the key (a light writer
  // among many) reads each slot once, not once to find and once to replace.
  uint32_t FindOrVictim(KeyArg key) const {
    uint32_t free = kNone, victim = kNone;
    size_t left = used_;  // used slots not yet read: none left and a free one seen, stop
    for (uint32_t i = 0; i < slots_.size(); ++i) {
      const Slot& slot = slots_[i];
      if (slot.bucket == kNone) {
        if (free == kNone) free = i;
        if (left == 0) break;
        continue;
      }
      if (slot.key == key) return i;
      --left;
      if (victim == kNone || slot.count < slots_[victim].count ||
          (slot.count == slots_[victim].count && slot.seq < slots_[victim].seq)) {
        victim = i;
      }
    }
    return free != kNone ? free : victim;
  }
  // Every slot and bucket free (buckets_ sized).
  void FreeAll() {
    free_slots_.clear();
    for (size_t i = slots_.size(); i > 0; --i) free_slots_.push_back(static_cast<uint32_t>(i - 1));
    FreeBuckets();
  }
  // Every bucket free and empty, the list of buckets with them.
  void FreeBuckets() {
    for (Bucket& bucket : buckets_) bucket = Bucket{};
    free_buckets_.clear();
    for (size_t i = buckets_.size(); i > 0; --i) free_buckets_.push_back(static_cast<uint32_t>(i - 1));
    min_bucket_ = kNone;
  }
  // Slot `i` now holds `key` (indexed).
  void SetKey(uint32_t i, KeyArg key);
  // Keeps a string key's buffer for the slot's next key.
  static void ClearKey(Key& key) {
    if constexpr (std::is_same_v<Key, std::string>) {
      key.clear();
    } else {
      key = Key{};
    }
  }
  // Slot `i` as a free one, its key's buffer kept.
  void ResetSlot(uint32_t i) {
    Slot& slot = slots_[i];
    ClearKey(slot.key);
    slot.count = slot.error = slot.seq = 0;
    slot.bucket = slot.prev = slot.next = kNone;
    payloads_[i] = Payload{};
  }
  void Free(uint32_t i) {
    ResetSlot(i);
    if (!scan_) free_slots_.push_back(i);
    --used_;
  }

  std::vector<Slot> slots_;
  // Each slot's payload, apart from the slots: a small sketch's scan for a key or the slot to
  // replace reads every slot, and with the payloads inline (a stuck-finalizers writer's is
  // over 100 bytes) it read 2-3 cache lines per slot instead of under one.
  std::vector<Payload> payloads_;
  // The large sketches' (none in a small one): at most one bucket per used slot.
  std::vector<Bucket> buckets_;
  std::vector<uint32_t> free_slots_, free_buckets_;
  uint32_t min_bucket_ = kNone;
  size_t used_ = 0;
  uint64_t next_seq_ = 0;
  bool scan_;
  // A small sketch's last added slot, tried before the scan: a client's requests mostly come
  // from the IP its previous one came from. A hint only (the slot's key is compared).
  uint32_t last_added_ = kNone;
  absl::flat_hash_map<KeyArg, uint32_t> index_;  // empty when scan_
};

template <typename Payload, typename Key>
uint32_t SpaceSaving<Payload, Key>::Unlink(uint32_t i) {
  Slot& slot = slots_[i];
  const uint32_t b = slot.bucket;
  Bucket& bucket = buckets_[b];
  (slot.prev == kNone ? bucket.head : slots_[slot.prev].next) = slot.next;
  (slot.next == kNone ? bucket.tail : slots_[slot.next].prev) = slot.prev;
  slot.bucket = slot.prev = slot.next = kNone;
  if (bucket.head != kNone) return b;
  const uint32_t before = bucket.prev;
  (bucket.prev == kNone ? min_bucket_ : buckets_[bucket.prev].next) = bucket.next;
  if (bucket.next != kNone) buckets_[bucket.next].prev = bucket.prev;
  bucket = Bucket{};
  free_buckets_.push_back(b);
  return before;
}

template <typename Payload, typename Key>
void SpaceSaving<Payload, Key>::Link(uint32_t i, uint32_t after) {
  Slot& slot = slots_[i];
  uint32_t b = after == kNone ? min_bucket_ : buckets_[after].next;
  while (b != kNone && buckets_[b].count < slot.count) {
    after = b;
    b = buckets_[b].next;
  }
  if (b == kNone || buckets_[b].count != slot.count) {  // a new bucket between after and b
    const uint32_t fresh = free_buckets_.back();
    free_buckets_.pop_back();
    buckets_[fresh] = Bucket{.count = slot.count, .prev = after, .next = b};
    (after == kNone ? min_bucket_ : buckets_[after].next) = fresh;
    if (b != kNone) buckets_[b].prev = fresh;
    b = fresh;
  }
  Bucket& bucket = buckets_[b];
  slot.bucket = b;
  slot.prev = bucket.tail;
  slot.next = kNone;
  (bucket.tail == kNone ? bucket.head : slots_[bucket.tail].next) = i;
  bucket.tail = i;
  slot.seq = next_seq_++;
}

template <typename Payload, typename Key>
Payload* SpaceSaving<Payload, Key>::Add(KeyArg key, uint64_t amount) {
  if (scan_) {
    uint32_t i = last_added_ != kNone && slots_[last_added_].bucket != kNone &&
                         slots_[last_added_].key == key
                     ? last_added_
                     : FindOrVictim(key);
    if (i == kNone) return nullptr;  // capacity 0
    Slot& slot = slots_[i];
    if (slot.bucket == kNone) {  // a free slot
      ++used_;
      slot.bucket = kScanned;
      SetKey(i, key);
    } else if (slot.key != key) {  // the newcomer inherits the smallest count as its error
      slot.error = slot.count;
      payloads_[i] = Payload{};
      SetKey(i, key);
    }
    slot.count += amount;
    slot.seq = next_seq_++;
    last_added_ = i;
    return &payloads_[i];
  }
  if (const uint32_t found = Find(key); found != kNone) {
    Raise(found, slots_[found].count + amount);
    return &payloads_[found];
  }
  if (!free_slots_.empty()) {
    const uint32_t i = free_slots_.back();
    free_slots_.pop_back();
    ++used_;
    SetKey(i, key);
    slots_[i].count = amount;
    Link(i, kNone);
    return &payloads_[i];
  }
  if (min_bucket_ == kNone) return nullptr;  // capacity 0
  // Full: the newcomer takes the oldest slot of the smallest count, inheriting that count as
  // its possible over-estimate.
  const uint32_t i = buckets_[min_bucket_].head;
  Slot& slot = slots_[i];
  Unindex(i);
  SetKey(i, key);
  payloads_[i] = Payload{};
  slot.error = slot.count;
  Raise(i, slot.count + amount);
  return &payloads_[i];
}

template <typename Payload, typename Key>
void SpaceSaving<Payload, Key>::Raise(uint32_t i, uint64_t count) {
  Slot& slot = slots_[i];
  Bucket& bucket = buckets_[slot.bucket];
  // Alone in its bucket, and no bucket up to the new count: the bucket itself moves up.
  if (bucket.head == i && bucket.tail == i &&
      (bucket.next == kNone || buckets_[bucket.next].count > count)) {
    slot.count = bucket.count = count;
    slot.seq = next_seq_++;
    return;
  }
  const uint32_t after = Unlink(i);
  slot.count = count;
  Link(i, after);
}

template <typename Payload, typename Key>
void SpaceSaving<Payload, Key>::SetKey(uint32_t i, KeyArg key) {
  if constexpr (std::is_same_v<Key, std::string>) {
    slots_[i].key.assign(key);  // reuses the slot's buffer
  } else {
    slots_[i].key = key;
  }
  Index(i);
}

template <typename Payload, typename Key>
void SpaceSaving<Payload, Key>::Clear() {
  // Only used slots are reset, and the scan stops at the last (a client's peers are cleared
  // each time its entry is reused, its slots cold: a client of one peer touches one slot).
  for (size_t i = 0, left = used_; left > 0 && i < slots_.size(); ++i) {
    if (slots_[i].bucket == kNone) continue;
    ResetSlot(static_cast<uint32_t>(i));
    --left;
  }
  used_ = 0;
  next_seq_ = 0;
  if (scan_) return;
  index_.clear();
  FreeAll();
}

template <typename Payload, typename Key>
void SpaceSaving<Payload, Key>::Erase(KeyArg key) {
  const uint32_t i = Find(key);
  if (i == kNone) return;
  Unindex(i);
  if (!scan_) Unlink(i);
  Free(i);
}

template <typename Payload, typename Key>
const Payload* SpaceSaving<Payload, Key>::PayloadOf(KeyArg key) const {
  const uint32_t i = Find(key);
  return i == kNone ? nullptr : &payloads_[i];
}

template <typename Payload, typename Key>
uint64_t SpaceSaving<Payload, Key>::Guaranteed(KeyArg key) const {
  const uint32_t i = Find(key);
  if (i == kNone) return 0;
  const Slot& slot = slots_[i];
  return slot.count - slot.error;
}

template <typename Payload, typename Key>
std::vector<std::pair<Key, uint64_t>> SpaceSaving<Payload, Key>::Top(size_t n) const {
  std::vector<std::pair<Key, uint64_t>> top;
  ForEach([&](KeyArg key, uint64_t count, uint64_t error, const Payload&) {
    if (count > error) top.emplace_back(Key(key), count - error);
  });
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
  // Halving merges buckets: the kept slots are relinked by (new count, the order they reached
  // their old count), as a fresh sketch fed in that order would hold them. Once a minute.
  std::vector<uint32_t> kept;
  kept.reserve(used_);
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    Slot& slot = slots_[i];
    if (slot.bucket == kNone) continue;  // free
    slot.count /= 2;
    slot.error /= 2;
    if (slot.count == 0) {
      Unindex(i);
      Free(i);
    } else {
      kept.push_back(i);
    }
  }
  if (scan_) return;  // a small sketch orders by (count, seq) when it looks: nothing to relink
  std::sort(kept.begin(), kept.end(), [this](uint32_t a, uint32_t b) {
    return slots_[a].count != slots_[b].count ? slots_[a].count < slots_[b].count
                                              : slots_[a].seq < slots_[b].seq;
  });
  FreeBuckets();
  uint32_t last = kNone;  // the largest bucket so far: each kept slot goes there or after it
  for (uint32_t i : kept) {
    const uint64_t seq = slots_[i].seq;
    slots_[i].bucket = slots_[i].prev = slots_[i].next = kNone;
    // Same count as the last bucket: join it (searching from the one before it); larger: a
    // new bucket after it.
    uint32_t after = kNone;
    if (last != kNone) after = buckets_[last].count == slots_[i].count ? buckets_[last].prev : last;
    Link(i, after);
    last = slots_[i].bucket;
    slots_[i].seq = seq;  // the order it had, not a new arrival
  }
}

}  // namespace stormwatch
