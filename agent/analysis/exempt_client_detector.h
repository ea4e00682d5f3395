// Exempt-priority clients (STORMS.md §3, storm "exempt_client").
//
// A client is exempt when a request of its was served at the APF priority level "exempt" or
// it authenticated as a member of system:masters: nothing limits its concurrency. Identities
// exempt by design (the control plane's own) are on the config's allow list. Two outputs:
//   ExemptClients(): every exempt client seen within active_window_s, with its requests so far
//   per reason (stormwatch_exempt_client_requests_total);
//   the storm: an exempt client at >= escalate_rate requests/s in each of escalate_sustain_s
//   consecutive complete seconds fires (severity critical); Resolved after resolve_s
//   consecutive seconds under that rate.
// Requests count when they were exempt, or when a known exempt client's request has no
// priority level (the level's UID was not mapped to a name). At most max_clients clients,
// least recently seen evicted first (a firing client that is evicted is Resolved); clients
// not seen for active_window_s are forgotten. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/core/bounded_lru.h"
#include "agent/analysis/detector_config.h"
#include "agent/analysis/storm.h"
#include "agent/analysis/storm_lifecycle.h"
#include "agent/analysis/tally.h"

namespace stormwatch {

inline constexpr char kExemptClientName[] = "exempt_client";
inline constexpr char kExemptClientFix[] =
    "Give the workload its own identity with a least-privilege RBAC role instead of "
    "system:masters (a client certificate with O=system:masters) or cluster-admin, and make sure "
    "no FlowSchema maps it to the exempt priority level, so API Priority and Fairness can queue "
    "and limit it.";

inline constexpr char kReasonPriorityLevelExempt[] = "priority_level_exempt";
inline constexpr char kReasonSystemMasters[] = "system_masters";

struct ExemptClient {
  std::string user;
  // "priority_level_exempt", "system_masters", or both: "priority_level_exempt,system_masters".
  std::string reason;
  // Over the complete seconds of active_window_s before now (fewer when first seen later).
  double requests_per_second = 0;
  int64_t last_seen_ns = 0;
  // Requests counted since the client was first tracked, while it had each reason (a reason,
  // once seen, stays).
  uint64_t priority_level_exempt_requests = 0;
  uint64_t system_masters_requests = 0;
  int64_t first_seen_ns = 0;  // when those counts started
  bool operator==(const ExemptClient&) const = default;
};

class ExemptClientDetector final : public StormDetector {
 public:
  explicit ExemptClientDetector(ExemptClientConfig config = {});

  const char* storm() const override { return kExemptClientName; }
  void Observe(const RequestRecord& r, int64_t now_ns) override;
  std::vector<StormTransition> Evaluate(int64_t now_ns) override;
  std::vector<StormEvidence> Active() const override;
  DetectorStats Stats() const override;

  // Clients seen within active_window_s before now_ns, busiest first (then by user).
  std::vector<ExemptClient> ExemptClients(int64_t now_ns) const;
  const ExemptClientConfig& config() const { return config_; }

 private:
  struct Entry {
    explicit Entry(size_t ring) : requests(ring) {}
    IdentityRef identity;  // as last seen: the user agent may change
    bool priority_level_exempt = false;
    bool system_masters = false;
    SecondBuckets requests;
    uint64_t level_exempt_requests = 0;  // counted while priority_level_exempt
    uint64_t masters_requests = 0;       // counted while system_masters
    int64_t first_seen_ns = 0;
    int64_t last_seen_ns = 0;
    Tally verbs{8};
    Tally resources{8};
    Tally flow_schemas{4};
    StormAlert alert{ResolvedEvidence::kAsFired};
  };

  std::string Reason(const Entry& e) const;
  StormEvidence BuildEvidence(const Entry& e, int64_t last) const;

  ExemptClientConfig config_;
  BoundedLru<uint64_t, Entry> clients_;  // by RecordKeys::user
  EvictedAlerts evicted_;
  uint64_t observed_ = 0;
};

}  // namespace stormwatch
