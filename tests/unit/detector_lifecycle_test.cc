// The alert lifecycle the storm detectors share (storm_lifecycle.h): what Firing, a refresh and
// Resolved carry under each ResolvedEvidence, evicted alerts, and the calm-run helpers.
#include "agent/analysis/storm_lifecycle.h"

#include <gtest/gtest.h>

#include <string>

#include "agent/core/bounded_lru.h"

namespace stormwatch {
namespace {

constexpr int64_t kSec = kNsPerSecond;

StormEvidence Evidence(const std::string& user_agent, const std::string& summary) {
  StormEvidence ev;
  ev.storm = "list_storm";
  ev.identity.user = "alice";
  ev.identity.user_agent = user_agent;
  ev.summary = summary;
  ev.since_ns = 1;  // detectors' own dating, overwritten by the alert
  ev.fired_ns = 2;
  return ev;
}

TEST(DetectorLifecycleTest, FireDatesTheEvidence) {
  StormAlert alert(ResolvedEvidence::kAsFired);
  EXPECT_FALSE(alert.firing());
  StormTransition t = alert.Fire(Evidence("kubectl/v1", "first"), 5 * kSec, 10 * kSec);
  EXPECT_EQ(t.state, StormState::kFiring);
  EXPECT_EQ(t.at_ns, 10 * kSec);
  EXPECT_EQ(t.evidence.since_ns, 5 * kSec);
  EXPECT_EQ(t.evidence.fired_ns, 10 * kSec);
  ASSERT_TRUE(alert.firing());
  EXPECT_EQ(alert.live().summary, "first");
  EXPECT_EQ(alert.live().since_ns, 5 * kSec);
}

TEST(DetectorLifecycleTest, AsFiredRefreshesTheClientAndResolvesWithTheFiringEvidence) {
  StormAlert alert(ResolvedEvidence::kAsFired);
  alert.Fire(Evidence("kubectl/v1", "first"), 5 * kSec, 10 * kSec);
  alert.Refresh(Evidence("kubectl/v2", "later"));
  EXPECT_EQ(alert.live().summary, "later");
  EXPECT_EQ(alert.live().identity.user_agent, "kubectl/v2");
  EXPECT_EQ(alert.live().since_ns, 5 * kSec);
  EXPECT_EQ(alert.live().fired_ns, 10 * kSec);

  StormTransition t = alert.Resolve(20 * kSec);
  EXPECT_EQ(t.state, StormState::kResolved);
  EXPECT_EQ(t.at_ns, 20 * kSec);
  EXPECT_EQ(t.evidence.summary, "first");
  EXPECT_EQ(t.evidence.identity.user_agent, "kubectl/v1");
  EXPECT_EQ(t.evidence.since_ns, 5 * kSec);
  EXPECT_EQ(t.evidence.fired_ns, 10 * kSec);
  EXPECT_FALSE(alert.firing());
}

TEST(DetectorLifecycleTest, LatestKeepsTheFiringClientAndResolvesWithTheLatestEvidence) {
  StormAlert alert(ResolvedEvidence::kLatest);
  alert.Fire(Evidence("kubectl/v1", "first"), 5 * kSec, 10 * kSec);
  alert.Refresh(Evidence("kubectl/v2", "later"));
  EXPECT_EQ(alert.live().summary, "later");
  EXPECT_EQ(alert.live().identity.user_agent, "kubectl/v1");  // the alert's labels
  EXPECT_EQ(alert.live().since_ns, 5 * kSec);
  EXPECT_EQ(alert.live().fired_ns, 10 * kSec);

  StormTransition t = alert.Resolve(20 * kSec);
  EXPECT_EQ(t.evidence.summary, "later");
  EXPECT_EQ(t.evidence.identity.user_agent, "kubectl/v1");
  EXPECT_EQ(t.evidence.since_ns, 5 * kSec);
  EXPECT_FALSE(alert.firing());

  // Fires again afresh.
  t = alert.Fire(Evidence("kubectl/v3", "again"), 30 * kSec, 31 * kSec);
  EXPECT_EQ(t.evidence.identity.user_agent, "kubectl/v3");
  EXPECT_EQ(alert.live().since_ns, 30 * kSec);
}

TEST(DetectorLifecycleTest, EvictedFiringAlertsResolveOnceAndQuietOnesNever) {
  EvictedAlerts evicted;
  StormAlert quiet(ResolvedEvidence::kAsFired);
  StormAlert firing(ResolvedEvidence::kAsFired);
  firing.Fire(Evidence("kubectl/v1", "first"), 5 * kSec, 10 * kSec);
  evicted.Evict(quiet, 12 * kSec);
  evicted.Evict(firing, 13 * kSec);
  EXPECT_FALSE(firing.firing());

  auto resolved = evicted.Take();
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].state, StormState::kResolved);
  EXPECT_EQ(resolved[0].at_ns, 13 * kSec);
  EXPECT_EQ(resolved[0].evidence.summary, "first");
  EXPECT_TRUE(evicted.Take().empty());
}

TEST(DetectorLifecycleTest, ActiveEvidenceListsFiringEntriesInTheirOrder) {
  struct Entry {
    StormAlert alert{ResolvedEvidence::kLatest};
  };
  BoundedLru<std::string, Entry> entries(4);
  auto none = [](const std::string&, Entry&) {};
  for (const char* key : {"a", "b", "c"}) entries.FindOrInsert(key, [] { return Entry{}; }, none);
  entries.Find("a")->alert.Fire(Evidence("x/1", "a"), 0, kSec);
  entries.Find("c")->alert.Fire(Evidence("x/1", "c"), 0, kSec);

  auto active = ActiveEvidence(entries, &Entry::alert);
  ASSERT_EQ(active.size(), 2u);
  EXPECT_EQ(active[0].summary, "c");  // most recently touched first
  EXPECT_EQ(active[1].summary, "a");
}

TEST(DetectorLifecycleTest, TrailingRunAndHeldForCountBackFromTheLastSecond) {
  auto hot_from_7 = [](int64_t s) { return s >= 7; };
  EXPECT_EQ(TrailingRun(10, 10, hot_from_7), 4);  // 10, 9, 8, 7
  EXPECT_EQ(TrailingRun(10, 3, hot_from_7), 3);   // capped by the limit
  EXPECT_EQ(TrailingRun(6, 10, hot_from_7), 0);
  EXPECT_TRUE(HeldFor(10, 4, hot_from_7));
  EXPECT_FALSE(HeldFor(10, 5, hot_from_7));
}

}  // namespace
}  // namespace stormwatch
