// Conflict-storm detector on an injected clock: both sides of the ratio, the rate and the
// share of seconds with 409s; healthy controllers; evidence; allow-list; bounds.
#include "agent/analysis/conflict_storm_detector.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/unit/detector_sim.h"

namespace stormwatch {
namespace {

using sim::Append;
using sim::DetectorSim;
using sim::Event;
using sim::kMs;
using sim::kSec;
using sim::PerSecond;
using sim::Sa;

const Identity kWorkers = Sa("ops", "cr-controller", "cr-controller-6f7-qwert");

RequestRecord Write(const Identity& who, const std::string& name, int status,
                    const std::string& subresource = "status", const std::string& method = "PUT") {
  std::string path = "/apis/example.com/v1/namespaces/team-a/widgets/" + name;
  if (!subresource.empty()) path += "/" + subresource;
  return sim::Request(who, method, path, status);
}

// Per second: `ok` successful writes and `conflicts` 409s on object `name`.
std::vector<Event> Traffic(const Identity& who, const std::string& name, int ok, int conflicts,
                           int64_t start, int64_t end) {
  std::vector<Event> events;
  if (ok > 0) events = PerSecond(Write(who, name, 200), ok, start, end);
  if (conflicts > 0) {
    Append(events, PerSecond(Write(who, name, 409), conflicts, start + kMs, end));
  }
  return events;
}

TEST(ConflictStormTest, RetryStormFiresWithEvidenceAndResolves) {
  ConflictStormDetector det;
  DetectorSim sim(det);
  // 20 writes/s (flat at client-go QPS 20), 8 of them 409: 4 on w-1, 3 on w-2, 1 on w-3
  // (through the main resource); for 35 s.
  std::vector<Event> events = Traffic(kWorkers, "w-1", 12, 4, 0, 35 * kSec);
  Append(events, Traffic(kWorkers, "w-2", 0, 3, 0, 35 * kSec));
  Append(events, PerSecond(Write(kWorkers, "w-3", 409, ""), 1, 2 * kMs, 35 * kSec));
  sim.Run(std::move(events), 100 * kSec);

  auto firing = sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  const StormEvidence& e = firing[0].evidence;
  // Tracked from the first 409 (second 0, after one write that was not counted): judged on
  // seconds 1..30, the first window it was tracked for whole.
  EXPECT_EQ(firing[0].at_ns, 31 * kSec);
  EXPECT_EQ(e.storm, "conflict_storm");
  EXPECT_EQ(e.identity.user, "system:serviceaccount:ops:cr-controller");
  EXPECT_EQ(e.identity.pod_name, "cr-controller-6f7-qwert");
  EXPECT_EQ(e.api_group, "example.com");
  EXPECT_EQ(e.resource, "widgets");
  EXPECT_EQ(e.namespace_, "team-a");
  EXPECT_EQ(e.since_ns, 0);  // the second of the first 409
  EXPECT_EQ(e.fired_ns, 31 * kSec);
  EXPECT_EQ(e.details["conflict_ratio"], 0.4);
  EXPECT_EQ(e.details["conflicts_per_second"], 8.0);
  EXPECT_EQ(e.details["writes_per_second"], 20.0);
  EXPECT_EQ(e.details["window_s"], 30);
  EXPECT_EQ(e.details["status_conflicts"], 210.0);
  EXPECT_EQ(e.details["main_conflicts"], 30.0);
  EXPECT_EQ(e.details["status_writes"], 570.0);
  EXPECT_EQ(e.details["main_writes"], 30.0);
  EXPECT_EQ(e.details["write_rate_flat"], true);
  EXPECT_EQ(e.details["client_side_limit_qps"], 20.0);
  const auto& top = e.details["top_objects"];
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0]["name"], "w-1");
  EXPECT_EQ(top[0]["conflicts"], 120.0);
  EXPECT_EQ(top[1]["name"], "w-2");
  EXPECT_EQ(top[1]["conflicts"], 90.0);
  EXPECT_EQ(top[2]["name"], "w-3");
  EXPECT_EQ(top[2]["conflicts"], 30.0);
  EXPECT_NE(e.summary.find("40% of 20.0 writes/s"), std::string::npos) << e.summary;
  EXPECT_NE(e.fix.find("Server-Side Apply"), std::string::npos);

  // Last 409s in second 34: seconds 35..64 calm, resolved when 64 is complete.
  auto resolved = sim.Of(StormState::kResolved);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].at_ns, 65 * kSec);
  EXPECT_EQ(sim.ActiveAt(64), 1u);
  EXPECT_EQ(sim.ActiveAt(65), 0u);
  EXPECT_EQ(resolved[0].evidence.identity.user, kWorkers.user);
}

TEST(ConflictStormTest, RatioThresholdBothSides) {
  {
    ConflictStormDetector det;  // 5 of 26 = 19.2 %
    DetectorSim sim(det);
    sim.Run(Traffic(kWorkers, "w-1", 21, 5, 0, 40 * kSec), 60 * kSec);
    EXPECT_TRUE(sim.transitions().empty());
  }
  {
    ConflictStormDetector det;  // 5 of 25 = 20 %
    DetectorSim sim(det);
    sim.Run(Traffic(kWorkers, "w-1", 20, 5, 0, 40 * kSec), 60 * kSec);
    EXPECT_EQ(sim.Of(StormState::kFiring).size(), 1u);
  }
}

TEST(ConflictStormTest, RateThresholdBothSides) {
  // Every write conflicts, but 4/s is under the 5/s rate.
  {
    ConflictStormDetector det;
    DetectorSim sim(det);
    sim.Run(Traffic(kWorkers, "w-1", 0, 4, 0, 40 * kSec), 60 * kSec);
    EXPECT_TRUE(sim.transitions().empty());
  }
  {
    ConflictStormDetector det;
    DetectorSim sim(det);
    sim.Run(Traffic(kWorkers, "w-1", 0, 5, 0, 40 * kSec), 60 * kSec);
    EXPECT_EQ(sim.Of(StormState::kFiring).size(), 1u);
  }
}

TEST(ConflictStormTest, SustainWindowBothSides) {
  {
    ConflictStormDetector det;
    DetectorSim sim(det);
    // 29 s of 409s: 9.3/s averaged over the 30 s window after the first 409's second and 28
    // of its seconds (>= 24) hold a 409: the averaged rule fires once the key has been tracked
    // for a whole window.
    sim.Run(Traffic(kWorkers, "w-1", 10, 10, 0, 29 * kSec), 60 * kSec);
    auto firing = sim.Of(StormState::kFiring);
    ASSERT_EQ(firing.size(), 1u);
    EXPECT_EQ(firing[0].at_ns, 31 * kSec);
  }
  {
    ConflictStormDetector det;
    DetectorSim sim(det);
    sim.Run(Traffic(kWorkers, "w-1", 10, 10, 0, 23 * kSec), 60 * kSec);  // 23 of 30 seconds
    EXPECT_TRUE(sim.transitions().empty());
  }
}

TEST(ConflictStormTest, BurstsCoveringTooFewSecondsStaySilent) {
  // 12 conflicts/s in 2 of every 3 seconds: 8/s and 50 % on average, but only 20 of 30
  // seconds hold a 409 (< 80 %).
  std::vector<Event> events;
  for (int64_t s = 0; s < 60; ++s) {
    if (s % 3 != 2) Append(events, Traffic(kWorkers, "w-1", 12, 12, s * kSec, (s + 1) * kSec));
  }
  ConflictStormDetector det;
  DetectorSim sim(det);
  sim.Run(events, 90 * kSec);
  EXPECT_TRUE(sim.transitions().empty());

  // The same with 4 of every 5 seconds: 24 of 30.
  events.clear();
  for (int64_t s = 0; s < 60; ++s) {
    if (s % 5 != 4) Append(events, Traffic(kWorkers, "w-1", 12, 12, s * kSec, (s + 1) * kSec));
  }
  ConflictStormDetector det2;
  DetectorSim sim2(det2);
  sim2.Run(events, 90 * kSec);
  EXPECT_EQ(sim2.Of(StormState::kFiring).size(), 1u);
}

TEST(ConflictStormTest, BusyControllerWithOccasionalConflictsIsQuiet) {
  // 100 writes/s over 50 objects and 5 conflicts/s: at the rate, far under the ratio (4.8 %).
  std::vector<Event> events;
  for (int i = 0; i < 50; ++i) {
    Append(events, Traffic(kWorkers, "w-" + std::to_string(i), 2, i < 5 ? 1 : 0, i * kMs,
                           120 * kSec));
  }
  ConflictStormDetector det;
  DetectorSim sim(det);
  sim.Run(std::move(events), 150 * kSec);
  EXPECT_TRUE(sim.transitions().empty());
}

TEST(ConflictStormTest, OnlyWritesOnTheResourceOrStatusCount) {
  ConflictStormDetector det;
  for (int64_t i = 0; i < 2000; ++i) {
    const int64_t t = i * kSec / 50;
    det.Observe(Write(kWorkers, "w-1", 409, "scale"), t);
    det.Observe(sim::Request(kWorkers, "POST", "/apis/example.com/v1/namespaces/team-a/widgets",
                             409),
                t);
    det.Observe(sim::Request(kWorkers, "GET",
                             "/apis/example.com/v1/namespaces/team-a/widgets/w-1", 409),
                t);
  }
  EXPECT_TRUE(det.Evaluate(41 * kSec).empty());
  EXPECT_EQ(det.Stats().observed, 0u);
  // PATCH counts like PUT.
  ConflictStormDetector patches;
  DetectorSim sim(patches);
  sim.Run(PerSecond(Write(kWorkers, "w-1", 409, "", "PATCH"), 6, 0, 31 * kSec), 31 * kSec);
  EXPECT_EQ(sim.Of(StormState::kFiring).size(), 1u);
}

TEST(ConflictStormTest, AllowListAndIdentitiesAreSeparate) {
  ConflictStormConfig config;
  config.allow.users = {"system:kube-controller-manager"};
  Identity kcm;
  kcm.user = "system:kube-controller-manager";
  std::vector<Event> events = Traffic(kcm, "w-1", 0, 20, 0, 40 * kSec);
  // Two identities at 3 conflicts/s each on the same object: 6/s together, 3/s each.
  Append(events, Traffic(kWorkers, "w-2", 0, 3, 0, 40 * kSec));
  Append(events, Traffic(Sa("ops", "other"), "w-2", 0, 3, 0, 40 * kSec));
  ConflictStormDetector det(config);
  DetectorSim sim(det);
  sim.Run(std::move(events), 60 * kSec);
  EXPECT_TRUE(sim.transitions().empty());
  EXPECT_EQ(det.Stats().observed, 240u);
}

TEST(ConflictStormTest, NoFlappingWhileConflictsHoverAroundTheRate) {
  ConflictStormConfig config;
  config.resolve_s = 5;
  ConflictStormDetector det(config);
  DetectorSim sim(det);
  // Fires on 8/s; then 4 calm seconds and 1 stormy second, repeated for 40 s; then stops.
  std::vector<Event> events = Traffic(kWorkers, "w-1", 2, 8, 0, 31 * kSec);
  for (int64_t s = 31; s < 71; ++s) {
    Append(events, Traffic(kWorkers, "w-1", 2, s % 5 == 0 ? 8 : 2, s * kSec, (s + 1) * kSec));
  }
  sim.Run(std::move(events), 120 * kSec);
  auto resolved = sim.Of(StormState::kResolved);
  ASSERT_EQ(sim.Of(StormState::kFiring).size(), 1u);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].at_ns, 76 * kSec);  // stormy second 70; 71..75 calm
}

TEST(ConflictStormTest, EvictionKeepsStateBoundedAndResolvesFiringKeys) {
  ConflictStormConfig config;
  config.max_keys = 2;
  config.max_objects = 100;
  ConflictStormDetector det(config);
  DetectorSim sim(det);
  std::vector<Event> events = Traffic(kWorkers, "w-1", 0, 6, 0, 31 * kSec);
  // Other writers' first 409s take the two places (writes without a 409 take none); the
  // firing key, touched, gets a second chance at the first eviction, so it takes three.
  events.push_back({31 * kSec + 3, Write(Sa("x", "zero"), "w-1", 200)});
  events.push_back({31 * kSec + 5, Write(Sa("x", "one"), "w-1", 409)});
  events.push_back({31 * kSec + 6, Write(Sa("x", "two"), "w-1", 409)});
  events.push_back({31 * kSec + 7, Write(Sa("x", "three"), "w-1", 409)});
  sim.Run(std::move(events), 90 * kSec);
  ASSERT_EQ(sim.Of(StormState::kFiring).size(), 1u);
  auto resolved = sim.Of(StormState::kResolved);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].at_ns, 31 * kSec + 7);
  EXPECT_EQ(resolved[0].evidence.identity.user, kWorkers.user);

  ConflictStormDetector many(config);
  for (int i = 0; i < 5000; ++i) many.Observe(Write(kWorkers, "w-" + std::to_string(i), 409), i);
  EXPECT_EQ(many.Stats().tracked, 1u + 100u);
  EXPECT_EQ(many.Stats().evictions, 4900u);
}

TEST(ConflictStormTest, KeysAreTrackedFromTheirFirst409) {
  ConflictStormConfig config;
  config.max_keys = 4;
  {
    ConflictStormDetector det(config);
    // 1,000 writers that never conflict take no place and evict nothing.
    for (int i = 0; i < 1'000; ++i) det.Observe(Write(Sa("x", std::to_string(i)), "w-1", 200), i);
    EXPECT_EQ(det.Stats().tracked, 0u);
    EXPECT_EQ(det.Stats().evictions, 0u);
    EXPECT_EQ(det.Stats().observed, 1'000u);
    det.Observe(Write(Sa("x", "7"), "w-1", 409), kSec);
    det.Observe(Write(Sa("x", "8"), "w-1", 200), kSec + 1);
    EXPECT_EQ(det.Stats().tracked, 2u);  // the key and its contended object
  }
  // 20 writes/s from 0 s; from 5.5 s on, 6 of each second's 20 are 409s. The key is tracked
  // from 5.5 s: second 5 is not whole (its writes before the first 409 were not counted), so
  // the first window judged is seconds 6..35.
  ConflictStormDetector det(config);
  DetectorSim sim(det);
  std::vector<Event> events = Traffic(kWorkers, "w-1", 20, 0, 0, 5500 * kMs);
  Append(events, Traffic(kWorkers, "w-1", 14, 6, 5500 * kMs, 60 * kSec));
  sim.Run(std::move(events), 60 * kSec);
  auto firing = sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].at_ns, 36 * kSec);
  EXPECT_EQ(firing[0].evidence.since_ns, 5 * kSec);
  EXPECT_EQ(firing[0].evidence.details["conflict_ratio"], 0.3);
  EXPECT_EQ(firing[0].evidence.details["writes_per_second"], 20.0);
}

}  // namespace
}  // namespace stormwatch
