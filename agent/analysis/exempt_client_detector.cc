#include "agent/analysis/exempt_client_detector.h"

#include "agent/kube/record_keys.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace stormwatch {
namespace {

double Round2(double v) { return static_cast<double>(static_cast<int64_t>(v * 100 + 0.5)) / 100; }

nlohmann::json TopList(const Tally& tally, const char* name, size_t n) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [value, count] : tally.Top(n)) out.push_back({{name, value}, {"count", count}});
  return out;
}

}  // namespace

ExemptClientDetector::ExemptClientDetector(ExemptClientConfig config)
    : config_(std::move(config)), clients_(config_.max_clients, Recency::kApproximate) {
  if (!(config_.escalate_rate > 0)) config_.escalate_rate = ExemptClientConfig{}.escalate_rate;
  config_.active_window_s = std::max(config_.active_window_s, 1);
  config_.escalate_sustain_s = std::max(config_.escalate_sustain_s, 1);
  config_.resolve_s = std::max(config_.resolve_s, 1);
  config_.max_clients = clients_.capacity();
}

void ExemptClientDetector::Observe(const RequestRecord& r, int64_t now_ns) {
  const bool by_level = r.response.priority_level == "exempt";
  const bool by_masters = r.identity->system_masters;
  if (!by_level && !by_masters) {
    // Another level, or an unknown level from a client not known to be exempt.
    if (!r.response.priority_level.empty() || clients_.Find(KeysOf(r).user) == nullptr) return;
  }
  // After the checks above, which rule out nearly every request: the default allow list has
  // prefixes, so this reads the user's name, mostly out of cache with many clients.
  if (config_.allow.Allows(r.identity->user)) return;
  ++observed_;

  const auto ring = static_cast<size_t>(
      std::max({config_.active_window_s, config_.escalate_sustain_s, config_.resolve_s}) + 1);
  Entry& e = clients_.FindOrInsert(
      KeysOf(r).user,
      [&] {
        Entry fresh(ring);
        fresh.identity = r.identity;
        fresh.first_seen_ns = now_ns;
        return fresh;
      },
      [&](uint64_t, Entry& victim) { evicted_.Evict(victim.alert, now_ns); });
  KeepLatestIdentity(e.identity, r);  // system:masters and its groups, once seen, stay
  e.priority_level_exempt = e.priority_level_exempt || by_level;
  e.system_masters = e.system_masters || by_masters;
  e.requests.Add(now_ns);
  e.level_exempt_requests += e.priority_level_exempt;
  e.masters_requests += e.system_masters;
  e.last_seen_ns = std::max(e.last_seen_ns, now_ns);
  e.verbs.Add(r.info.verb);
  if (!r.info.resource.empty()) {
    e.resources.Add(r.info.resource + (r.info.api_group.empty() ? "" : "." + r.info.api_group));
  } else {
    e.resources.Add(r.info.path);  // a non-resource URL such as /metrics
  }
  if (!r.response.flow_schema.empty()) e.flow_schemas.Add(r.response.flow_schema);
}

std::string ExemptClientDetector::Reason(const Entry& e) const {
  if (e.priority_level_exempt && e.system_masters) {
    return std::string(kReasonPriorityLevelExempt) + "," + kReasonSystemMasters;
  }
  return e.system_masters ? kReasonSystemMasters : kReasonPriorityLevelExempt;
}

std::vector<ExemptClient> ExemptClientDetector::ExemptClients(int64_t now_ns) const {
  const int64_t now_s = now_ns / kNsPerSecond;
  const int window = config_.active_window_s;
  std::vector<ExemptClient> out;
  for (const auto& [key, e] : clients_) {
    if (e.last_seen_ns < now_ns - window * kNsPerSecond) continue;
    // Complete seconds only; a client first seen 5 s ago is averaged over 5 s, not 60.
    const int64_t seconds = std::clamp<int64_t>(now_s - e.first_seen_ns / kNsPerSecond, 1, window);
    const double rate = e.requests.Sum(now_s - 1, window) / static_cast<double>(seconds);
    out.push_back({e.identity->user, Reason(e), rate, e.last_seen_ns, e.level_exempt_requests,
                   e.masters_requests, e.first_seen_ns});
  }
  std::sort(out.begin(), out.end(), [](const ExemptClient& a, const ExemptClient& b) {
    if (a.requests_per_second != b.requests_per_second) {
      return a.requests_per_second > b.requests_per_second;
    }
    return a.user < b.user;
  });
  return out;
}

StormEvidence ExemptClientDetector::BuildEvidence(const Entry& e, int64_t last) const {
  const double rate = e.requests.Sum(last, config_.escalate_sustain_s) / config_.escalate_sustain_s;
  const std::string reason = Reason(e);
  StormEvidence ev;
  ev.storm = kExemptClientName;
  ev.identity = *e.identity;
  ev.fix = kExemptClientFix;
  ev.details = {
      {"reason", reason},
      {"requests_per_second", Round2(rate)},
      {"window_s", config_.escalate_sustain_s},
      {"top_verbs", TopList(e.verbs, "verb", 5)},
      {"top_resources", TopList(e.resources, "resource", 5)},
      {"user_agent", e.identity->user_agent},
      {"component", e.identity->component},
      {"priority_level", e.priority_level_exempt ? "exempt" : ""},
      {"flow_schema", e.flow_schemas.Most()},
      {"system_masters", e.system_masters},
  };
  if (!e.identity->groups.empty()) ev.details["groups"] = e.identity->groups;
  char figures[64];
  std::snprintf(figures, sizeof(figures), "%.1f requests/s", rate);
  ev.summary = "exempt client " +
               (e.identity->user.empty() ? std::string("unknown") : e.identity->user) + " (" +
               reason + ") at " + figures +
               ": API Priority and Fairness does not limit it";
  return ev;
}

std::vector<StormTransition> ExemptClientDetector::Evaluate(int64_t now_ns) {
  std::vector<StormTransition> out = evicted_.Take();
  const int64_t last = now_ns / kNsPerSecond - 1;  // newest complete second
  const double rate = config_.escalate_rate;

  for (auto it = clients_.begin(); it != clients_.end();) {
    Entry& e = it->second;
    if (!e.alert.firing()) {
      if (e.last_seen_ns < now_ns - config_.active_window_s * kNsPerSecond) {
        it = clients_.Erase(it);  // gone quiet: forgotten, its tallies start afresh
        continue;
      }
      if (e.requests.EachAtLeast(last, config_.escalate_sustain_s, rate)) {
        int64_t since = last - config_.escalate_sustain_s + 1;
        while (since > last - static_cast<int64_t>(e.requests.seconds()) + 2 &&
               e.requests.At(since - 1) >= rate) {
          --since;
        }
        out.push_back(e.alert.Fire(BuildEvidence(e, last),
                                   std::max(since * kNsPerSecond, e.first_seen_ns), now_ns));
      }
    } else if (HeldFor(last, config_.resolve_s,
                       [&](int64_t s) { return e.requests.At(s) < rate; })) {
      out.push_back(e.alert.Resolve(now_ns));
    } else {
      e.alert.Refresh(BuildEvidence(e, last));
    }
    ++it;
  }
  return out;
}

std::vector<StormEvidence> ExemptClientDetector::Active() const {
  return ActiveEvidence(clients_, &Entry::alert);
}

DetectorStats ExemptClientDetector::Stats() const {
  return {observed_, clients_.evictions(), clients_.size()};
}

}  // namespace stormwatch
