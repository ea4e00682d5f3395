// Watch/relist churn detector (STORMS.md §6, storm "relist_churn").
//
// Per client instance (user + pod) and resource (group + resource). A WATCH is seen when it
// ends; it counts at the second it began (r.start_ns). Two rules over the last window_s
// complete seconds:
//   relists:    >= min_relists re-LISTs: an informer (the client instance on one namespace and
//               selector) doing a full LIST (no continue token) followed by a WATCH again,
//               after a first LIST+WATCH. First lists do not count, so a controller starting
//               many namespaced informers at once stays quiet. A WatchList (WATCH with
//               sendInitialEvents) is a LIST and a WATCH in one request.
//   watch rate: new WATCHes/s >= watch_rate.
// Resolved after resolve_s consecutive seconds whose own windows break neither rule. At most
// max_keys (client, resource) keys and max_keys informers, least recently seen evicted first
// (a firing key that is evicted is Resolved). Not thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "agent/core/bounded_lru.h"
#include "agent/analysis/detector_config.h"
#include "agent/analysis/second_ring.h"
#include "agent/analysis/storm.h"
#include "agent/analysis/storm_lifecycle.h"

namespace stormwatch {

inline constexpr char kRelistChurnName[] = "relist_churn";
inline constexpr char kRelistChurnFix[] =
    "Find why the watch ends early (the watch codes below; 410 Gone means it resumes from a "
    "resourceVersion that is too old): use client-go's shared informers with watch bookmarks "
    "(allowWatchBookmarks) instead of hand-written LIST+WATCH loops, do not set a short "
    "timeoutSeconds, raise the idle timeout of any proxy or load balancer that cuts long-lived "
    "watches, and share one informer per resource per process.";

class RelistChurnDetector final : public StormDetector {
 public:
  explicit RelistChurnDetector(RelistChurnConfig config = {});

  const char* storm() const override { return kRelistChurnName; }
  void Observe(const RequestRecord& r, int64_t now_ns) override;
  std::vector<StormTransition> Evaluate(int64_t now_ns) override;
  std::vector<StormEvidence> Active() const override;
  DetectorStats Stats() const override;
  const RelistChurnConfig& config() const { return config_; }

 private:
  struct Second {
    uint32_t watches = 0;     // WATCHes that began in this second
    uint32_t relists = 0;     // re-LIST+WATCH pairs whose WATCH began in this second
    uint32_t full_lists = 0;  // full LISTs that began in this second
  };
  struct WatchSample {
    int64_t start_ns = 0;
    int64_t duration_ns = 0;
    int status = 0;
  };
  static constexpr size_t kWatchSamples = 32;  // for the median duration and the codes
  struct Entry {
    explicit Entry(size_t ring) : seconds(ring) {}
    IdentityRef identity;
    std::string api_group;
    std::string resource;
    SecondRing<Second> seconds;
    std::array<WatchSample, kWatchSamples> watches{};  // the most recent ones, a ring
    size_t watches_seen = 0;
    QueryShape list_shape;  // of the last full LIST
    bool list_seen = false;
    std::string relist_namespace;  // namespace and selectors of the last informer that relisted
    std::string relist_label_selector;
    std::string relist_field_selector;
    StormAlert alert{ResolvedEvidence::kAsFired};

    // As a new entry of `r`'s client and resource, its buffers kept (BoundedLru's reuse of an
    // evicted one).
    void Reset(const RequestRecord& r) {
      identity = r.identity;
      api_group.assign(r.info.api_group);
      resource.assign(r.info.resource);
      seconds.Clear();
      // The samples are left as they are: only the first watches_seen are read, and zeroing
      // them wrote 12 cold cache lines on every reuse (at 10,000 clients, every LIST or WATCH).
      watches_seen = 0;
      list_shape = {};
      list_seen = false;
      relist_namespace.clear();
      relist_label_selector.clear();
      relist_field_selector.clear();
      alert = StormAlert(ResolvedEvidence::kAsFired);
    }
  };
  struct Informer {
    int64_t list_start_ns = -1;  // a full LIST not yet followed by a WATCH
    bool listed_before = false;  // a LIST+WATCH already happened: the next one is a relist
  };
  struct Window {
    uint32_t watches = 0;
    uint32_t relists = 0;
    uint32_t full_lists = 0;
  };

  Window WindowSum(const Entry& e, int64_t last) const;
  bool Churning(const Window& w) const;
  StormEvidence BuildEvidence(const Entry& e, const Window& w, int64_t last) const;

  RelistChurnConfig config_;
  BoundedLru<uint64_t, Entry> entries_;  // by client and resource (RecordKeys)
  BoundedLru<uint64_t, Informer> informers_;  // by entry, namespace and selectors
  EvictedAlerts evicted_;
  uint64_t observed_ = 0;
};

}  // namespace stormwatch
