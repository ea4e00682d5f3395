#include "agent/analysis/conflict_storm_detector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>
#include <utility>

#include "agent/analysis/throttled_client_detector.h"
#include "agent/kube/record_keys.h"

namespace stormwatch {
namespace {

constexpr size_t kTopObjects = 5;

double Round2(double v) { return std::round(v * 100) / 100; }
double Round3(double v) { return std::round(v * 1000) / 1000; }

}  // namespace

ConflictStormDetector::ConflictStormDetector(ConflictStormConfig config)
    : config_(std::move(config)),
      ring_(0),
      entries_(config_.max_keys, Recency::kApproximate),
      objects_(config_.max_objects, Recency::kApproximate) {
  const ConflictStormConfig defaults;
  if (!(config_.conflict_ratio > 0)) config_.conflict_ratio = defaults.conflict_ratio;
  if (!(config_.conflict_rate > 0)) config_.conflict_rate = defaults.conflict_rate;
  config_.min_conflict_seconds = std::clamp(config_.min_conflict_seconds, 0.0, 1.0);
  config_.sustain_s = std::max(config_.sustain_s, 1);
  config_.resolve_s = std::max(config_.resolve_s, 1);
  // +1: the second in progress occupies a slot besides the complete ones looked at.
  ring_ = static_cast<size_t>(std::max(config_.sustain_s, config_.resolve_s)) + 1;
}

void ConflictStormDetector::Observe(const RequestRecord& r, int64_t now_ns) {
  const RequestInfo& info = r.info;
  if (!info.is_resource_request || info.name.empty()) return;
  if (info.verb_kind != KubeVerb::kUpdate && info.verb_kind != KubeVerb::kPatch) return;
  const bool status = info.subresource == "status";
  if (!info.subresource.empty() && !status) return;
  if (config_.allow.Allows(r.identity->user)) return;
  ++observed_;

  // Identity = user + pod: replicas of one service account are told apart by their pod.
  const RecordKeys keys = KeysOf(r);
  const uint64_t key = CombineKeys(keys.client, keys.resource);
  // A 409 begins tracking the key; another write counts only for a key already tracked (most
  // writers never conflict: the table holds those that do, not every writer).
  Entry* tracked = entries_.Touch(key);
  if (tracked == nullptr) {
    if (r.status != 409) return;
    tracked = &entries_.FindOrInsert(
        key,
        [&] {
          Entry fresh(ring_);
          fresh.Reset(r, now_ns / kNsPerSecond);
          return fresh;
        },
        [&](uint64_t, Entry& victim) { evicted_.Evict(victim.alert, now_ns); },
        [&](Entry& reused) { reused.Reset(r, now_ns / kNsPerSecond); });
  }
  Entry& e = *tracked;
  KeepLatestIdentity(e.identity, r);
  e.writes.Add(now_ns);
  if (status) e.status_writes.Add(now_ns);
  if (r.status != 409) return;
  e.conflicts.Add(now_ns);
  if (status) e.status_conflicts.Add(now_ns);

  ContendedObject& o = objects_.FindOrInsert(
      CombineKeys(keys.client, keys.object),
      [&] {
        ContendedObject fresh(static_cast<size_t>(config_.sustain_s) + 1);
        fresh.Reset(key, info);
        return fresh;
      },
      [](uint64_t, ContendedObject&) {}, [&](ContendedObject& reused) { reused.Reset(key, info); });
  o.conflicts.Add(now_ns);
}

bool ConflictStormDetector::Holds(const Entry& e, int64_t last) const {
  const int n = config_.sustain_s;
  // Judged once tracked for the whole window: the second of the first 409 is not (the writes
  // before that 409 were not counted), so the window begins after it.
  if (e.first_seen_s > last - n) return false;
  const double writes = e.writes.Sum(last, n);
  const double conflicts = e.conflicts.Sum(last, n);
  if (writes <= 0 || conflicts / writes < config_.conflict_ratio) return false;
  if (conflicts / n < config_.conflict_rate) return false;
  int seconds_with_conflicts = 0;
  for (int i = 0; i < n; ++i) seconds_with_conflicts += e.conflicts.At(last - i) > 0;
  return seconds_with_conflicts >= std::ceil(config_.min_conflict_seconds * n - 1e-9);
}

bool ConflictStormDetector::Calm(const Entry& e, int64_t s) const {
  const double conflicts = e.conflicts.At(s);
  return conflicts < config_.conflict_rate ||
         conflicts < config_.conflict_ratio * e.writes.At(s);
}

StormEvidence ConflictStormDetector::BuildEvidence(
    const Entry& e, int64_t last, int64_t now_ns,
    const std::vector<const ContendedObject*>& top) const {
  const int n = config_.sustain_s;
  const double writes = e.writes.Sum(last, n);
  const double conflicts = e.conflicts.Sum(last, n);
  const double status_writes = e.status_writes.Sum(last, n);
  const double status_conflicts = e.status_conflicts.Sum(last, n);
  const double flat_limit = FlatClientGoLimit(e.writes, last, n, config_.flat_tolerance);

  nlohmann::json objects = nlohmann::json::array();
  for (const ContendedObject* o : top) {
    objects.push_back({{"namespace", o->namespace_}, {"name", o->name},
                       {"conflicts", o->conflicts.Sum(last, n)}});
  }

  StormEvidence ev;
  ev.storm = kConflictStormStorm;
  ev.identity = *e.identity;
  ev.api_group = e.api_group;
  ev.resource = e.resource;
  if (!top.empty() && std::all_of(top.begin(), top.end(), [&](const ContendedObject* o) {
        return o->namespace_ == top.front()->namespace_;
      })) {
    ev.namespace_ = top.front()->namespace_;
  }
  ev.fix = kConflictStormFix;
  ev.fired_ns = now_ns;
  const double ratio = writes > 0 ? conflicts / writes : 0;
  ev.details = {{"conflict_ratio", Round3(ratio)},
                {"conflicts_per_second", Round2(conflicts / n)},
                {"writes_per_second", Round2(writes / n)},
                {"window_s", n},
                {"top_objects", objects},
                {"main_conflicts", conflicts - status_conflicts},
                {"status_conflicts", status_conflicts},
                {"main_writes", writes - status_writes},
                {"status_writes", status_writes},
                {"write_rate_flat", flat_limit > 0},
                {"client_side_limit_qps", flat_limit}};
  char figures[128];
  std::snprintf(figures, sizeof(figures), "%.0f%% of %.1f writes/s, %.1f conflicts/s",
                ratio * 100, writes / n, conflicts / n);
  const std::string what = e.resource + (e.api_group.empty() ? "" : "." + e.api_group);
  ev.summary = "client " + (e.identity->user.empty() ? std::string("unknown") : e.identity->user) +
               " gets 409 Conflict on " + what + " (" + figures +
               (top.empty() ? "" : ", most on " + top.front()->name) + ")";
  return ev;
}

std::vector<StormTransition> ConflictStormDetector::Evaluate(int64_t now_ns) {
  std::vector<StormTransition> out = evicted_.Take();
  const int64_t last = now_ns / kNsPerSecond - 1;  // newest complete second

  // Which keys need evidence (firing now or already), then their most contended objects in
  // one pass over the objects.
  std::unordered_map<uint64_t, std::vector<const ContendedObject*>> top;
  for (const auto& [key, e] : entries_) {
    if (e.alert.firing() || Holds(e, last)) top.emplace(key, std::vector<const ContendedObject*>{});
  }
  if (top.empty()) return out;
  const int n = config_.sustain_s;
  auto more = [&](const ContendedObject* a, const ContendedObject* b) {
    double ca = a->conflicts.Sum(last, n), cb = b->conflicts.Sum(last, n);
    if (ca != cb) return ca > cb;
    if (a->namespace_ != b->namespace_) return a->namespace_ < b->namespace_;
    return a->name < b->name;
  };
  for (const auto& [key, o] : objects_) {
    auto it = top.find(o.entry_key);
    if (it == top.end() || o.conflicts.Sum(last, n) <= 0) continue;
    auto& list = it->second;
    list.insert(std::upper_bound(list.begin(), list.end(), &o, more), &o);
    if (list.size() > kTopObjects) list.pop_back();
  }

  for (auto& entry : entries_) {
    [[maybe_unused]] const auto& key = entry.first;  // not a structured binding: lambdas capture it (clang 14)
    auto& e = entry.second;
    auto it = top.find(key);
    if (it == top.end()) continue;
    if (!e.alert.firing()) {
      // Since the first second of the window that saw a 409, or the second of the 409 that
      // began tracking the key when the window begins right after it.
      int64_t since = e.first_seen_s == last - n ? e.first_seen_s : last - n + 1;
      while (since < last && e.conflicts.At(since) <= 0) ++since;
      out.push_back(
          e.alert.Fire(BuildEvidence(e, last, now_ns, it->second), since * kNsPerSecond, now_ns));
    } else if (HeldFor(last, config_.resolve_s, [&](int64_t s) { return Calm(e, s); })) {
      out.push_back(e.alert.Resolve(now_ns));
    } else {
      e.alert.Refresh(BuildEvidence(e, last, now_ns, it->second));
    }
  }
  return out;
}

std::vector<StormEvidence> ConflictStormDetector::Active() const {
  return ActiveEvidence(entries_, &Entry::alert);
}

DetectorStats ConflictStormDetector::Stats() const {
  return {observed_, entries_.evictions() + objects_.evictions(),
          entries_.size() + objects_.size()};
}

}  // namespace stormwatch
