#include "agent/analysis/stuck_finalizers_detector.h"

#include "agent/kube/record_keys.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>
#include <utility>

namespace stormwatch {
namespace {

constexpr size_t kExamples = 5;
constexpr int kDeleteRateWindowS = 60;

double Round2(double v) { return std::round(v * 100) / 100; }
int64_t Seconds(int64_t ns) { return ns / kNsPerSecond; }

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out.append(out.empty() ? "" : ",").append(p);
  return out;
}

}  // namespace

struct StuckFinalizersDetector::Stuck {
  size_t count = 0;        // stuck: terminating for >= stuck_after_s
  size_t terminating = 0;  // all terminating objects of the resource
  std::vector<const Terminating*> oldest;  // the oldest stuck ones, oldest first
  const Terminating* last_written = nullptr;  // the stuck object written last (writer known)
  std::string namespace_;
  bool one_namespace = true;
};

StuckFinalizersDetector::StuckFinalizersDetector(StuckFinalizersConfig config)
    : config_(std::move(config)),
      writer_bucket_s_(1),
      terminating_(config_.max_objects, Recency::kApproximate),
      last_writes_(config_.max_objects),
      packed_clients_(config_.max_writing_clients, Recency::kApproximate),
      resources_(config_.max_resources, Recency::kApproximate) {
  config_.stuck_after_s = std::max(config_.stuck_after_s, 1);
  config_.min_stuck_objects = std::max(config_.min_stuck_objects, 1);
  config_.writer_lookback_s = std::max(config_.writer_lookback_s, 1);
  config_.silent_after_s = std::max(config_.silent_after_s, 1);
  config_.resolve_s = std::max(config_.resolve_s, 1);
  config_.writers_per_resource = std::max<size_t>(config_.writers_per_resource, 1);
  writer_bucket_s_ = (config_.writer_lookback_s + kWriterBuckets - 1) / kWriterBuckets;
}

StuckFinalizersDetector::Resource& StuckFinalizersDetector::TouchResource(
    const RequestRecord& r, uint64_t key, int64_t now_ns) {
  return resources_.FindOrInsert(
      key,
      [&] {
        Resource fresh(config_.writers_per_resource);
        fresh.api_group = r.info.api_group;
        fresh.resource = r.info.resource;
        return fresh;
      },
      [&](uint64_t, Resource& victim) { evicted_.Evict(victim.alert, now_ns); });
}

const PackedIdentity& StuckFinalizersDetector::PackedWriter(const RequestRecord& r,
                                                           uint64_t client_key) {
  // Keyed as the writers are (user and pod): a writer entry names the first identity of its
  // client it saw, and so does this table.
  return packed_clients_.FindOrInsert(
      client_key, [&] { return PackedIdentity(*r.identity); }, [](uint64_t, PackedIdentity&) {});
}

void StuckFinalizersDetector::ObserveWrite(const RequestRecord& r, const RecordKeys& keys,
                                           bool allowed, int64_t now_ns) {
  const bool object = !r.info.name.empty();
  // Few objects are terminating at a time: their table stays small and cached.
  Terminating* terminating = object ? terminating_.Find(keys.object) : nullptr;
  if (!allowed) {
    Resource& res = TouchResource(r, keys.resource, now_ns);
    const size_t tracked = res.writers.size();
    Writer& w = *res.writers.Add(keys.client);  // writers_per_resource >= 1: never null
    if (w.last_write_ns == kNever) {  // a fresh slot: a new one, or one taken over
      if (res.writers.size() == tracked) ++writer_takeovers_;
      w.packed_identity = PackedWriter(r, keys.client);
    }
    // The ring counts per "second" of its argument: a coarser clock gives coarser buckets.
    if (uint32_t* bucket = w.writes.Slot(now_ns / kNsPerSecond / writer_bucket_s_)) ++*bucket;
    w.last_write_ns = std::max(w.last_write_ns, now_ns);
    if (object) {
      last_writes_.Record(keys.object, keys.client, now_ns);
      if (terminating && now_ns >= terminating->last_write_ns) {
        terminating->last_writer = w.packed_identity;
        terminating->last_write_ns = now_ns;
      }
    }
  }
  const ResponseFacts& f = r.response;
  if (!terminating || r.status < 200 || r.status >= 300) return;
  if (!f.object_seen || !f.finalizers_seen) return;
  if (f.finalizers.empty() || !f.deletion_timestamp) {
    terminating_.Erase(keys.object);  // finalizers gone (or a new object of the same name)
  } else {
    terminating->finalizers = f.finalizers;  // some removed, others left
  }
}

void StuckFinalizersDetector::NameLastWriter(const Resource& res, uint64_t object_key,
                                             Terminating& t) {
  const std::optional<SetAssociativeWriters::Write> last = last_writes_.Find(object_key);
  if (!last) return;
  // A steady writer keeps its slot (and packed identity) among the resource's top writers; a
  // light one was packed when it last took a slot over.
  const Writer* writer = res.writers.PayloadOf(last->client_key);
  const PackedIdentity* packed =
      writer ? &writer->packed_identity : packed_clients_.Find(last->client_key);
  if (!packed || packed->empty()) {
    ++writers_forgotten_;
    return;
  }
  t.last_writer = *packed;
  t.last_write_ns = last->at_s * kNsPerSecond;
}

void StuckFinalizersDetector::Observe(const RequestRecord& r, int64_t now_ns) {
  const RequestInfo& info = r.info;
  if (!info.is_resource_request || info.resource.empty()) return;
  const bool write = info.verb_kind == KubeVerb::kUpdate || info.verb_kind == KubeVerb::kPatch;
  const bool remove =
      info.verb_kind == KubeVerb::kDelete || info.verb_kind == KubeVerb::kDeleteCollection;
  const bool not_found = r.status == 404 && !info.name.empty();
  if (!write && !remove && !not_found) return;
  ++observed_;

  const RecordKeys keys = KeysOf(r);
  if (not_found) {
    terminating_.Erase(keys.object);
    return;
  }
  const bool allowed = config_.allow.Allows(r.identity->user);
  if (write) {
    ObserveWrite(r, keys, allowed, now_ns);
    return;
  }

  Resource& res = TouchResource(r, keys.resource, now_ns);
  res.deletes.Add(now_ns);
  res.last_delete_ns = std::max(res.last_delete_ns, now_ns);
  if (info.name.empty() || r.status < 200 || r.status >= 300) return;
  const ResponseFacts& f = r.response;
  if (!f.object_seen || !f.deletion_timestamp || (f.finalizers_seen && f.finalizers.empty())) {
    terminating_.Erase(keys.object);  // deleted outright, or held by nothing but a grace period
    return;
  }
  if (!f.finalizers_seen || allowed) return;
  if (Terminating* t = terminating_.Find(keys.object)) {
    t->finalizers = f.finalizers;  // a repeated DELETE: still terminating since the first
    return;
  }
  Terminating& t = terminating_.FindOrInsert(
      keys.object,
      [&] {
        return Terminating{keys.resource, info.namespace_, info.name, f.finalizers, now_ns};
      },
      [](uint64_t, Terminating&) {});
  NameLastWriter(res, keys.object, t);
}

uint32_t StuckFinalizersDetector::WritesInLookback(const Writer& w) const {
  const int64_t last = w.last_write_ns / kNsPerSecond / writer_bucket_s_;
  uint32_t writes = 0;
  w.writes.ForEachIn(last - kWriterBuckets + 1, last, [&](uint32_t n) { writes += n; });
  return writes;
}

StormEvidence StuckFinalizersDetector::BuildEvidence(const Resource& res, const Stuck& stuck,
                                                     int64_t now_ns) const {
  // The silent controller: steady before, silent now, while deletes kept coming.
  const Writer* silent = nullptr;
  uint32_t silent_writes = 0;
  res.writers.ForEach([&](uint64_t, uint64_t, uint64_t, const Writer& w) {
    if (now_ns - w.last_write_ns < config_.silent_after_s * kNsPerSecond) return;
    if (res.last_delete_ns <= w.last_write_ns) return;
    const uint32_t writes = WritesInLookback(w);
    if (writes < static_cast<uint32_t>(config_.steady_writer_writes)) return;
    if (!silent || writes > silent_writes ||
        (writes == silent_writes && w.last_write_ns > silent->last_write_ns)) {
      silent = &w;
      silent_writes = writes;
    }
  });

  nlohmann::json examples = nlohmann::json::array();
  for (const Terminating* t : stuck.oldest) {
    examples.push_back({{"namespace", t->namespace_},
                        {"name", t->name},
                        {"finalizers", Join(t->finalizers)},
                        {"terminating_s", Seconds(now_ns - t->since_ns)}});
  }
  const int64_t oldest_s = Seconds(now_ns - stuck.oldest.front()->since_ns);
  const Identity last_writer_identity =
      stuck.last_written ? stuck.last_written->last_writer.Unpack() : Identity{};
  const std::string& last_writer = last_writer_identity.user;
  const Identity silent_identity = silent ? silent->packed_identity.Unpack() : Identity{};

  StormEvidence ev;
  ev.storm = kStuckFinalizersStorm;
  if (silent) {
    ev.identity = silent_identity;
  } else if (stuck.last_written) {
    ev.identity = last_writer_identity;
  }
  ev.api_group = res.api_group;
  ev.resource = res.resource;
  if (stuck.one_namespace) ev.namespace_ = stuck.namespace_;
  ev.fix = kStuckFinalizersFix;
  ev.fired_ns = now_ns;
  ev.details = {
      {"stuck_objects", stuck.count},
      {"terminating_objects", stuck.terminating},
      {"oldest_stuck_s", oldest_s},
      {"examples", examples},
      {"silent_controller", silent_identity.user},
      {"silent_controller_last_write_s_ago",
       silent ? Seconds(now_ns - silent->last_write_ns) : int64_t{-1}},
      {"silent_controller_writes", silent_writes},
      {"last_writer", last_writer},
      {"deletes_per_second",
       Round2(res.deletes.Sum(Seconds(now_ns) - 1, kDeleteRateWindowS) / kDeleteRateWindowS)}};
  const std::string what = res.resource + (res.api_group.empty() ? "" : "." + res.api_group);
  ev.summary = std::to_string(stuck.count) + " " + what + " object" +
               (stuck.count == 1 ? "" : "s") + " stuck terminating (oldest " +
               std::to_string(oldest_s) + " s)";
  if (silent) {
    ev.summary += "; controller " + silent_identity.user + " silent for " +
                  std::to_string(Seconds(now_ns - silent->last_write_ns)) +
                  " s while deletes arrive";
  } else if (!last_writer.empty()) {
    ev.summary += "; last written by " + last_writer;
  }
  return ev;
}

std::vector<StormTransition> StuckFinalizersDetector::Evaluate(int64_t now_ns) {
  std::vector<StormTransition> out = evicted_.Take();
  const int64_t cutoff = now_ns - config_.stuck_after_s * kNsPerSecond;
  auto older = [](const Terminating* a, const Terminating* b) {
    if (a->since_ns != b->since_ns) return a->since_ns < b->since_ns;
    if (a->namespace_ != b->namespace_) return a->namespace_ < b->namespace_;
    return a->name < b->name;
  };

  std::unordered_map<uint64_t, Stuck> stuck;
  for (auto it = terminating_.begin(); it != terminating_.end();) {
    const Terminating& t = it->second;
    if (resources_.Find(t.resource_key) == nullptr) {
      it = terminating_.Erase(it);  // its resource was evicted: nothing would report it
      ++orphans_dropped_;
      continue;
    }
    Stuck& s = stuck[t.resource_key];
    ++s.terminating;
    if (t.since_ns <= cutoff) {
      if (s.count++ == 0) s.namespace_ = t.namespace_;
      s.one_namespace = s.one_namespace && s.namespace_ == t.namespace_;
      s.oldest.insert(std::upper_bound(s.oldest.begin(), s.oldest.end(), &t, older), &t);
      if (s.oldest.size() > kExamples) s.oldest.pop_back();
      if (!t.last_writer.empty() &&
          (!s.last_written || t.last_write_ns > s.last_written->last_write_ns)) {
        s.last_written = &t;
      }
    }
    ++it;
  }

  for (auto& [key, res] : resources_) {
    auto it = stuck.find(key);
    const Stuck* s = it != stuck.end() && it->second.count > 0 ? &it->second : nullptr;
    if (!res.alert.firing()) {
      if (!s || s->count < static_cast<size_t>(config_.min_stuck_objects)) continue;
      res.calm_since_ns = -1;
      out.push_back(res.alert.Fire(BuildEvidence(res, *s, now_ns),
                                   s->oldest.front()->since_ns, now_ns));
      continue;
    }
    if (s) {
      res.calm_since_ns = -1;
      res.alert.Refresh(BuildEvidence(res, *s, now_ns));
      continue;
    }
    // Calm from the first Evaluate that found nothing stuck: being stuck is a state, not a
    // count per second.
    if (res.calm_since_ns < 0) res.calm_since_ns = now_ns;
    if (now_ns - res.calm_since_ns >= config_.resolve_s * kNsPerSecond) {
      out.push_back(res.alert.Resolve(now_ns));
    }
  }
  return out;
}

std::vector<StormEvidence> StuckFinalizersDetector::Active() const {
  return ActiveEvidence(resources_, &Resource::alert);
}

DetectorStats StuckFinalizersDetector::Stats() const {
  size_t writers = 0;
  for (const auto& [key, res] : resources_) writers += res.writers.size();
  return {observed_,
          terminating_.evictions() + last_writes_.evictions() + writer_takeovers_ +
              resources_.evictions() + orphans_dropped_ + writers_forgotten_,
          terminating_.size() + last_writes_.size() + writers + resources_.size()};
}

}  // namespace stormwatch
