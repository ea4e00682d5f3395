// Stuck finalizers detector (STORMS.md §5, storm "stuck_finalizers").
//
// Per (group, resource). A 2xx DELETE on a named object whose response shows it still there,
// marked for deletion and holding finalizers (ResponseFacts: object_seen, deletion_timestamp,
// finalizers_seen, finalizers non-empty) marks the object terminating since that DELETE. It is
// cleared by a later 2xx update/patch whose response shows no finalizers left, by any 404 on
// it, or by a DELETE response that shows it gone. Objects terminating for >= stuck_after_s are
// stuck; min_stuck_objects stuck objects fire; resolve_s with no stuck object resolve.
//
// Who should have removed the finalizers: writers (update/patch) of each resource are tracked;
// one that wrote steadily (>= steady_writer_writes in writer_lookback_s) and has written
// nothing for silent_after_s while DELETEs kept arriving is the silent controller, named as
// the storm's identity; without one, the last identity that wrote any of the stuck objects.
// The allow list keeps identities from marking objects and from being named, but their writes
// still clear finalizers (an object's facts are facts whoever wrote them).
//
// State is bounded: max_objects terminating objects (oldest dropped first), max_objects
// objects' last writers, max_writers writers (and the packed identities of 4 x max_writers
// writing clients) and max_resources resources (least recently seen dropped first; a firing
// resource dropped is Resolved). Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agent/core/bounded_lru.h"
#include "agent/analysis/detector_config.h"
#include "agent/analysis/packed_identity.h"
#include "agent/analysis/storm.h"
#include "agent/analysis/storm_lifecycle.h"

namespace stormwatch {

inline constexpr char kStuckFinalizersStorm[] = "stuck_finalizers";
inline constexpr char kStuckFinalizersFix[] =
    "The controller that owns these finalizers is not removing them (it is starved or "
    "blocked): put timeouts on its external calls, return RequeueAfter instead of blocking "
    "inside Reconcile, and set MaxConcurrentReconciles > 1 so one stuck object cannot starve "
    "the rest.";

class StuckFinalizersDetector final : public StormDetector {
 public:
  explicit StuckFinalizersDetector(StuckFinalizersConfig config = {});

  const char* storm() const override { return kStuckFinalizersStorm; }
  void Observe(const RequestRecord& r, int64_t now_ns) override;
  std::vector<StormTransition> Evaluate(int64_t now_ns) override;
  std::vector<StormEvidence> Active() const override;
  DetectorStats Stats() const override;

 private:
  struct Terminating {
    uint64_t resource_key = 0;  // RecordKeys::resource
    std::string namespace_;
    std::string name;
    std::vector<std::string> finalizers;
    int64_t since_ns = 0;
  };
  // Packed: 100,000 objects' last writers are mostly clients no other table still holds.
  struct LastWrite {
    PackedIdentity identity;
    int64_t at_ns = 0;
  };
  struct Writer {
    explicit Writer(size_t buckets) : writes(buckets) {}
    // Packed once, shared by the objects it writes; unpacked only to name a silent controller
    // (no shared identity kept alive, none swapped on each reuse of the entry).
    PackedIdentity packed_identity;
    uint64_t resource_key = 0;
    SecondBuckets writes;  // in coarse buckets of writer_bucket_s_ seconds, not 1 s
    int64_t last_write_ns = 0;

    // As a new writer (`who`, packed) on `resource`, its ring kept (BoundedLru's reuse).
    void Reset(const PackedIdentity& who, uint64_t resource) {
      packed_identity = who;
      resource_key = resource;
      writes.Clear();
      last_write_ns = 0;
    }
  };
  struct Resource {
    Resource() : deletes(61) {}
    std::string api_group;
    std::string resource;
    SecondBuckets deletes;  // the last minute, for deletes/s
    int64_t last_delete_ns = INT64_MIN;
    StormAlert alert{ResolvedEvidence::kLatest};
    int64_t calm_since_ns = -1;  // while firing: since when no object is stuck
  };
  struct Stuck;  // per-resource aggregate of one Evaluate

  // `r`'s identity packed, once per client while the client stays among the last
  // kPackedClientsPerWriter * max_writers: (resource, client) writers outnumber max_writers at
  // 10,000 clients, so nearly every write takes over an entry and would otherwise pack (and
  // allocate) afresh.
  const PackedIdentity& PackedWriter(const RequestRecord& r, uint64_t client_key);
  Resource& TouchResource(const RequestRecord& r, uint64_t key, int64_t now_ns);
  void ObserveWrite(const RequestRecord& r, const RecordKeys& keys, bool allowed, int64_t now_ns);
  double WritesInLookback(const Writer& w) const;
  StormEvidence BuildEvidence(const Resource& res, uint64_t resource_key,
                              const Stuck& stuck, int64_t now_ns) const;

  StuckFinalizersConfig config_;
  int64_t writer_bucket_s_;  // writer_lookback_s / kWriterBuckets, rounded up
  // Keyed by RecordKeys: objects, resources, and (resource, client) for writers.
  BoundedLru<uint64_t, Terminating> terminating_;  // front = newest mark
  BoundedLru<uint64_t, LastWrite> last_writes_;    // by object
  BoundedLru<uint64_t, Writer> writers_;           // by (resource, client)
  BoundedLru<uint64_t, PackedIdentity> packed_clients_;  // by RecordKeys::client
  BoundedLru<uint64_t, Resource> resources_;
  EvictedAlerts evicted_;
  uint64_t observed_ = 0;
  uint64_t orphans_dropped_ = 0;  // terminating objects whose resource was evicted
};

}  // namespace stormwatch
