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

#include <cstdint>
#include <set>
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
  struct Slot {
    std::string key;
    uint64_t count = 0, error = 0;
  };
  std::vector<Slot> slots_;
  std::vector<size_t> free_;
  std::unordered_map<std::string, size_t> index_;
  std::set<std::pair<uint64_t, size_t>> by_count_;  // (count, slot): the minimum is replaced
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
  std::unordered_map<std::string, Activity> admitted_;
  // Slots kept free for heavy folded clients until their next request (or the next Compact).
  std::unordered_set<std::string> reserved_;
  SpaceSaving folded_;
};

}  // namespace stormwatch
