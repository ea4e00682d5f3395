// What every storm detector (STORMS.md, one per `storm:` name) has in common: it is fed
// finished requests, decides over whole seconds of an injected monotonic clock, and reports a
// storm as one Firing transition and, later, one Resolved transition (hysteresis inside).
//
// Exporters (metrics, the JSON alert line, Alertmanager) only see StormEvidence, so a new
// detector needs no exporter change.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/analysis/second_ring.h"
#include "agent/core/request_record.h"

namespace stormwatch {

// Identities a detector ignores: exact user names ("system:serviceaccount:kube-system:foo")
// or prefixes ending in '*' ("system:node:*"). Matched against Identity::user.
struct AllowList {
  std::vector<std::string> users;
  bool Allows(const std::string& user) const {
    for (const std::string& u : users) {
      if (!u.empty() && u.back() == '*') {
        if (user.compare(0, u.size() - 1, u, 0, u.size() - 1) == 0) return true;
      } else if (u == user) {
        return true;
      }
    }
    return false;
  }
};

// Keeps a tracked client's identity as last seen: the user agent, and the component parsed
// from it, may change between requests of one key; membership in system:masters and the
// certificate's groups, once seen, stay (one client may send a token, then a certificate).
// Copies only when something changed: the common case shares the interned identity.
inline void KeepLatestIdentity(IdentityRef& kept, const RequestRecord& r) {
  // The common case: the record's shared identity is the one kept (nothing to compare).
  if (kept == r.identity) return;
  const Identity& seen = *r.identity;
  const bool user_agent = kept->user_agent != seen.user_agent;
  const bool masters = seen.system_masters && !kept->system_masters;
  const bool groups = kept->groups.empty() && !seen.groups.empty();
  if (!user_agent && !masters && !groups) return;
  Identity merged = *kept;
  if (user_agent) {
    merged.user_agent = seen.user_agent;
    merged.component = seen.component;
    merged.component_version = seen.component_version;
  }
  if (masters) merged.system_masters = true;
  if (groups) merged.groups = seen.groups;
  kept = IdentityRef::Make(std::move(merged));
}

enum class StormState {
  kFiring,    // the condition held long enough: one alert
  kResolved,  // calm long enough after firing
};

// Each storm's alert severity, the same on every path (alert line, Alertmanager push,
// stormwatch_storm_active, the chart's rules: helm/stormwatch/files/alerts.yaml, which a chart
// test checks against this table). "warning" for a storm not listed.
inline constexpr std::pair<std::string_view, std::string_view> kStormSeverities[] = {
    {"update_loop", "critical"},     {"list_storm", "critical"},      {"exempt_client", "warning"},
    {"conflict_storm", "warning"},   {"throttled_client", "warning"}, {"stuck_finalizers", "warning"},
    {"relist_churn", "warning"},     {"etcd_range_storm", "critical"},
};
inline std::string StormSeverity(std::string_view storm) {
  for (const auto& [name, severity] : kStormSeverities) {
    if (name == storm) return std::string(severity);
  }
  return "warning";
}

struct StormEvidence {
  std::string storm;                // STORMS.md name: update_loop, list_storm, ...
  std::string severity = "warning"; // set from StormSeverity(storm) when the storm fires
  Identity identity;                // the client; for stuck_finalizers the silent controller
  std::string api_group;            // "" = core group
  std::string resource;             // "" when the storm is about a client, not a resource
  std::string namespace_;           // when all evidence shares one, else ""
  std::string summary;              // one line a tired on-call engineer reads first
  // Rates, bytes, top objects, request shape, priority level...: a JSON object whose members
  // are numbers, strings, booleans or arrays of small objects. Never a credential or a body.
  nlohmann::json details = nlohmann::json::object();
  std::string fix;                  // what to change
  int64_t since_ns = 0;             // start of the condition that fired (monotonic)
  int64_t fired_ns = 0;             // when Firing was emitted (monotonic)
};

struct StormTransition {
  StormState state = StormState::kFiring;
  int64_t at_ns = 0;
  StormEvidence evidence;  // as of the transition; Resolved carries the last firing evidence
};

struct DetectorStats {
  uint64_t observed = 0;   // requests the detector looked at (not ignored outright)
  uint64_t evictions = 0;  // tracked keys dropped to stay within limits
  size_t tracked = 0;      // keys held now
  // Newcomers a full table did not admit (seen no more often lately than the key they would
  // have evicted): their requests went untracked. BoundedLru's Admission::kFrequency.
  uint64_t refusals = 0;
};

class StormDetector {
 public:
  virtual ~StormDetector() = default;
  virtual const char* storm() const = 0;
  // One finished request. `now_ns` is monotonic (the request's end); r.start_ns/end_ns may be
  // used for latency.
  virtual void Observe(const RequestRecord& r, int64_t now_ns) = 0;
  // Decides over the complete 1 s buckets before now_ns; called about once a second.
  virtual std::vector<StormTransition> Evaluate(int64_t now_ns) = 0;
  // Storms firing now, evidence as of the last Evaluate.
  virtual std::vector<StormEvidence> Active() const = 0;
  virtual DetectorStats Stats() const = 0;
};

inline constexpr int64_t kNsPerSecond = 1'000'000'000;

// Counts per whole second over the last `seconds` seconds, in a fixed ring: O(1) memory per
// key whatever the rate. Seconds are absolute (now_ns / 1e9).
class SecondBuckets {
 public:
  explicit SecondBuckets(size_t seconds = 16) : counts_(seconds) {}
  void Add(int64_t now_ns, double amount = 1.0) {
    if (double* count = counts_.Slot(now_ns / kNsPerSecond)) *count += amount;
  }
  // The count of second `s` (0 when outside the window).
  double At(int64_t s) const { return counts_.At(s); }
  // Sum over seconds [last - n + 1, last].
  double Sum(int64_t last, int n) const {
    double total = 0;
    counts_.ForEachIn(last - n + 1, last, [&](double v) { total += v; });
    return total;
  }
  // True when each of the `n` seconds ending at `last` holds >= threshold.
  bool EachAtLeast(int64_t last, int n, double threshold) const {
    if (n > static_cast<int>(counts_.seconds())) return false;
    for (int i = 0; i < n; ++i) {
      if (At(last - i) < threshold) return false;
    }
    return true;
  }
  size_t seconds() const { return counts_.seconds(); }
  void Clear() { counts_.Clear(); }

 private:
  SecondRing<double> counts_;
};

}  // namespace stormwatch
