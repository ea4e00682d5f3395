// Throttled client detector (STORMS.md §4, storm "throttled_client").
//
// Per identity (user + pod): 429 Too Many Requests answers (API Priority and Fairness
// rejecting the client) >= throttled_rate in each of sustain_s consecutive complete seconds
// fires; resolve_s consecutive seconds under the rate resolve. The evidence says how hard it
// is throttled, what it asked for, the Retry-After values and APF level it got, and whether
// its own request rate sits flat at a client-go QPS limit (its client-side limiter is pinned
// too: the client is throttled on both sides).
// A client is tracked from its first 429 on (most clients are never throttled: the table
// holds those that are, not every client of the API server); its request rate is then taken
// over the complete seconds it was tracked for.
// State is bounded: at most max_clients identities, least recently seen evicted first.
// Not thread-safe: one owner calls Observe and Evaluate.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "agent/core/bounded_lru.h"
#include "agent/analysis/detector_config.h"
#include "agent/analysis/storm.h"
#include "agent/analysis/storm_lifecycle.h"

namespace stormwatch {

inline constexpr char kThrottledClientStorm[] = "throttled_client";
inline constexpr char kThrottledClientFix[] =
    "The API server's priority and fairness is rejecting this client (429 + Retry-After): cut "
    "its request rate rather than retrying harder: informers (LIST once + WATCH) instead of "
    "polling, Patch / Server-Side Apply instead of Update-and-retry, "
    "GenerationChangedPredicate, fewer workers on the same object, and honour Retry-After. If "
    "the load is legitimate, give it its own FlowSchema and priority level with enough shares "
    "instead of raising client QPS.";

// The typical client-go QPS limits (rest.Config QPS: 5 by default, 20 and 50 as commonly set).
inline constexpr double kClientGoQpsLimits[] = {5.0, 20.0, 50.0};

// The client-go QPS limit that every one of the `seconds` seconds ending at `last` sits at,
// within `tolerance` (a fraction of the limit); 0 when the rate is not flat at one.
double FlatClientGoLimit(const SecondBuckets& counts, int64_t last, int seconds,
                         double tolerance);

class ThrottledClientDetector final : public StormDetector {
 public:
  explicit ThrottledClientDetector(ThrottledClientConfig config = {});

  const char* storm() const override { return kThrottledClientStorm; }
  void Observe(const RequestRecord& r, int64_t now_ns) override;
  std::vector<StormTransition> Evaluate(int64_t now_ns) override;
  std::vector<StormEvidence> Active() const override;
  DetectorStats Stats() const override;

 private:
  struct ResourceThrottles {
    std::string api_group;
    std::string resource;
    SecondBuckets throttled;  // over the sustain window
  };
  struct Client {
    Client(size_t ring, size_t window_ring) : requests(window_ring), throttled(ring) {}
    IdentityRef identity;
    SecondBuckets requests;   // every request the client made (429s included), for the evidence
    SecondBuckets throttled;  // its 429s, over the sustain and the resolve windows
    // Where its 429s landed, a few at most: the first `resources_used`; the rest are kept
    // from an earlier client of this entry, for their buffers (no allocation per reuse).
    std::vector<ResourceThrottles> resources;
    size_t resources_used = 0;
    // Retry-After values of the current run of 429s (reset after a quiet ring).
    int retry_after_min_s = -1;
    int retry_after_max_s = -1;
    int64_t last_throttled_s = INT64_MIN / 2;
    int64_t tracked_since_s = 0;  // the second of the 429 that began tracking it
    std::string priority_level;
    std::string flow_schema;
    StormAlert alert{ResolvedEvidence::kLatest};

    // As a new Client of `who`, its buffers kept (BoundedLru's reuse of an evicted one).
    void Reset(IdentityRef who, int64_t now_s) {
      identity = std::move(who);
      tracked_since_s = now_s;
      requests.Clear();
      throttled.Clear();
      resources_used = 0;
      retry_after_min_s = retry_after_max_s = -1;
      last_throttled_s = INT64_MIN / 2;
      priority_level.clear();
      flow_schema.clear();
      alert = StormAlert(ResolvedEvidence::kLatest);
    }
  };

  static std::span<const ResourceThrottles> Resources(const Client& c) {
    return {c.resources.data(), c.resources_used};
  }
  void CountResource(Client& c, const RequestRecord& r, int64_t now_ns) const;
  StormEvidence BuildEvidence(const Client& c, int64_t last, int64_t now_ns) const;

  ThrottledClientConfig config_;
  size_t ring_;         // seconds kept of 429s: the sustain and resolve windows (+1: in progress)
  size_t window_ring_;  // of the rest, read only over the sustain window for the evidence
  BoundedLru<uint64_t, Client> clients_;  // by RecordKeys::client
  EvictedAlerts evicted_;
  uint64_t observed_ = 0;
};

}  // namespace stormwatch
