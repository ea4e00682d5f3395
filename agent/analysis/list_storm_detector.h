// LIST storm detector (STORMS.md §2, storm "list_storm").
//
// Counts LISTs per (user, group, resource): replicas of one service account add up, as the
// pollers of the incident did. Consistent (no resourceVersion), unpaginated (no limit),
// cluster-scope LISTs count expensive_weight times, their bytes too. Pollers are bursty (one
// burst every few seconds), so the decision is on the AVERAGE over the last sustain_s complete
// seconds: weighted LISTs/s >= list_rate or weighted bytes/s >= bytes_rate, for a key first
// seen at or before the window's first second (the average is never over fewer seconds, so a
// short burst cannot average up). Resolved after resolve_s consecutive seconds whose own
// window averages are under both thresholds. At most max_keys keys, least recently listed
// evicted first (a firing key that is evicted is Resolved). Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/core/bounded_lru.h"
#include "agent/analysis/detector_config.h"
#include "agent/analysis/second_ring.h"
#include "agent/analysis/storm.h"
#include "agent/analysis/storm_lifecycle.h"
#include "agent/analysis/tally.h"

namespace stormwatch {

inline constexpr char kListStormName[] = "list_storm";
inline constexpr char kListStormFix[] =
    "Replace the polling loop with an informer (one LIST, then WATCH); if the client must poll, "
    "list with resourceVersion=0 (served from the watch cache) and limit=500 with continue; and "
    "give workloads neither system:masters nor cluster-admin, so API Priority and Fairness can "
    "limit them.";

class ListStormDetector final : public StormDetector {
 public:
  explicit ListStormDetector(ListStormConfig config = {});

  const char* storm() const override { return kListStormName; }
  void Observe(const RequestRecord& r, int64_t now_ns) override;
  std::vector<StormTransition> Evaluate(int64_t now_ns) override;
  std::vector<StormEvidence> Active() const override;
  DetectorStats Stats() const override;
  const ListStormConfig& config() const { return config_; }

 private:
  // One second of one key's LISTs.
  struct Second {
    uint32_t lists = 0;
    uint32_t expensive = 0;  // consistent, unpaginated, cluster scope
    uint64_t bytes = 0;
    uint64_t expensive_bytes = 0;
    uint32_t consistent = 0;
    uint32_t any = 0;
    uint32_t exact = 0;
    uint32_t not_older_than = 0;
    uint32_t paginated = 0;
    uint32_t cluster_scope = 0;
    uint32_t etcd_lists = 0;  // matched to the etcd Range they caused (RequestRecord::etcd)
    uint64_t etcd_keys = 0;
    uint64_t etcd_bytes = 0;
    Second& operator+=(const Second& o);
  };
  struct Entry {
    explicit Entry(size_t ring) : seconds(ring) {}
    IdentityRef identity;  // as last seen: the user agent may change
    std::string api_group;
    std::string resource;
    int64_t first_seen_ns = 0;
    SecondRing<Second> seconds;
    Tally priority_levels{4};
    Tally flow_schemas{4};
    StormAlert alert{ResolvedEvidence::kAsFired};

    // As a new entry of `r`'s client and resource, first seen now, its buffers kept
    // (BoundedLru's reuse of an evicted one).
    void Reset(const RequestRecord& r, int64_t now_ns) {
      identity = r.identity;
      api_group.assign(r.info.api_group);
      resource.assign(r.info.resource);
      first_seen_ns = now_ns;
      seconds.Clear();
      priority_levels.Clear();
      flow_schemas.Clear();
      alert = StormAlert(ResolvedEvidence::kAsFired);
    }
  };

  Second WindowSum(const Entry& e, int64_t last) const;
  bool Heavy(const Second& window) const;
  StormEvidence BuildEvidence(const Entry& e, const Second& window) const;

  ListStormConfig config_;
  BoundedLru<uint64_t, Entry> entries_;  // by user and resource (RecordKeys)
  EvictedAlerts evicted_;
  uint64_t observed_ = 0;
};

}  // namespace stormwatch
