#include "agent/analysis/update_loop_detector.h"

#include <algorithm>
#include <cstdio>
#include <array>
#include <limits>
#include <map>
#include <utility>

#include "agent/analysis/second_ring.h"
#include "agent/analysis/storm_lifecycle.h"
#include "agent/kube/record_keys.h"

namespace stormwatch {
namespace {

constexpr int64_t kBucketNs = 1'000'000'000;

int64_t BucketOf(int64_t ns) {
  return ns >= 0 ? ns / kBucketNs : -((-ns + kBucketNs - 1) / kBucketNs);
}

// Status codes of one second: a few distinct codes exactly, the rest lumped.
struct CodeSlots {
  static constexpr size_t kSlots = 4;
  std::array<int, kSlots> code{};
  std::array<uint32_t, kSlots> count{};
  uint32_t other = 0;  // writes whose code did not fit

  void Add(int c) {
    for (size_t i = 0; i < kSlots; ++i) {
      if (count[i] != 0 && code[i] == c) {
        ++count[i];
        return;
      }
    }
    for (size_t i = 0; i < kSlots; ++i) {
      if (count[i] == 0) {
        code[i] = c;
        count[i] = 1;
        return;
      }
    }
    ++other;
  }
};

struct ResourceBucket {
  uint32_t writes = 0;
  uint32_t max_object_writes = 0;  // the busiest single object in this second
  CodeSlots codes;
};

// Code -1 in the evidence stands for "other codes" that did not fit a bucket's slots.
constexpr int kOtherCodes = -1;

// Seconds the evidence rates average over: the evidence window, but no further back than
// the key's first write, so a storm that began 5 s ago is not diluted by 5 empty seconds.
int EffectiveWindow(int window, int64_t first_seen_ns, int64_t last_bucket) {
  int64_t since_first = last_bucket - BucketOf(first_seen_ns) + 1;
  return static_cast<int>(std::clamp<int64_t>(since_first, 1, window));
}

}  // namespace

struct UpdateLoopDetector::ObjectEntry {
  explicit ObjectEntry(size_t ring) : counts(ring) {}
  uint64_t key;           // client and object (RecordKeys)
  uint64_t resource_key;  // its ResourceEntry's
  std::string namespace_;
  std::string name;
  SecondRing<uint32_t> counts;
  // The newest bucket any write had reached when this object was last written: no write of it
  // is newer, and it never increases down objects_ (which is in write order), so Evaluate stops
  // at the first object whose writes all precede the window.
  int64_t touched_bucket = 0;
  // metadata.generation in the write responses (when their body was captured): a loop whose
  // writes never move it changes only metadata or status.
  int64_t last_generation = -1;
  uint32_t generations_seen = 0;
  uint32_t generation_changes = 0;

  // As a new entry of object `k` (of resource entry `rk`), its buffers kept (BoundedLru's
  // reuse of an evicted one).
  void Reset(uint64_t k, uint64_t rk, const RequestInfo& info) {
    key = k;
    resource_key = rk;
    namespace_.assign(info.namespace_);
    name.assign(info.name);
    counts.Clear();
    touched_bucket = 0;
    last_generation = -1;
    generations_seen = 0;
    generation_changes = 0;
  }
};

struct UpdateLoopDetector::ResourceEntry {
  explicit ResourceEntry(size_t ring) : buckets(ring) {}
  uint64_t key = 0;  // client and resource (RecordKeys)
  IdentityRef identity;
  std::string api_group;
  std::string resource;
  SecondRing<ResourceBucket> buckets;
  int64_t first_seen_ns = 0;
  // Not a StormAlert (storm_lifecycle.h): this evidence is UpdateLoopEvidence, made a
  // StormEvidence only behind the common interface, and a refresh keeps its rule too. Held
  // only while firing, so the many quiet keys cost a pointer each.
  struct Firing {
    UpdateLoopEvidence fired;  // evidence at Firing; Resolved repeats it
    UpdateLoopEvidence live;   // refreshed by each Evaluate while firing
  };
  std::unique_ptr<Firing> firing;

  // As a new entry of `r`'s client and resource, its ring kept (BoundedLru's reuse).
  void Reset(uint64_t entry_key, const RequestRecord& r, int64_t now_ns) {
    key = entry_key;
    identity = r.identity;
    api_group.assign(r.info.api_group);
    resource.assign(r.info.resource);
    buckets.Clear();
    first_seen_ns = now_ns;
    firing.reset();
  }
};

std::vector<std::string> UpdateLoopConfig::Problems() const {
  std::vector<std::string> p;
  if (!(object_rate > 0)) p.push_back("object_rate must be > 0");
  if (!(resource_rate > 0)) p.push_back("resource_rate must be > 0");
  if (object_sustain_s < 1) p.push_back("object_sustain_s must be >= 1");
  if (resource_sustain_s < 1) p.push_back("resource_sustain_s must be >= 1");
  if (resolve_s < 1) p.push_back("resolve_s must be >= 1");
  if (evidence_window_s < 1) p.push_back("evidence_window_s must be >= 1");
  if (max_objects < 1) p.push_back("max_objects must be >= 1");
  if (max_resources < 1) p.push_back("max_resources must be >= 1");
  return p;
}

UpdateLoopDetector::UpdateLoopDetector(UpdateLoopConfig config)
    : config_(std::move(config)),
      // Exact recency: Evaluate stops at the first object not written within the window, which
      // CLOCK's placement order would reach before a busy object placed long ago.
      objects_(config_.max_objects, Recency::kExact, Admission::kFrequency),
      resources_(config_.max_resources, Recency::kApproximate, Admission::kFrequency) {
  // Clamp what Problems() reports, so a bad config degrades instead of misbehaving.
  if (!(config_.object_rate > 0)) config_.object_rate = UpdateLoopConfig{}.object_rate;
  if (!(config_.resource_rate > 0)) config_.resource_rate = UpdateLoopConfig{}.resource_rate;
  config_.object_sustain_s = std::max(config_.object_sustain_s, 1);
  config_.resource_sustain_s = std::max(config_.resource_sustain_s, 1);
  config_.resolve_s = std::max(config_.resolve_s, 1);
  config_.evidence_window_s = std::max(config_.evidence_window_s, 1);
  config_.max_objects = std::max<size_t>(config_.max_objects, 1);
  config_.max_resources = std::max<size_t>(config_.max_resources, 1);
  // +1: the bucket in progress occupies a slot besides the complete ones we look at.
  object_ring_ =
      static_cast<size_t>(std::max(config_.object_sustain_s, config_.evidence_window_s)) + 1;
  resource_ring_ = static_cast<size_t>(std::max({config_.resource_sustain_s, config_.resolve_s,
                                                 config_.evidence_window_s})) +
                   1;
}

UpdateLoopDetector::~UpdateLoopDetector() = default;

UpdateLoopDetector::ResourceEntry* UpdateLoopDetector::TouchResource(const RequestRecord& r,
                                                                     uint64_t key,
                                                                     int64_t now_ns) {
  ResourceEntry* res = resources_.FindOrAdmit(
      key,
      [&] {
        ResourceEntry fresh(resource_ring_);
        fresh.Reset(key, r, now_ns);
        return fresh;
      },
      [&](uint64_t, ResourceEntry& victim) {
        // A firing storm must still end with exactly one Resolved.
        if (victim.firing) {
          pending_.push_back({StormState::kResolved, 0, std::move(victim.firing->fired)});
        }
        ++stats_.resource_evictions;
      },
      [&](ResourceEntry& reused) { reused.Reset(key, r, now_ns); });
  for (UpdateLoopTransition& t : pending_) {
    if (t.at_ns == 0) t.at_ns = now_ns;
  }
  if (res != nullptr) KeepLatestIdentity(res->identity, r);  // a new entry's: nothing to do
  return res;
}

void UpdateLoopDetector::Observe(const RequestRecord& r, int64_t now_ns) {
  const RequestInfo& info = r.info;
  if (!info.is_resource_request || info.name.empty()) return;
  if (info.verb_kind != KubeVerb::kUpdate && info.verb_kind != KubeVerb::kPatch) return;
  ++stats_.writes_observed;

  // Identity = user + pod: replicas of one service account are told apart by their pod.
  const RecordKeys keys = KeysOf(r);
  const uint64_t resource_key = CombineKeys(keys.client, keys.resource);
  const uint64_t object_key = CombineKeys(keys.client, keys.object);

  const int64_t bucket = BucketOf(now_ns);
  // Full tables take a new key only if seen more often lately than the one it would evict: a
  // loop's client and object get in within a few writes; many alike clients and objects do not
  // evict one another. A write whose client and resource are not tracked goes untracked; one
  // whose object alone is not still counts for its resource.
  ResourceEntry* res = TouchResource(r, resource_key, now_ns);
  if (res == nullptr) return;
  ObjectEntry* object = objects_.FindOrAdmit(
      object_key,
      [&] {
        ObjectEntry fresh(object_ring_);
        fresh.Reset(object_key, resource_key, info);
        return fresh;
      },
      [&](uint64_t, ObjectEntry&) { ++stats_.object_evictions; },
      [&](ObjectEntry& reused) { reused.Reset(object_key, resource_key, info); });
  newest_bucket_ = std::max(newest_bucket_, bucket);
  if (object != nullptr) object->touched_bucket = newest_bucket_;
  uint32_t* count = object ? object->counts.Slot(bucket) : nullptr;
  ResourceBucket* rb = res->buckets.Slot(bucket);
  if ((object != nullptr && count == nullptr) || rb == nullptr) {
    ++stats_.late_dropped;
    return;
  }
  ++rb->writes;
  rb->codes.Add(r.status);
  if (object == nullptr) return;
  ++*count;
  rb->max_object_writes = std::max(rb->max_object_writes, *count);
  if (r.status >= 200 && r.status < 300 && r.response.object_seen && r.response.generation >= 0) {
    if (object->last_generation >= 0 && r.response.generation != object->last_generation) {
      ++object->generation_changes;
    }
    object->last_generation = r.response.generation;
    ++object->generations_seen;
  }
}

UpdateLoopEvidence UpdateLoopDetector::BuildEvidence(const ResourceEntry& res, int64_t last_bucket,
                                                     std::vector<TopObject> top) const {
  UpdateLoopEvidence ev;
  ev.identity = *res.identity;
  ev.api_group = res.api_group;
  ev.resource = res.resource;
  ev.first_seen_ns = res.first_seen_ns;
  if (!top.empty() && std::all_of(top.begin(), top.end(), [&](const TopObject& t) {
        return t.namespace_ == top.front().namespace_;
      })) {
    ev.namespace_ = top.front().namespace_;
  }
  ev.top_objects = std::move(top);
  // Metadata-only when every top object answered >= 2 writes with a body and none of them moved
  // metadata.generation; unknown when bodies were not seen (large objects, HTTP/2 flushes).
  bool known = !ev.top_objects.empty();
  bool moved = false;
  for (const TopObject& t : ev.top_objects) {
    known = known && t.generations_seen >= 2;
    moved = moved || t.generation_changes > 0;
  }
  ev.metadata_only = known ? (moved ? "no" : "yes") : "unknown";

  const int window = config_.evidence_window_s;
  uint64_t writes = 0;
  std::map<int, uint64_t> codes;
  for (int64_t s = last_bucket - window + 1; s <= last_bucket; ++s) {
    const ResourceBucket b = res.buckets.At(s);
    writes += b.writes;
    for (size_t i = 0; i < CodeSlots::kSlots; ++i) {
      if (b.codes.count[i] != 0) codes[b.codes.code[i]] += b.codes.count[i];
    }
    if (b.codes.other != 0) codes[kOtherCodes] += b.codes.other;
  }
  ev.resource_writes_per_second =
      static_cast<double>(writes) / EffectiveWindow(window, res.first_seen_ns, last_bucket);
  for (const auto& [code, n] : codes) ev.codes.push_back({code, n});
  return ev;
}

std::vector<UpdateLoopTransition> UpdateLoopDetector::Evaluate(int64_t now_ns) {
  std::vector<UpdateLoopTransition> out = std::move(pending_);
  pending_.clear();
  const int64_t last = BucketOf(now_ns) - 1;  // newest complete bucket
  const int window = config_.evidence_window_s;
  const size_t top_n = config_.top_objects;

  // One pass over the recently written objects: which resource keys have an object over the
  // object rule. Rare, so nothing is allocated for the others; the busiest objects are looked
  // up only for evidence (a key firing or about to).
  absl::flat_hash_map<uint64_t, int64_t> object_rule_since;  // by resource key
  const auto object_limit = static_cast<int>(object_ring_) - 1;
  for (const auto& kv : objects_) {
    const ObjectEntry& o = kv.second;
    if (o.touched_bucket < last - window + 1) break;  // this one and all after: no recent write
    const int run = TrailingRun(
        last, object_limit, [&](int64_t s) { return o.counts.At(s) >= config_.object_rate; });
    if (run < config_.object_sustain_s) continue;
    auto [it, inserted] = object_rule_since.try_emplace(o.resource_key, last - run + 1);
    if (!inserted) it->second = std::min(it->second, last - run + 1);
  }
  // The top_n objects of `res` by writes over the window, busiest first.
  auto better = [](const std::pair<double, const ObjectEntry*>& a,
                   const std::pair<double, const ObjectEntry*>& b) {
    if (a.first != b.first) return a.first > b.first;
    if (a.second->namespace_ != b.second->namespace_) {
      return a.second->namespace_ < b.second->namespace_;
    }
    return a.second->name < b.second->name;
  };
  auto top_objects_of = [&](const ResourceEntry& res) {
    std::vector<std::pair<double, const ObjectEntry*>> busiest;
    const int seconds = EffectiveWindow(window, res.first_seen_ns, last);
    for (const auto& kv : objects_) {
    const ObjectEntry& o = kv.second;
      if (o.touched_bucket < last - window + 1) break;
      if (o.resource_key != res.key) continue;
      uint64_t writes = 0;
      for (int64_t s = last - window + 1; s <= last; ++s) writes += o.counts.At(s);
      if (writes == 0) continue;
      std::pair<double, const ObjectEntry*> entry{static_cast<double>(writes) / seconds, &o};
      if (busiest.size() < top_n || (top_n > 0 && better(entry, busiest.back()))) {
        busiest.insert(std::upper_bound(busiest.begin(), busiest.end(), entry, better), entry);
        if (busiest.size() > top_n) busiest.pop_back();
      }
    }
    std::vector<TopObject> top;
    for (const auto& [rate, o] : busiest) {
      TopObject t{o->namespace_, o->name, rate};
      t.generation = o->last_generation;
      t.generations_seen = o->generations_seen;
      t.generation_changes = o->generation_changes;
      top.push_back(std::move(t));
    }
    return top;
  };

  const auto resource_limit = static_cast<int>(resource_ring_) - 1;
  for (auto& kv : resources_) {
    ResourceEntry& res = kv.second;
    auto rule_it = object_rule_since.find(res.key);
    const bool object_rule = rule_it != object_rule_since.end();
    auto top_objects = [&] { return top_objects_of(res); };

    if (!res.firing) {
      const int run = TrailingRun(last, resource_limit, [&](int64_t s) {
        return res.buckets.At(s).writes >= config_.resource_rate;
      });
      bool resource_rule = run >= config_.resource_sustain_s;
      if (!resource_rule && !object_rule) continue;
      UpdateLoopEvidence ev = BuildEvidence(res, last, top_objects());
      int64_t since = std::numeric_limits<int64_t>::max();
      if (object_rule) {
        ev.rule = "object";
        since = rule_it->second;
      }
      if (resource_rule) {
        ev.rule += ev.rule.empty() ? "resource" : ",resource";
        since = std::min(since, last - run + 1);
      }
      ev.since_ns = since * kBucketNs;
      ev.fired_ns = now_ns;
      res.firing = std::make_unique<ResourceEntry::Firing>(ResourceEntry::Firing{ev, ev});
      out.push_back({StormState::kFiring, now_ns, std::move(ev)});
      continue;
    }

    // Firing: resolve only after resolve_s calm seconds in a row.
    const bool calm = HeldFor(last, config_.resolve_s, [&](int64_t s) {
      const ResourceBucket b = res.buckets.At(s);
      return b.writes < config_.resource_rate && b.max_object_writes < config_.object_rate;
    });
    if (calm) {
      out.push_back({StormState::kResolved, now_ns, std::move(res.firing->fired)});
      res.firing.reset();
      continue;
    }
    UpdateLoopEvidence ev = BuildEvidence(res, last, top_objects());
    const UpdateLoopEvidence& fired = res.firing->fired;
    ev.rule = fired.rule;
    ev.since_ns = fired.since_ns;
    ev.fired_ns = fired.fired_ns;
    res.firing->live = std::move(ev);
  }
  for (UpdateLoopTransition& t : out) {
    if (t.at_ns == 0) t.at_ns = now_ns;
  }
  return out;
}

std::vector<ActiveUpdateLoop> UpdateLoopDetector::Active() const {
  std::vector<ActiveUpdateLoop> active;
  for (const auto& kv : resources_) {
    const ResourceEntry& res = kv.second;
    if (res.firing) active.push_back(res.firing->live);
  }
  return active;
}

UpdateLoopStats UpdateLoopDetector::Stats() const {
  UpdateLoopStats s = stats_;
  s.tracked_objects = objects_.size();
  s.tracked_resources = resources_.size();
  s.object_refusals = objects_.refusals();
  s.resource_refusals = resources_.refusals();
  return s;
}

}  // namespace stormwatch

namespace stormwatch {

StormEvidence ToStormEvidence(const UpdateLoopEvidence& e) {
  auto round2 = [](double v) { return static_cast<double>(static_cast<int64_t>(v * 100 + 0.5)) / 100; };
  StormEvidence s;
  s.storm = e.storm;
  s.severity = StormSeverity(e.storm);
  s.identity = e.identity;
  s.api_group = e.api_group;
  s.resource = e.resource;
  s.namespace_ = e.namespace_;
  s.fix = e.fix;
  // The sustained run is counted in whole seconds; it cannot start before the first write.
  s.since_ns = std::max(e.since_ns, e.first_seen_ns);
  s.fired_ns = e.fired_ns;
  nlohmann::json top = nlohmann::json::array();
  for (const TopObject& o : e.top_objects) {
    nlohmann::json obj = {{"namespace", o.namespace_}, {"name", o.name},
                          {"writes_per_second", round2(o.writes_per_second)}};
    if (o.generations_seen > 0) {
      obj["generation"] = o.generation;
      obj["generation_changed"] = o.generation_changes > 0;
    }
    top.push_back(std::move(obj));
  }
  nlohmann::json codes = nlohmann::json::object();
  for (const CodeCount& c : e.codes) codes[std::to_string(c.code)] = c.count;
  s.details = {{"rule", e.rule},
               {"resource_writes_per_second", round2(e.resource_writes_per_second)},
               {"top_objects", top},
               {"codes", codes},
               {"metadata_only", e.metadata_only}};
  std::string what = e.resource + (e.api_group.empty() ? "" : "." + e.api_group);
  char rate[32];
  std::snprintf(rate, sizeof(rate), "%.0f", e.resource_writes_per_second);
  s.summary = "client " + (e.identity.user.empty() ? std::string("unknown") : e.identity.user) +
              " is writing " + what + " in a loop (" + rate + " writes/s" +
              (e.top_objects.empty() ? "" : ", top object " + e.top_objects[0].name) + ")" +
              (e.metadata_only == "yes" ? "; metadata.generation never changes: only metadata/status is written" : "");
  return s;
}

std::vector<StormTransition> UpdateLoopStormDetector::Evaluate(int64_t now_ns) {
  std::vector<StormTransition> out;
  for (UpdateLoopTransition& t : detector_.Evaluate(now_ns)) {
    out.push_back({t.state, t.at_ns, ToStormEvidence(t.evidence)});
  }
  return out;
}

std::vector<StormEvidence> UpdateLoopStormDetector::Active() const {
  std::vector<StormEvidence> out;
  for (const UpdateLoopEvidence& e : detector_.Active()) out.push_back(ToStormEvidence(e));
  return out;
}

DetectorStats UpdateLoopStormDetector::Stats() const {
  UpdateLoopStats s = detector_.Stats();
  return {s.writes_observed, s.object_evictions + s.resource_evictions,
          s.tracked_objects + s.tracked_resources, s.object_refusals + s.resource_refusals};
}

}  // namespace stormwatch
