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
//
// Once the sketch is full, a folded client's request is counted in it (tracked or not) only when
// the client was seen more often lately (a FrequencySketch, TinyLFU's admission) than the
// candidate a newcomer would replace, or is that candidate. With thousands of alike folded
// clients every request used to replace the least counted candidate (re-indexing a slot each
// time), counting nothing for long; now they leave the candidates be, and a heavy client (a
// storm) outweighs them within a few requests and is counted from then on.
//
// Clients are found by their label's 64-bit key (ClientName): a request's client is hashed once,
// where its identity is made, not once per table it is looked up in.
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

#include "agent/core/frequency_sketch.h"
#include "agent/core/space_saving.h"

namespace stormwatch {

inline constexpr char kOtherClient[] = "other";

// A client label and its key: the keyed hash of the label (HashFields({label}), so equal
// labels have equal keys). Callers holding the key already (an identity's user_key) pass it;
// the others have the label hashed. The label is a view: valid for the call.
struct ClientName {
  ClientName() = default;  // names nobody: set before use
  ClientName(std::string_view label);  // NOLINT: a label converts, hashed
  ClientName(const char* label) : ClientName(std::string_view(label)) {}  // NOLINT
  ClientName(const std::string& label) : ClientName(std::string_view(label)) {}  // NOLINT
  ClientName(std::string_view label, uint64_t key) : label(label), key(key) {}
  std::string_view label;
  uint64_t key = 0;
};

class ClientCap {
 public:
  static constexpr uint64_t kDisplaceFactor = 4;
  // Folded clients below this many (decayed) requests never displace anyone: noise.
  static constexpr uint64_t kMinDisplaceRequests = 60;

  ClientCap(size_t max_clients, int64_t idle_ns);

  // Whether `client` has its own series. `is_request` counts one request towards its activity
  // (other observations of the same request only ask: answered from the last answer when they
  // ask about the same client, as the families of one request do).
  bool Admit(const ClientName& client, bool is_request);
  // Ends idle clients, reserves free slots for the heaviest folded clients and lets much
  // heavier folded clients displace the least active admitted ones. Returns the clients whose
  // series must end.
  std::vector<std::string> Compact(int64_t now_ns);

  size_t admitted() const { return admitted_.size(); }
  size_t max_clients() const { return max_clients_; }
  // Folded clients by their keys (ClientName::key).
  const SpaceSaving<std::monostate, uint64_t>& folded() const { return folded_; }

 private:
  struct Activity {
    uint64_t recent = 0;    // requests, halved at every Compact
    bool seen = true;       // since the last Compact
    int64_t last_seen_ns = 0;
    std::string label;  // what Compact returns when the client's series end
  };
  void AdmitWith(const ClientName& client, uint64_t recent);
  bool Decide(const ClientName& client, bool is_request);

  size_t max_clients_;
  int64_t idle_ns_;
  absl::flat_hash_map<uint64_t, Activity> admitted_;  // by ClientName::key
  // Slots kept free for heavy folded clients until their next request (or the next Compact).
  absl::flat_hash_set<uint64_t> reserved_;
  SpaceSaving<std::monostate, uint64_t> folded_;
  FrequencySketch seen_;  // folded clients' requests lately: which of them the sketch counts
  // The last client asked about and the answer; forgotten by Compact, the only place an
  // answer changes other than through Admit itself.
  uint64_t last_key_ = 0;
  bool last_admitted_ = false;
  bool last_valid_ = false;
};

}  // namespace stormwatch
