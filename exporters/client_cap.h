// Which clients get their own metric series. A `client` label is unbounded (every service
// account, user and token is one), so at most `max_clients` clients are admitted; requests of
// the others are counted under client="other".
//
// Counters cannot be relabelled, so "top clients" is kept true over time instead of at every
// instant: admitted clients keep their series while active; Compact(), called about once a
// minute, ends the series of clients idle for `idle` and hands the freed slots to the heaviest
// clients among the folded ones, found by a Space-Saving sketch of bounded size. A folded client
// that sends at least kDisplaceFactor times the requests of the least active admitted one (over
// the same decayed window) takes that client's place, so a storm that starts once the slots are
// full is still named.
#pragma once

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>

#include <cstdint>
#include <string_view>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace stormwatch {

inline constexpr char kOtherClient[] = "other";

// Space-Saving (Metwally et al.): approximate top counts of a stream in fixed memory. Each
// count over-estimates by at most its `error`; count - error is a guaranteed lower bound.
class SpaceSaving {
 public:
  explicit SpaceSaving(size_t capacity);
  void Add(const std::string& key, uint64_t amount = 1);
  void Erase(const std::string& key);
  // Lower bound of `key`'s count (0 when not tracked).
  uint64_t Guaranteed(const std::string& key) const;
  // Keys with a positive lower bound, highest first.
  std::vector<std::pair<std::string, uint64_t>> Top(size_t n) const;
  // Halves every count: older traffic weighs less ("recent" counts).
  void Decay();
  size_t size() const { return index_.size(); }
  size_t capacity() const { return slots_.size(); }

 private:
  static constexpr uint32_t kNotInHeap = UINT32_MAX;
  struct Slot {
    std::string key;  // the index's keys view these (slots_ never reallocates)
    uint64_t count = 0, error = 0;
    uint32_t heap_pos = kNotInHeap;
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
  void SiftUp(size_t pos);
  void SiftDown(size_t pos);
  void RemoveFromHeap(uint32_t slot);

  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  std::vector<uint32_t> heap_;
  absl::flat_hash_map<std::string_view, uint32_t> index_;
};

class ClientCap {
 public:
  static constexpr uint64_t kDisplaceFactor = 4;
  // Folded clients below this many (decayed) requests never displace anyone: noise.
  static constexpr uint64_t kMinDisplaceRequests = 60;

  ClientCap(size_t max_clients, int64_t idle_ns);

  // Whether `client` has its own series. `is_request` counts one request towards its activity
  // (other observations of the same request only ask).
  bool Admit(const std::string& client, bool is_request);
  // Ends idle clients, reserves free slots for the heaviest folded clients and lets much
  // heavier folded clients displace the least active admitted ones. Returns the clients whose
  // series must end.
  std::vector<std::string> Compact(int64_t now_ns);

  size_t admitted() const { return admitted_.size(); }
  size_t max_clients() const { return max_clients_; }
  const SpaceSaving& folded() const { return folded_; }

 private:
  struct Activity {
    uint64_t recent = 0;    // requests, halved at every Compact
    bool seen = true;       // since the last Compact
    int64_t last_seen_ns = 0;
  };
  void Admit(const std::string& client, uint64_t recent);

  size_t max_clients_;
  int64_t idle_ns_;
  absl::flat_hash_map<std::string, Activity> admitted_;
  // Slots kept free for heavy folded clients until their next request (or the next Compact).
  absl::flat_hash_set<std::string> reserved_;
  SpaceSaving folded_;
};

}  // namespace stormwatch
