// Stuck finalizers detector (STORMS.md §5, storm "stuck_finalizers").
//
// Per (group, resource). A 2xx DELETE on a named object whose response shows it still there,
// marked for deletion and holding finalizers (ResponseFacts: object_seen, deletion_timestamp,
// finalizers_seen, finalizers non-empty) marks the object terminating since that DELETE. It is
// cleared by a later 2xx update/patch whose response shows no finalizers left, by any 404 on
// it, or by a DELETE response that shows it gone. Objects terminating for >= stuck_after_s are
// stuck; min_stuck_objects stuck objects fire; resolve_s with no stuck object resolve.
//
// Who should have removed the finalizers: each resource keeps its top writers (update/patch)
// by count, writers_per_resource of them (Space-Saving: a client not among them takes the
// smallest count's place, so the controller that wrote most stays however many light writers
// come after it, and its count does not decay while it is silent). One that wrote steadily
// (>= steady_writer_writes of its own in writer_lookback_s) and has written nothing for
// silent_after_s while DELETEs kept arriving is the silent controller, named as the storm's
// identity; without one, the last identity that wrote any of the stuck objects. The allow list
// keeps identities from marking objects and from being named, but their writes still clear
// finalizers (an object's facts are facts whoever wrote them).
//
// The last writer: each object's latest write (its client's key and second) is kept in a
// set-associative table of max_objects entries. A DELETE that marks an object terminating names
// that client from the resource's top writers or the packed identities of the last
// max_writing_clients writing clients, and keeps the identity with the object; writes to an
// object already terminating replace it. So the identities of writers are held for terminating
// objects only, not for each of 100,000 objects written.
//
// State is bounded: max_objects terminating objects (oldest dropped first), max_objects
// objects' last writes (in sets of four: the set's least recently written first),
// writers_per_resource writers of each of max_resources resources (least recently seen dropped
// first; a firing resource dropped is Resolved) and the packed identities of
// max_writing_clients writing clients. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agent/core/bounded_lru.h"
#include "agent/core/set_associative_writers.h"
#include "agent/core/space_saving.h"
#include "agent/analysis/detector_config.h"
#include "agent/analysis/packed_identity.h"
#include "agent/analysis/second_ring.h"
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
    // Who wrote it last (before the DELETE, from last_writes_; after it, each write), if known.
    PackedIdentity last_writer;
    int64_t last_write_ns = INT64_MIN;
  };
  static constexpr int kWriterBuckets = 10;  // the writer lookback, cut into this many
  static constexpr int64_t kNever = INT64_MIN;
  // One of a resource's top writers: its sketch slot's payload, made afresh (nothing
  // allocated) when another client takes the slot over.
  struct Writer {
    // Packed once per client, shared by its slots and the objects it writes; unpacked only to
    // name a silent controller.
    PackedIdentity packed_identity;
    int64_t last_write_ns = kNever;  // kNever: the slot is fresh (new, or just taken over)
    // Its own writes (not the count a takeover inherits), per coarse bucket of
    // writer_bucket_s_ seconds.
    SecondRing<uint32_t, kWriterBuckets> writes;
  };
  struct Resource {
    explicit Resource(size_t top_writers) : deletes(61), writers(top_writers) {}
    std::string api_group;
    std::string resource;
    SecondBuckets deletes;  // the last minute, for deletes/s
    int64_t last_delete_ns = INT64_MIN;
    StormAlert alert{ResolvedEvidence::kLatest};
    int64_t calm_since_ns = -1;  // while firing: since when no object is stuck
    SpaceSaving<Writer, uint64_t> writers;  // its top writers, by RecordKeys::client
  };
  struct Stuck;  // per-resource aggregate of one Evaluate

  // `r`'s identity packed, once per client while the client stays among the last
  // max_writing_clients: light writers take over sketch slots on most of their writes, and
  // would otherwise pack (and allocate) afresh each time.
  const PackedIdentity& PackedWriter(const RequestRecord& r, uint64_t client_key);
  Resource& TouchResource(const RequestRecord& r, uint64_t key, int64_t now_ns);
  void ObserveWrite(const RequestRecord& r, const RecordKeys& keys, bool allowed, int64_t now_ns);
  // A newly terminating object's last writer, from last_writes_, named from the resource's top
  // writers or packed_clients_.
  void NameLastWriter(const Resource& res, uint64_t object_key, Terminating& t);
  uint32_t WritesInLookback(const Writer& w) const;
  StormEvidence BuildEvidence(const Resource& res, const Stuck& stuck, int64_t now_ns) const;

  StuckFinalizersConfig config_;
  int64_t writer_bucket_s_;  // writer_lookback_s / kWriterBuckets, rounded up
  // Keyed by RecordKeys: objects, resources, clients (writers: in their resource's sketch).
  BoundedLru<uint64_t, Terminating> terminating_;  // front = newest mark
  SetAssociativeWriters last_writes_;              // by object
  BoundedLru<uint64_t, PackedIdentity> packed_clients_;  // by RecordKeys::client
  BoundedLru<uint64_t, Resource> resources_;
  EvictedAlerts evicted_;
  uint64_t observed_ = 0;
  uint64_t orphans_dropped_ = 0;  // terminating objects whose resource was evicted
  uint64_t writer_takeovers_ = 0;  // sketch slots taken over by another client
  uint64_t writers_forgotten_ = 0;  // last writers known by key whose identity was let go
};

}  // namespace stormwatch
