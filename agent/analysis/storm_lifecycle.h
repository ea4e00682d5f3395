// The alert lifecycle every storm detector shares (storm.h): a tracked key is quiet until its
// condition holds, fires once, refreshes its evidence at each Evaluate while it fires, and
// resolves once after enough calm seconds. A firing key dropped to stay within limits still
// resolves, once. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "agent/analysis/storm.h"

namespace stormwatch {

// What a Resolved carries, and so what stays fixed in the evidence while the alert fires.
enum class ResolvedEvidence {
  kAsFired,  // the Firing evidence again; refreshed evidence names the client as last seen
  kLatest,   // the latest evidence; refreshed evidence keeps the identity it fired with (the
             // alert's labels), as the client a detector names may change while it fires
};

// The alert of one tracked key. Only a firing alert holds evidence, so the many quiet keys a
// detector tracks cost a pointer each.
class StormAlert {
 public:
  explicit StormAlert(ResolvedEvidence resolved_evidence)
      : resolved_evidence_(resolved_evidence) {}

  bool firing() const { return firing_ != nullptr; }
  // The evidence of the last Fire or Refresh; only while firing.
  const StormEvidence& live() const { return firing_->live; }

  // Quiet -> firing: the Firing transition, its evidence dated since_ns and fired now_ns.
  StormTransition Fire(StormEvidence evidence, int64_t since_ns, int64_t now_ns) {
    evidence.severity = StormSeverity(evidence.storm);
    evidence.since_ns = since_ns;
    evidence.fired_ns = now_ns;
    firing_ = std::make_unique<Firing>(Firing{evidence, evidence});
    return {StormState::kFiring, now_ns, std::move(evidence)};
  }

  // While firing: the latest evidence, still dated as it fired.
  void Refresh(StormEvidence evidence) {
    const StormEvidence& fired = firing_->fired;
    if (resolved_evidence_ == ResolvedEvidence::kLatest) evidence.identity = fired.identity;
    // Severity and namespace are labels of the alert (Alertmanager, stormwatch_storm_active):
    // they stay as fired, or the resolution would name a different alert than the one that fired.
    evidence.severity = fired.severity;
    evidence.namespace_ = fired.namespace_;
    evidence.since_ns = fired.since_ns;
    evidence.fired_ns = fired.fired_ns;
    firing_->live = std::move(evidence);
  }

  // Firing -> quiet: the Resolved transition.
  StormTransition Resolve(int64_t now_ns) {
    StormEvidence evidence = std::move(
        resolved_evidence_ == ResolvedEvidence::kAsFired ? firing_->fired : firing_->live);
    firing_.reset();
    return {StormState::kResolved, now_ns, std::move(evidence)};
  }

 private:
  struct Firing {
    StormEvidence fired;
    StormEvidence live;
  };
  ResolvedEvidence resolved_evidence_;
  std::unique_ptr<Firing> firing_;
};

// Resolved transitions of firing keys that were evicted, held until the next Evaluate.
class EvictedAlerts {
 public:
  // A tracked key is dropped: a firing storm must still end with exactly one Resolved.
  void Evict(StormAlert& alert, int64_t now_ns) {
    if (alert.firing()) resolved_.push_back(alert.Resolve(now_ns));
  }
  // The Resolved transitions since the last call: the start of Evaluate's output.
  std::vector<StormTransition> Take() { return std::exchange(resolved_, {}); }

 private:
  std::vector<StormTransition> resolved_;
};

// The live evidence of the firing alerts among a detector's entries (a BoundedLru), in their
// order: what StormDetector::Active() returns.
template <typename Entries, typename Entry>
std::vector<StormEvidence> ActiveEvidence(const Entries& entries, StormAlert Entry::*alert) {
  std::vector<StormEvidence> active;
  for (const auto& [key, entry] : entries) {
    if ((entry.*alert).firing()) active.push_back((entry.*alert).live());
  }
  return active;
}

// Consecutive seconds ending at `last` (going back, at most `limit`) for which held(s) holds.
template <typename Pred>
int TrailingRun(int64_t last, int limit, Pred held) {
  int run = 0;
  while (run < limit && held(last - run)) ++run;
  return run;
}

// True when held(s) holds for each of the `n` seconds ending at `last`: e.g. calm long enough
// to resolve.
template <typename Pred>
bool HeldFor(int64_t last, int n, Pred held) {
  return TrailingRun(last, n, held) >= n;
}

}  // namespace stormwatch
