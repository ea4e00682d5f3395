// 409 Conflict retry storm detector (STORMS.md §4, storm "conflict_storm").
//
// Per (identity, group, resource), writes are PUT/PATCH (verbs update and patch) on the main
// resource or its /status. Over the last sustain_s complete seconds: conflicts (409) / writes
// >= conflict_ratio AND conflicts/s >= conflict_rate (averaged), with 409s in at least
// min_conflict_seconds of those seconds, fires (once the key was tracked for the whole
// window: a key is tracked from its first 409, the window begins after that second).
// Averages, not per-second thresholds: a
// retrying client's 409s come in waves of backoff. Resolved after resolve_s consecutive
// seconds each under the rate or under the ratio. A busy controller's occasional 409s (a few
// percent) stay silent.
// State is bounded: max_keys (identity, resource) keys and max_objects conflicted objects,
// least recently seen evicted first. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/core/bounded_lru.h"
#include "agent/analysis/detector_config.h"
#include "agent/analysis/storm.h"
#include "agent/analysis/storm_lifecycle.h"

namespace stormwatch {

inline constexpr char kConflictStormStorm[] = "conflict_storm";
inline constexpr char kConflictStormFix[] =
    "Many writers race on the same objects with stale resourceVersions: use Patch or "
    "Server-Side Apply instead of Update (no resourceVersion precondition), add "
    "GenerationChangedPredicate so status/metadata-only events do not requeue, and run fewer "
    "workers on the same object.";

class ConflictStormDetector final : public StormDetector {
 public:
  explicit ConflictStormDetector(ConflictStormConfig config = {});

  const char* storm() const override { return kConflictStormStorm; }
  void Observe(const RequestRecord& r, int64_t now_ns) override;
  std::vector<StormTransition> Evaluate(int64_t now_ns) override;
  std::vector<StormEvidence> Active() const override;
  DetectorStats Stats() const override;

 private:
  struct Entry {
    explicit Entry(size_t ring)
        : writes(ring), conflicts(ring), status_writes(ring), status_conflicts(ring) {}
    IdentityRef identity;
    std::string api_group;
    std::string resource;
    int64_t first_seen_s = 0;        // its first 409's: judged once tracked a whole window after
    SecondBuckets writes;            // all writes, /status included
    SecondBuckets conflicts;
    SecondBuckets status_writes;     // the /status share of the two above
    SecondBuckets status_conflicts;
    StormAlert alert{ResolvedEvidence::kLatest};

    // As a new entry of `r`'s client and resource, first seen in second `now_s`, its rings
    // kept (BoundedLru's reuse of an evicted one).
    void Reset(const RequestRecord& r, int64_t now_s) {
      identity = r.identity;
      api_group.assign(r.info.api_group);
      resource.assign(r.info.resource);
      first_seen_s = now_s;
      writes.Clear();
      conflicts.Clear();
      status_writes.Clear();
      status_conflicts.Clear();
      alert = StormAlert(ResolvedEvidence::kLatest);
    }
  };
  struct ContendedObject {
    explicit ContendedObject(size_t ring) : conflicts(ring) {}
    uint64_t entry_key = 0;  // its Entry's
    std::string namespace_;
    std::string name;
    SecondBuckets conflicts;

    // As a new object of entry `entry`, its buffers kept (BoundedLru's reuse).
    void Reset(uint64_t entry, const RequestInfo& info) {
      entry_key = entry;
      namespace_.assign(info.namespace_);
      name.assign(info.name);
      conflicts.Clear();
    }
  };

  bool Holds(const Entry& e, int64_t last) const;
  bool Calm(const Entry& e, int64_t s) const;
  StormEvidence BuildEvidence(const Entry& e, int64_t last, int64_t now_ns,
                              const std::vector<const ContendedObject*>& top) const;

  ConflictStormConfig config_;
  size_t ring_;
  BoundedLru<uint64_t, Entry> entries_;  // by client and resource (RecordKeys)
  BoundedLru<uint64_t, ContendedObject> objects_;  // by client and object; touched on 409s only
  EvictedAlerts evicted_;
  uint64_t observed_ = 0;
};

}  // namespace stormwatch
