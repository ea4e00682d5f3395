// A map that holds at most `capacity` keys: inserting into a full map evicts the least
// recently touched key first and tells the caller (a detector must still resolve a storm
// whose key it drops). Iteration runs from the most to the least recently touched key.
// Not thread-safe.
//
// Recency::kApproximate (the per-request tables of the pipeline and the detectors) is CLOCK,
// "second chance": a touch only marks the key in its index entry, which the lookup has just
// read, instead of moving it to the front, which rewrites the links of the key and of its two
// neighbours (at 10,000 clients, cache misses on every request). The order is then the order
// keys were placed at the front (inserted, or given their second chance), and the marks are read
// when a key must go: the key at the back, if touched since it was placed, is moved to the front
// unmarked and the next one asked. The key evicted was not touched since it was placed, after
// which every other key was placed; a key touched at least once per turn of the table is never
// evicted. Oldest() and iteration follow the placement order (marks not consulted).
//
// Built for the per-request path: an open-addressing index (absl::flat_hash_map) of slot
// numbers, entries in fixed chunks linked by slot number (no node allocated per insert, no
// pointer chasing through a std::list), and values that never move once inserted. The links
// are an array of their own: making a key the most recent rewrites its neighbours' and the
// head's links, 8 bytes each in one dense array, not a cache line in each of three entries.
//
// Admission::kFrequency (the detectors' tables that turn over when more clients are live than
// they hold) adds TinyLFU's admission to FindOrAdmit: every call counts a sighting of its key in
// a FrequencySketch, and once the table is full a key not held takes the place of the key to be
// evicted only if it was seen more often lately. Alike keys (10,000 clients each as busy as the
// next) then stop evicting one another: a refused newcomer writes nothing but its sketch counters
// and reads no entry (the victim's hash is kept beside its links), where an eviction rewrote a
// cold entry. A storm's key is seen more often than the rest within a few of its requests and
// gets in. The sketch (16 bytes per key) is made when the table first fills.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "agent/core/frequency_sketch.h"

namespace stormwatch {

// How exactly a touch orders keys (see above).
enum class Recency { kExact, kApproximate };
// Whether a full table takes every newcomer (evicting its least recent key), or only those
// seen more often lately than that key (FindOrAdmit; see above).
enum class Admission { kAll, kFrequency };

template <typename Key, typename Value, typename Hash = absl::Hash<Key>>
class BoundedLru {
 public:
  using Entry = std::pair<const Key, Value>;

 private:
  static constexpr uint32_t kNil = UINT32_MAX;
  static constexpr size_t kChunk = 256;  // entries per allocation
  struct Slot {
    alignas(Entry) unsigned char storage[sizeof(Entry)];
    Entry& entry() { return *std::launder(reinterpret_cast<Entry*>(storage)); }
    const Entry& entry() const { return *std::launder(reinterpret_cast<const Entry*>(storage)); }
  };

  template <typename Lru, typename E>
  class Iter {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Entry;
    using difference_type = std::ptrdiff_t;
    using pointer = E*;
    using reference = E&;
    Iter() = default;
    Iter(Lru* lru, uint32_t slot) : lru_(lru), slot_(slot) {}
    E& operator*() const { return lru_->At(slot_).entry(); }
    E* operator->() const { return &**this; }
    Iter& operator++() {
      slot_ = lru_->links_[slot_].next;
      return *this;
    }
    bool operator==(const Iter& o) const { return slot_ == o.slot_; }
    bool operator!=(const Iter& o) const { return slot_ != o.slot_; }

   private:
    friend class BoundedLru;
    Lru* lru_ = nullptr;
    uint32_t slot_ = kNil;
  };

 public:
  using iterator = Iter<BoundedLru, Entry>;
  using const_iterator = Iter<const BoundedLru, const Entry>;

  explicit BoundedLru(size_t capacity, Recency recency = Recency::kExact,
                      Admission admission = Admission::kAll)
      : capacity_(std::clamp<size_t>(capacity, 1, kNil - 1)),
        recency_(recency),
        admission_(admission) {}
  BoundedLru(const BoundedLru&) = delete;
  BoundedLru& operator=(const BoundedLru&) = delete;
  ~BoundedLru() {
    for (uint32_t s = head_; s != kNil; s = links_[s].next) At(s).entry().~Entry();
  }

  // The value of `key` without changing its recency; nullptr when absent.
  Value* Find(const Key& key) {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &At(it->second.slot).entry().second;
  }
  const Value* Find(const Key& key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &At(it->second.slot).entry().second;
  }

  // The value of `key`, made the most recent (kApproximate: marked as touched); nullptr when
  // absent.
  Value* Touch(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    Indexed& at = it->second;
    if (recency_ == Recency::kExact) {
      MoveToFront(at.slot);
    } else if (!at.touched) {
      at.touched = true;
    }
    return &At(at.slot).entry().second;
  }

  // The value of `key`, made the most recent; created from `make()` when absent, after
  // evicting the least recent keys (on_evict(key, value) is called for each) to make room.
  template <typename Make, typename OnEvict>
  Value& FindOrInsert(const Key& key, Make make, OnEvict on_evict) {
    if (Value* v = Touch(key)) return *v;
    while (size_ >= capacity_) {
      GiveSecondChances();
      Entry& victim = At(tail_).entry();
      on_evict(victim.first, victim.second);
      index_.erase(victim.first);
      Release(tail_);
      ++evictions_;
    }
    return Place(key, make());
  }

  // The same, but when the map is full the least recent key's value is handed to
  // `reuse(value)` to become the new key's, instead of being destroyed and `make()` called: a
  // value that owns buffers (strings, rings, sketches) keeps them, so a table that turns over
  // (more live keys than its capacity) allocates nothing per insert. `reuse` must leave the
  // value as `make()` would have made it.
  template <typename Make, typename OnEvict, typename Reuse>
  Value& FindOrInsert(const Key& key, Make make, OnEvict on_evict, Reuse reuse) {
    if (Value* v = Touch(key)) return *v;
    return InsertAbsent(key, make, on_evict, reuse);
  }

  // Admission::kFrequency: FindOrInsert(key, make, on_evict, reuse), except that when the table
  // is full a key not held gets in only if seen more often lately than the key it would evict;
  // nullptr when it was refused (its request goes untracked; counted in refusals()). Every call
  // counts a sighting of `key`, held or not, once the table has been full.
  template <typename Make, typename OnEvict, typename Reuse>
  Value* FindOrAdmit(const Key& key, Make make, OnEvict on_evict, Reuse reuse) {
    if (admission_ == Admission::kAll) return &FindOrInsert(key, make, on_evict, reuse);
    const uint64_t hash = HashOf(key);
    if (sightings_) sightings_->Add(hash);
    if (Value* v = Touch(key)) return v;
    if (size_ >= capacity_) {
      if (!sightings_) {  // first full: from now on, sightings count
        sightings_ = std::make_unique<FrequencySketch>(capacity_);
        sightings_->Add(hash);
      }
      GiveSecondChances();
      if (sightings_->Estimate(hash) <= sightings_->Estimate(hashes_[tail_])) {
        ++refusals_;
        return nullptr;
      }
    }
    return &InsertAbsent(key, make, on_evict, reuse);
  }

  // The least recently touched entry (kApproximate: placed), nullptr when empty (for expiry
  // from the old end).
  Entry* Oldest() { return tail_ == kNil ? nullptr : &At(tail_).entry(); }

  bool Erase(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    const uint32_t s = it->second.slot;
    index_.erase(it);
    Release(s);
    return true;
  }

  // Erases the entry at `it` (from iteration); returns the next one.
  iterator Erase(iterator it) {
    const uint32_t s = it.slot_;
    const uint32_t next = links_[s].next;
    index_.erase(At(s).entry().first);
    Release(s);
    return iterator(this, next);
  }

  iterator begin() { return iterator(this, head_); }
  iterator end() { return iterator(this, kNil); }
  const_iterator begin() const { return const_iterator(this, head_); }
  const_iterator end() const { return const_iterator(this, kNil); }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  uint64_t evictions() const { return evictions_; }
  uint64_t refusals() const { return refusals_; }  // newcomers not admitted (kFrequency)

 private:
  // FindOrInsert's insertion, `key` not held: placed at the front.
  template <typename Make, typename OnEvict, typename Reuse>
  Value& InsertAbsent(const Key& key, Make make, OnEvict on_evict, Reuse reuse) {
    if (size_ < capacity_) return Place(key, make());
    GiveSecondChances();
    Entry& victim = At(tail_).entry();
    on_evict(victim.first, victim.second);
    if constexpr (std::is_trivially_copyable_v<Key>) {
      // The value stays in its slot and only the key is replaced (a const member of a
      // non-const object may be: C++20 [basic.life]): nothing moved, nothing destroyed.
      const uint32_t s = tail_;
      index_.erase(victim.first);
      ++evictions_;
      reuse(victim.second);
      new (const_cast<Key*>(&victim.first)) Key(key);
      MoveToFront(s);
      Index(key, s);
      return At(s).entry().second;
    }
    Value value = std::move(victim.second);
    index_.erase(victim.first);
    Release(tail_);
    ++evictions_;
    reuse(value);
    return Place(key, std::move(value));
  }

  // A new entry for `key`, at the front (room already made).
  Value& Place(const Key& key, Value&& value) {
    const uint32_t s = Acquire();
    new (At(s).storage) Entry(key, std::move(value));
    LinkFront(s);
    Index(key, s);
    return At(s).entry().second;
  }
  // Indexes `key` at slot `s` (kFrequency: keeps its hash beside its links).
  void Index(const Key& key, uint32_t s) {
    index_.emplace(key, Indexed{s});
    if (admission_ == Admission::kFrequency) hashes_[s] = HashOf(key);
  }

  Slot& At(uint32_t s) { return chunks_[s / kChunk][s % kChunk]; }
  const Slot& At(uint32_t s) const { return chunks_[s / kChunk][s % kChunk]; }

  uint32_t Acquire() {
    if (free_ != kNil) {
      const uint32_t s = free_;
      free_ = links_[s].next;
      return s;
    }
    if (allocated_ % kChunk == 0) chunks_.push_back(std::make_unique<Slot[]>(kChunk));
    links_.emplace_back();
    if (admission_ == Admission::kFrequency) hashes_.push_back(0);
    return allocated_++;
  }
  // Unlinks slot `s`, destroys its entry and puts it on the free list.
  void Release(uint32_t s) {
    Unlink(s);
    At(s).entry().~Entry();
    links_[s].next = free_;
    free_ = s;
  }
  void Unlink(uint32_t s) {
    Link& link = links_[s];
    (link.prev == kNil ? head_ : links_[link.prev].next) = link.next;
    (link.next == kNil ? tail_ : links_[link.next].prev) = link.prev;
    link.prev = link.next = kNil;
    --size_;
  }
  void LinkFront(uint32_t s) {
    Link& link = links_[s];
    link.prev = kNil;
    link.next = head_;
    (head_ == kNil ? tail_ : links_[head_].prev) = s;
    head_ = s;
    ++size_;
  }
  void MoveToFront(uint32_t s) {
    if (s == head_) return;
    Unlink(s);
    LinkFront(s);
  }
  // kApproximate, before the key at the back is evicted: while it was touched since it was
  // placed, it goes to the front unmarked. Ends: each turn clears a mark. One eviction may turn
  // the whole table (every key marked), but each turn spends a touch's mark: over time, at most
  // one turn per touch.
  void GiveSecondChances() {
    if (recency_ == Recency::kExact) return;
    while (true) {
      Indexed& back = index_.find(At(tail_).entry().first)->second;
      if (!back.touched) return;
      back.touched = false;
      MoveToFront(tail_);
    }
  }

  // The sketch's key: the table's Hash, whose bits must all be well mixed for kFrequency (the
  // sketch picks its block by the low bits and its counters by the high ones; absl::Hash's are).
  static uint64_t HashOf(const Key& key) { return Hash{}(key); }

  size_t capacity_;
  Recency recency_;
  Admission admission_;
  // A key's slot, and (kApproximate) whether it was touched since it was placed at the front:
  // kept in the index, which a touch reads anyway, so marking a key reads nothing more.
  struct Indexed {
    uint32_t slot;
    bool touched = false;
  };
  absl::flat_hash_map<Key, Indexed, Hash> index_;
  std::vector<std::unique_ptr<Slot[]>> chunks_;
  struct Link {
    uint32_t prev = kNil, next = kNil;  // towards the more / less recently touched
  };
  std::vector<Link> links_;  // by slot number, one per slot handed out
  uint32_t allocated_ = 0;  // slots handed out so far (chunks_ hold them)
  // kFrequency: each slot's key's HashOf, so that weighing a newcomer against the key it would
  // evict reads no entry; and the sightings, made when the table first fills.
  std::vector<uint64_t> hashes_;
  std::unique_ptr<FrequencySketch> sightings_;
  uint64_t refusals_ = 0;
  uint32_t head_ = kNil, tail_ = kNil, free_ = kNil;
  size_t size_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace stormwatch
