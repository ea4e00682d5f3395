#include "agent/analysis/list_storm_detector.h"

#include "agent/kube/record_keys.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace stormwatch {
namespace {


double Round2(double v) { return static_cast<double>(static_cast<int64_t>(v * 100 + 0.5)) / 100; }

}  // namespace

ListStormDetector::Second& ListStormDetector::Second::operator+=(const Second& o) {
  lists += o.lists;
  expensive += o.expensive;
  bytes += o.bytes;
  expensive_bytes += o.expensive_bytes;
  consistent += o.consistent;
  any += o.any;
  exact += o.exact;
  not_older_than += o.not_older_than;
  paginated += o.paginated;
  cluster_scope += o.cluster_scope;
  etcd_lists += o.etcd_lists;
  etcd_keys += o.etcd_keys;
  etcd_bytes += o.etcd_bytes;
  return *this;
}

ListStormDetector::ListStormDetector(ListStormConfig config)
    : config_(std::move(config)),
      entries_(config_.max_keys, Recency::kApproximate, Admission::kFrequency) {
  // Clamp nonsense so a bad config degrades instead of misbehaving.
  if (!(config_.list_rate > 0)) config_.list_rate = ListStormConfig{}.list_rate;
  if (!(config_.bytes_rate > 0)) config_.bytes_rate = ListStormConfig{}.bytes_rate;
  if (!(config_.expensive_weight >= 1)) config_.expensive_weight = 1;
  config_.sustain_s = std::max(config_.sustain_s, 1);
  config_.resolve_s = std::max(config_.resolve_s, 1);
  config_.max_keys = entries_.capacity();
}

void ListStormDetector::Observe(const RequestRecord& r, int64_t now_ns) {
  if (r.info.verb_kind != KubeVerb::kList || config_.allow.Allows(r.identity->user)) return;
  ++observed_;

  const RecordKeys keys = KeysOf(r);
  // Windows ending at each of the last resolve_s seconds, plus the second in progress.
  const auto ring = static_cast<size_t>(config_.sustain_s + config_.resolve_s + 1);
  // A full table takes a new key only if seen more often lately than the one it would evict:
  // a storm's key gets in within a few LISTs; many alike clients do not evict one another.
  Entry* admitted = entries_.FindOrAdmit(
      CombineKeys(keys.user, keys.resource),
      [&] {
        Entry fresh(ring);
        fresh.Reset(r, now_ns);
        return fresh;
      },
      [&](uint64_t, Entry& victim) { evicted_.Evict(victim.alert, now_ns); },
      [&](Entry& reused) { reused.Reset(r, now_ns); });
  if (admitted == nullptr) return;
  Entry& e = *admitted;
  KeepLatestIdentity(e.identity, r);
  if (!r.response.priority_level.empty()) e.priority_levels.Add(r.response.priority_level);
  if (!r.response.flow_schema.empty()) e.flow_schemas.Add(r.response.flow_schema);

  Second* s = e.seconds.Slot(now_ns / kNsPerSecond);
  if (s == nullptr) return;  // older than any second still kept
  const bool cluster_scope = r.info.namespace_.empty();
  const bool consistent = r.shape.consistency == QueryShape::Consistency::kConsistent;
  ++s->lists;
  s->bytes += r.response_bytes;
  if (consistent && !r.shape.paginated && cluster_scope) {
    ++s->expensive;
    s->expensive_bytes += r.response_bytes;
  }
  switch (r.shape.consistency) {
    case QueryShape::Consistency::kConsistent: ++s->consistent; break;
    case QueryShape::Consistency::kAny: ++s->any; break;
    case QueryShape::Consistency::kExact: ++s->exact; break;
    case QueryShape::Consistency::kNotOlderThan: ++s->not_older_than; break;
    case QueryShape::Consistency::kNotARead: break;
  }
  if (r.shape.paginated) ++s->paginated;
  if (cluster_scope) ++s->cluster_scope;
  if (r.etcd.ranges > 0) {
    ++s->etcd_lists;
    s->etcd_keys += static_cast<uint64_t>(r.etcd.keys);
    s->etcd_bytes += r.etcd.bytes;
  }
}

ListStormDetector::Second ListStormDetector::WindowSum(const Entry& e, int64_t last) const {
  Second sum;
  e.seconds.ForEachIn(last - config_.sustain_s + 1, last, [&](const Second& v) { sum += v; });
  return sum;
}

bool ListStormDetector::Heavy(const Second& w) const {
  const double extra = config_.expensive_weight - 1;
  const double weighted_lists = w.lists + extra * w.expensive;
  const double weighted_bytes =
      static_cast<double>(w.bytes) + extra * static_cast<double>(w.expensive_bytes);
  // Compared as sums, so an average exactly at the threshold counts.
  return weighted_lists >= config_.list_rate * config_.sustain_s ||
         weighted_bytes >= config_.bytes_rate * config_.sustain_s;
}

StormEvidence ListStormDetector::BuildEvidence(const Entry& e, const Second& w) const {
  const double seconds = config_.sustain_s;
  const double extra = config_.expensive_weight - 1;
  const double lists_per_second = w.lists / seconds;
  const double weighted_lists_per_second = (w.lists + extra * w.expensive) / seconds;
  const double bytes_per_second = static_cast<double>(w.bytes) / seconds;
  const double weighted_bytes_per_second =
      (static_cast<double>(w.bytes) + extra * static_cast<double>(w.expensive_bytes)) / seconds;
  const double bytes_per_list = w.lists ? static_cast<double>(w.bytes) / w.lists : 0.0;
  const std::string priority_level = e.priority_levels.Most();
  const bool exempt = e.priority_levels.Count("exempt") > 0 || e.identity->system_masters;

  StormEvidence ev;
  ev.storm = kListStormName;
  ev.identity = *e.identity;
  ev.api_group = e.api_group;
  ev.resource = e.resource;
  ev.fix = kListStormFix;
  ev.details = {
      {"window_s", config_.sustain_s},
      {"lists_per_second", Round2(lists_per_second)},
      {"weighted_lists_per_second", Round2(weighted_lists_per_second)},
      {"bytes_per_second", Round2(bytes_per_second)},
      {"weighted_bytes_per_second", Round2(weighted_bytes_per_second)},
      {"average_bytes_per_list", Round2(bytes_per_list)},
      // APF cannot slow an exempt client down: the first thing to fix.
      {"exempt", exempt},
      {"shape",
       {{"consistent", w.consistent},
        {"any", w.any},
        {"exact", w.exact},
        {"not_older_than", w.not_older_than},
        {"paginated", w.paginated},
        {"unpaginated", w.lists - w.paginated},
        {"cluster_scope", w.cluster_scope},
        {"namespace_scope", w.lists - w.cluster_scope},
        {"consistent_unpaginated_cluster_scope", w.expensive}}},
      {"user_agent", e.identity->user_agent},
      {"component", e.identity->component},
      {"priority_level", priority_level},
      {"flow_schema", e.flow_schemas.Most()},
      {"system_masters", e.identity->system_masters},
  };
  if (!e.identity->groups.empty()) ev.details["groups"] = e.identity->groups;
  // What its consistent LISTs cost etcd, from the Ranges they were matched to on this node.
  std::string etcd_cost;
  if (w.etcd_lists > 0) {
    const double keys = static_cast<double>(w.etcd_keys) / w.etcd_lists;
    const double bytes = static_cast<double>(w.etcd_bytes) / w.etcd_lists;
    ev.details["etcd"] = {{"lists_matched", w.etcd_lists},
                          {"keys_per_list", Round2(keys)},
                          {"bytes_per_list", Round2(bytes)},
                          {"bytes_per_second", Round2(static_cast<double>(w.etcd_bytes) / seconds)}};
    char cost[128];
    std::snprintf(cost, sizeof(cost), "; each LIST read %.0f keys, %.2f MB from etcd", keys,
                  bytes / (1024 * 1024));
    etcd_cost = cost;
  }

  const std::string what = e.resource + (e.api_group.empty() ? "" : "." + e.api_group);
  char figures[160];
  std::snprintf(figures, sizeof(figures), "%.1f LIST/s (weighted %.1f/s), %.1f MB/s, %u of %u",
                lists_per_second, weighted_lists_per_second, bytes_per_second / (1024 * 1024),
                w.expensive, w.lists);
  ev.summary = "client " + (e.identity->user.empty() ? std::string("unknown") : e.identity->user) +
               " is polling LIST " + what + ": " + figures +
               " consistent, unpaginated, cluster-scope" +
               (priority_level.empty() ? "" : ", priority level " + priority_level) +
               (e.identity->system_masters ? ", group system:masters" : "") + etcd_cost;
  return ev;
}

std::vector<StormTransition> ListStormDetector::Evaluate(int64_t now_ns) {
  std::vector<StormTransition> out = evicted_.Take();
  const int64_t last = now_ns / kNsPerSecond - 1;  // newest complete second
  const int64_t window_start = last - config_.sustain_s + 1;

  for (auto& entry : entries_) {
    [[maybe_unused]] const auto& key = entry.first;  // not a structured binding: lambdas capture it (clang 14)
    auto& e = entry.second;
    if (!e.alert.firing()) {
      // The key must exist for the whole window: a short burst is never averaged over less.
      if (e.first_seen_ns / kNsPerSecond > window_start) continue;
      const Second window = WindowSum(e, last);
      if (!Heavy(window)) continue;
      out.push_back(e.alert.Fire(BuildEvidence(e, window),
                                 std::max(window_start * kNsPerSecond, e.first_seen_ns), now_ns));
    } else if (HeldFor(last, config_.resolve_s,
                       [&](int64_t s) { return !Heavy(WindowSum(e, s)); })) {
      out.push_back(e.alert.Resolve(now_ns));
    } else {
      e.alert.Refresh(BuildEvidence(e, WindowSum(e, last)));
    }
  }
  return out;
}

std::vector<StormEvidence> ListStormDetector::Active() const {
  return ActiveEvidence(entries_, &Entry::alert);
}

DetectorStats ListStormDetector::Stats() const {
  return {observed_, entries_.evictions(), entries_.size(), entries_.refusals()};
}

}  // namespace stormwatch
