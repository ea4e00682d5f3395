// Runaway UPDATE loop detector (STORMS.md §1, storm "update_loop").
//
// Counts write attempts (PUT = update, PATCH = patch incl. server-side apply) on named
// objects, whatever the response: a loop of 409s is still a loop; codes go to the evidence.
// Time is injected and cut into 1 s buckets; "rate >= X/s sustained for N s" means N
// consecutive complete buckets each holding >= X writes, so a short burst never sums up to a
// sustained rate. Rules, per identity (user + pod) and resource (group + resource):
//   object rule:   one object written >= object_rate/s for object_sustain_s consecutive s;
//   resource rule: all its objects together >= resource_rate/s for resource_sustain_s.
// One storm per (identity, group, resource): Firing once either rule holds; Resolved only
// after resolve_s consecutive seconds in which no object reached object_rate and the
// resource stayed under resource_rate. State is bounded: at most max_objects object keys
// and max_resources (identity, resource) keys, least recently written evicted first.
// Not thread-safe: one owner calls Observe and Evaluate.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/analysis/storm.h"
#include "agent/core/bounded_lru.h"
#include "agent/core/request_record.h"

namespace stormwatch {

inline constexpr char kUpdateLoopStorm[] = "update_loop";
inline constexpr char kUpdateLoopFix[] =
    "Stop writing reconcile bookkeeping (e.g. lastSyncTime) into the object itself: write "
    "status through the /status subresource with Status().Update() or server-side apply, and "
    "add GenerationChangedPredicate to the controller so metadata/status-only changes do not "
    "requeue the object.";

struct UpdateLoopConfig {
  bool enabled = true;
  double object_rate = 5.0;  // writes/s on one object
  int object_sustain_s = 10;
  double resource_rate = 100.0;  // writes/s on one resource, all objects
  int resource_sustain_s = 3;  // short: a client at 100+ writes/s must be named in seconds
  int resolve_s = 10;            // calm seconds before Resolved
  int evidence_window_s = 10;    // reported rates average over this (or since first seen)
  size_t max_objects = 10'000;   // tracked (identity, resource, object) keys
  size_t max_resources = 4'096;  // tracked (identity, resource) keys
  size_t top_objects = 5;

  // Empty when usable; otherwise what is wrong (the detector clamps such values).
  std::vector<std::string> Problems() const;
};

struct TopObject {
  std::string namespace_;
  std::string name;
  double writes_per_second = 0;  // over the evidence window
  int64_t generation = -1;          // metadata.generation last seen in a write response
  uint32_t generations_seen = 0;    // write responses whose body showed a generation
  uint32_t generation_changes = 0;  // times it moved between consecutive ones
  bool operator==(const TopObject&) const = default;
};

struct CodeCount {
  int code = 0;  // HTTP status; 0 when the response was not seen
  uint64_t count = 0;
  bool operator==(const CodeCount&) const = default;
};

// What an alert or gauge needs about one storm.
struct UpdateLoopEvidence {
  std::string storm = kUpdateLoopStorm;
  Identity identity;  // last seen for this key (user agent may vary)
  std::string api_group;
  std::string resource;
  std::string namespace_;  // of the top objects when they share one, else ""
  std::string rule;        // "object" and/or "resource": what made it fire ("object,resource")
  std::vector<TopObject> top_objects;     // highest rate first, at most top_objects
  double resource_writes_per_second = 0;  // over the evidence window
  std::vector<CodeCount> codes;           // in the evidence window, by code
  // STORMS.md's "metadata-only" finding: "yes" when the top objects' write responses never
  // moved metadata.generation, "no" when they did, "unknown" without response bodies.
  std::string metadata_only = "unknown";
  int64_t first_seen_ns = 0;  // first write of this identity on this resource we still track
  int64_t since_ns = 0;       // start of the sustained run that fired
  int64_t fired_ns = 0;       // when Firing was emitted
  std::string fix = kUpdateLoopFix;
};

struct UpdateLoopTransition {
  StormState state = StormState::kFiring;
  int64_t at_ns = 0;
  UpdateLoopEvidence evidence;  // as of the transition
};

using ActiveUpdateLoop = UpdateLoopEvidence;

struct UpdateLoopStats {
  uint64_t writes_observed = 0;
  uint64_t late_dropped = 0;  // writes older than any bucket still kept
  uint64_t object_evictions = 0;
  uint64_t resource_evictions = 0;
  // New keys full tables did not admit (BoundedLru's Admission::kFrequency): the write went
  // untracked (resource), or counted for its resource only (object).
  uint64_t object_refusals = 0;
  uint64_t resource_refusals = 0;
  size_t tracked_objects = 0;
  size_t tracked_resources = 0;
};

class UpdateLoopDetector {
 public:
  explicit UpdateLoopDetector(UpdateLoopConfig config = {});
  ~UpdateLoopDetector();
  UpdateLoopDetector(const UpdateLoopDetector&) = delete;
  UpdateLoopDetector& operator=(const UpdateLoopDetector&) = delete;

  // Feeds one request; anything but a PUT/PATCH on a named object is ignored.
  // `now_ns` is a monotonic time; r.start_ns/end_ns are not used.
  void Observe(const RequestRecord& r, int64_t now_ns);

  // Decides storms on the complete 1 s buckets before `now_ns`; call about once a second
  // (any cadence works: the decision is over buckets, not calls).
  std::vector<UpdateLoopTransition> Evaluate(int64_t now_ns);

  // Storms currently firing, with evidence as of the last Evaluate.
  std::vector<ActiveUpdateLoop> Active() const;

  UpdateLoopStats Stats() const;
  const UpdateLoopConfig& config() const { return config_; }

 private:
  struct ObjectEntry;
  struct ResourceEntry;

  // The client and resource's entry; nullptr when a full table did not admit it.
  ResourceEntry* TouchResource(const RequestRecord& r, uint64_t key, int64_t now_ns);
  UpdateLoopEvidence BuildEvidence(const ResourceEntry& res, int64_t last_bucket,
                                   std::vector<TopObject> top) const;

  UpdateLoopConfig config_;
  size_t object_ring_ = 0;    // buckets kept per object
  size_t resource_ring_ = 0;  // buckets kept per resource key

  // Bounded. objects_: most recently written first, exactly (Evaluate relies on that order).
  BoundedLru<uint64_t, ObjectEntry> objects_;
  BoundedLru<uint64_t, ResourceEntry> resources_;

  std::vector<UpdateLoopTransition> pending_;  // Resolved for firing keys that were evicted
  int64_t newest_bucket_ = 0;  // the newest bucket written so far
  UpdateLoopStats stats_;
};

// The update-loop detector behind the common detector interface; identities on `allow` are
// ignored.
StormEvidence ToStormEvidence(const UpdateLoopEvidence& e);

class UpdateLoopStormDetector final : public StormDetector {
 public:
  explicit UpdateLoopStormDetector(UpdateLoopConfig config = {}, AllowList allow = {})
      : detector_(std::move(config)), allow_(std::move(allow)) {}
  const char* storm() const override { return kUpdateLoopStorm; }
  void Observe(const RequestRecord& r, int64_t now_ns) override {
    if (!allow_.Allows(r.identity->user)) detector_.Observe(r, now_ns);
  }
  std::vector<StormTransition> Evaluate(int64_t now_ns) override;
  std::vector<StormEvidence> Active() const override;
  DetectorStats Stats() const override;
  const UpdateLoopDetector& detector() const { return detector_; }

 private:
  UpdateLoopDetector detector_;
  AllowList allow_;
};

}  // namespace stormwatch
