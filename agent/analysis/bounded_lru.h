// A map that holds at most `capacity` keys: inserting into a full map evicts the least
// recently touched key first and tells the caller (a detector must still resolve a storm
// whose key it drops). Iteration runs from the most to the least recently touched key.
// Not thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <unordered_map>
#include <utility>

namespace stormwatch {

template <typename Key, typename Value, typename Hash = std::hash<Key>>
class BoundedLru {
 public:
  using Entry = std::pair<const Key, Value>;
  using iterator = typename std::list<Entry>::iterator;
  using const_iterator = typename std::list<Entry>::const_iterator;

  explicit BoundedLru(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}
  BoundedLru(const BoundedLru&) = delete;
  BoundedLru& operator=(const BoundedLru&) = delete;

  // The value of `key` without changing its recency; nullptr when absent.
  Value* Find(const Key& key) {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &it->second->second;
  }
  const Value* Find(const Key& key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &it->second->second;
  }

  // The value of `key`, made the most recent; nullptr when absent.
  Value* Touch(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    entries_.splice(entries_.begin(), entries_, it->second);
    return &it->second->second;
  }

  // The value of `key`, made the most recent; created from `make()` when absent, after
  // evicting the least recent keys (on_evict(key, value) is called for each) to make room.
  template <typename Make, typename OnEvict>
  Value& FindOrInsert(const Key& key, Make make, OnEvict on_evict) {
    if (Value* v = Touch(key)) return *v;
    while (entries_.size() >= capacity_) {
      Entry& victim = entries_.back();
      on_evict(victim.first, victim.second);
      index_.erase(victim.first);
      entries_.pop_back();
      ++evictions_;
    }
    entries_.emplace_front(key, make());
    index_.emplace(key, entries_.begin());
    return entries_.front().second;
  }

  bool Erase(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    entries_.erase(it->second);
    index_.erase(it);
    return true;
  }

  // Erases the entry at `it` (from iteration); returns the next one.
  iterator Erase(iterator it) {
    index_.erase(it->first);
    return entries_.erase(it);
  }

  iterator begin() { return entries_.begin(); }
  iterator end() { return entries_.end(); }
  const_iterator begin() const { return entries_.begin(); }
  const_iterator end() const { return entries_.end(); }
  size_t size() const { return entries_.size(); }
  size_t capacity() const { return capacity_; }
  uint64_t evictions() const { return evictions_; }

 private:
  size_t capacity_;
  std::list<Entry> entries_;  // front = most recently touched
  std::unordered_map<Key, iterator, Hash> index_;
  uint64_t evictions_ = 0;
};

}  // namespace stormwatch
