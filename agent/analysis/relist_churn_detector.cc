#include "agent/analysis/relist_churn_detector.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

#include "agent/kube/query_shape.h"
#include "agent/kube/record_keys.h"

namespace stormwatch {
namespace {


double Round2(double v) { return static_cast<double>(static_cast<int64_t>(v * 100 + 0.5)) / 100; }

// When the request began: its captured start, or its end when the start is unknown.
int64_t StartNs(const RequestRecord& r, int64_t now_ns) {
  const auto start = static_cast<int64_t>(r.start_ns);
  return r.start_ns != 0 && start <= now_ns ? start : now_ns;
}

}  // namespace

RelistChurnDetector::RelistChurnDetector(RelistChurnConfig config)
    : config_(std::move(config)),
      entries_(config_.max_keys, Recency::kApproximate, Admission::kFrequency),
      informers_(config_.max_keys, Recency::kApproximate, Admission::kFrequency) {
  if (!(config_.watch_rate > 0)) config_.watch_rate = RelistChurnConfig{}.watch_rate;
  config_.window_s = std::max(config_.window_s, 1);
  config_.min_relists = std::max(config_.min_relists, 1);
  config_.resolve_s = std::max(config_.resolve_s, 1);
  config_.max_keys = entries_.capacity();
}

void RelistChurnDetector::Observe(const RequestRecord& r, int64_t now_ns) {
  const bool is_watch = r.info.verb_kind == KubeVerb::kWatch;
  if (!is_watch && r.info.verb_kind != KubeVerb::kList) return;
  if (config_.allow.Allows(r.identity->user)) return;
  ++observed_;
  const int64_t start_ns = StartNs(r, now_ns);

  // Client instance = user + pod: replicas of one service account each run their informers.
  const RecordKeys keys = KeysOf(r);
  const uint64_t key = CombineKeys(keys.client, keys.resource);
  const uint64_t informer_key = CombineKeys(
      key, HashFields({r.info.namespace_, r.info.label_selector, r.info.field_selector}));

  // Windows ending at each of the last resolve_s seconds, plus the second in progress.
  const auto ring = static_cast<size_t>(config_.window_s + config_.resolve_s + 1);
  // Full tables take a new key only if seen more often lately than the one it would evict: a
  // churning client's keys get in within a few cycles; many alike clients do not evict one
  // another (their requests go untracked, counted as refusals).
  Entry* admitted = entries_.FindOrAdmit(
      key,
      [&] {
        Entry fresh(ring);
        fresh.Reset(r);
        return fresh;
      },
      [&](uint64_t, Entry& victim) { evicted_.Evict(victim.alert, now_ns); },
      [&](Entry& reused) { reused.Reset(r); });
  if (admitted == nullptr) return;
  Entry& e = *admitted;
  KeepLatestIdentity(e.identity, r);
  Informer* informer_admitted =
      informers_.FindOrAdmit(informer_key, [] { return Informer{}; }, [](auto&, auto&) {},
                             [](Informer& reused) { reused = Informer{}; });
  // Not admitted: the request still counts for its entry, but pairs with no LIST.
  Informer untracked;
  Informer& informer = informer_admitted ? *informer_admitted : untracked;
  Second* second = e.seconds.Slot(start_ns / kNsPerSecond);  // nullptr: began too long ago

  if (!is_watch) {
    if (r.shape.continued) return;  // a later page of a LIST already counted
    e.list_shape = r.shape;
    e.list_seen = true;
    informer.list_start_ns = start_ns;
    if (second) ++second->full_lists;
    return;
  }

  e.watches[e.watches_seen % kWatchSamples] = {start_ns, now_ns - start_ns, r.status};
  ++e.watches_seen;
  if (second) ++second->watches;
  const bool after_list = informer.list_start_ns >= 0 && start_ns >= informer.list_start_ns;
  if (!after_list && !r.shape.send_initial_events) return;  // a re-WATCH: no LIST in between
  informer.list_start_ns = -1;
  if (informer.listed_before) {
    if (second) ++second->relists;
    e.relist_namespace = r.info.namespace_;
    e.relist_label_selector = r.info.label_selector;
    e.relist_field_selector = r.info.field_selector;
  }
  informer.listed_before = true;
}

RelistChurnDetector::Window RelistChurnDetector::WindowSum(const Entry& e, int64_t last) const {
  Window w;
  e.seconds.ForEachIn(last - config_.window_s + 1, last, [&](const Second& v) {
    w.watches += v.watches;
    w.relists += v.relists;
    w.full_lists += v.full_lists;
  });
  return w;
}

bool RelistChurnDetector::Churning(const Window& w) const {
  return w.relists >= static_cast<uint32_t>(config_.min_relists) ||
         w.watches >= config_.watch_rate * config_.window_s;
}

StormEvidence RelistChurnDetector::BuildEvidence(const Entry& e, const Window& w,
                                                 int64_t last) const {
  // Watches of the window among the recent samples: their durations and codes.
  const int64_t window_start_ns = (last - config_.window_s + 1) * kNsPerSecond;
  const int64_t window_end_ns = (last + 1) * kNsPerSecond;
  std::vector<int64_t> durations;
  std::map<int, uint64_t> codes;
  for (size_t i = 0; i < std::min(e.watches_seen, kWatchSamples); ++i) {
    const WatchSample& s = e.watches[i];
    if (s.start_ns < window_start_ns || s.start_ns >= window_end_ns) continue;
    durations.push_back(s.duration_ns);
    ++codes[s.status];
  }
  double median_s = 0;
  if (!durations.empty()) {
    std::sort(durations.begin(), durations.end());
    const size_t mid = durations.size() / 2;
    const int64_t median_ns = durations.size() % 2 ? durations[mid]
                                                   : (durations[mid - 1] + durations[mid]) / 2;
    median_s = static_cast<double>(median_ns) / kNsPerSecond;
  }
  nlohmann::json code_counts = nlohmann::json::object();
  for (const auto& [code, n] : codes) code_counts[std::to_string(code)] = n;

  const bool relists_rule = w.relists >= static_cast<uint32_t>(config_.min_relists);
  const bool rate_rule = w.watches >= config_.watch_rate * config_.window_s;
  const double watches_per_second = static_cast<double>(w.watches) / config_.window_s;

  StormEvidence ev;
  ev.storm = kRelistChurnName;
  ev.identity = *e.identity;
  ev.api_group = e.api_group;
  ev.resource = e.resource;
  ev.namespace_ = e.relist_namespace;
  ev.fix = kRelistChurnFix;
  ev.details = {
      {"rule", relists_rule && rate_rule ? "relists,watch_rate"
               : relists_rule           ? "relists"
                                        : "watch_rate"},
      {"window_s", config_.window_s},
      {"relists_in_window", w.relists},
      {"full_lists_in_window", w.full_lists},
      {"watches_in_window", w.watches},
      {"watches_per_second", Round2(watches_per_second)},
      {"median_watch_seconds", Round2(median_s)},
      {"watch_samples", durations.size()},
      {"watch_codes", code_counts},
      {"user_agent", e.identity->user_agent},
      {"component", e.identity->component},
  };
  if (e.list_seen) {
    const QueryShape& q = e.list_shape;
    ev.details["list_shape"] = {{"consistency", ConsistencyName(q.consistency)},
                                {"paginated", q.paginated},
                                {"limit", q.limit},
                                {"label_selector", q.label_selector},
                                {"field_selector", q.field_selector}};
  }
  if (!e.relist_label_selector.empty()) ev.details["label_selector"] = e.relist_label_selector;
  if (!e.relist_field_selector.empty()) ev.details["field_selector"] = e.relist_field_selector;

  const std::string what = e.resource + (e.api_group.empty() ? "" : "." + e.api_group);
  char figures[128];
  std::snprintf(figures, sizeof(figures),
                "%u relists and %u watches in %d s (%.2f watches/s), median watch %.1f s",
                w.relists, w.watches, config_.window_s, watches_per_second, median_s);
  ev.summary = "client " + (e.identity->user.empty() ? std::string("unknown") : e.identity->user) +
               (e.identity->pod_name.empty() ? "" : " (pod " + e.identity->pod_name + ")") +
               " keeps relisting " + what + ": " + figures;
  return ev;
}

std::vector<StormTransition> RelistChurnDetector::Evaluate(int64_t now_ns) {
  std::vector<StormTransition> out = evicted_.Take();
  const int64_t last = now_ns / kNsPerSecond - 1;  // newest complete second

  for (auto& entry : entries_) {
    [[maybe_unused]] const auto& key = entry.first;  // not a structured binding: lambdas capture it (clang 14)
    auto& e = entry.second;
    if (!e.alert.firing()) {
      const Window w = WindowSum(e, last);
      if (!Churning(w)) continue;
      // The churn began at the window's first second holding a new watch.
      int64_t since = last - config_.window_s + 1;
      while (since < last && e.seconds.At(since).watches == 0) ++since;
      out.push_back(e.alert.Fire(BuildEvidence(e, w, last), since * kNsPerSecond, now_ns));
    } else if (HeldFor(last, config_.resolve_s,
                       [&](int64_t s) { return !Churning(WindowSum(e, s)); })) {
      out.push_back(e.alert.Resolve(now_ns));
    } else {
      e.alert.Refresh(BuildEvidence(e, WindowSum(e, last), last));
    }
  }
  return out;
}

std::vector<StormEvidence> RelistChurnDetector::Active() const {
  return ActiveEvidence(entries_, &Entry::alert);
}

DetectorStats RelistChurnDetector::Stats() const {
  return {observed_, entries_.evictions() + informers_.evictions(),
          entries_.size() + informers_.size(), entries_.refusals() + informers_.refusals()};
}

}  // namespace stormwatch
