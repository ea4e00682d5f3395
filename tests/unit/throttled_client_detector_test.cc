// Throttled-client detector on an injected clock: both sides of the 429 rate and the sustain
// and resolve windows, the client-go flat-rate flag, evidence, allow-list and bounds.
#include "agent/analysis/throttled_client_detector.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "agent/kube/request_info.h"
#include "tests/unit/allocation_count.h"
#include "tests/unit/detector_sim.h"

namespace stormwatch {
namespace {

using sim::Append;
using sim::DetectorSim;
using sim::Event;
using sim::Every;
using sim::kMs;
using sim::kSec;
using sim::PerSecond;
using sim::Sa;

const Identity kWorker = Sa("jobs", "job-controller", "job-controller-5c6d7-abcde");

RequestRecord Put(const Identity& who, int status, int retry_after_s = -1,
                  const std::string& resource = "datajobs") {
  RequestRecord r = sim::Request(
      who, "PUT", "/apis/batch.company.com/v1/namespaces/team-a/" + resource + "/job-1/status",
      status);
  r.response.retry_after_s = retry_after_s;
  if (status == 429) {
    r.response.priority_level = "workload-low";
    r.response.flow_schema = "service-accounts";
  }
  return r;
}

TEST(ThrottledClientTest, SustainedThrottlingFiresOnceWithEvidence) {
  ThrottledClientDetector det;
  DetectorSim sim(det);
  // 20 requests/s flat (client-go QPS 20), 4 of them 429 with Retry-After 1..2, for 12 s.
  std::vector<Event> events = PerSecond(Put(kWorker, 200), 16, 0, 12 * kSec);
  Append(events, PerSecond(Put(kWorker, 429, 1), 2, 10 * kMs, 12 * kSec));
  Append(events, PerSecond(Put(kWorker, 429, 2), 2, 20 * kMs, 12 * kSec));
  sim.Run(std::move(events), 60 * kSec);

  auto firing = sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  const StormEvidence& e = firing[0].evidence;
  EXPECT_EQ(firing[0].at_ns, 10 * kSec);  // seconds 0..9 complete at 10 s
  EXPECT_EQ(e.storm, "throttled_client");
  EXPECT_EQ(e.identity.user, "system:serviceaccount:jobs:job-controller");
  EXPECT_EQ(e.identity.pod_name, "job-controller-5c6d7-abcde");
  EXPECT_EQ(e.since_ns, 0);
  EXPECT_EQ(e.fired_ns, 10 * kSec);
  EXPECT_EQ(e.details["throttled_per_second"], 4.0);
  EXPECT_EQ(e.details["requests_per_second"], 20.0);
  EXPECT_EQ(e.details["window_s"], 10);
  EXPECT_EQ(e.details["retry_after_min_s"], 1);
  EXPECT_EQ(e.details["retry_after_max_s"], 2);
  EXPECT_EQ(e.details["priority_level"], "workload-low");
  EXPECT_EQ(e.details["flow_schema"], "service-accounts");
  EXPECT_EQ(e.details["client_side_limit"], true);
  EXPECT_EQ(e.details["client_side_limit_qps"], 20.0);
  ASSERT_EQ(e.details["top_resources"].size(), 1u);
  EXPECT_EQ(e.details["top_resources"][0]["group"], "batch.company.com");
  EXPECT_EQ(e.details["top_resources"][0]["resource"], "datajobs");
  EXPECT_EQ(e.details["top_resources"][0]["throttled_per_second"], 4.0);
  EXPECT_NE(e.summary.find("client-go limit of 20 QPS"), std::string::npos) << e.summary;
  EXPECT_NE(e.fix.find("Retry-After"), std::string::npos);

  // Last 429 in second 11; seconds 12..41 under the rate: resolved when 41 is complete.
  auto resolved = sim.Of(StormState::kResolved);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].at_ns, 42 * kSec);
  EXPECT_EQ(sim.ActiveAt(41), 1u);
  EXPECT_EQ(sim.ActiveAt(42), 0u);
  EXPECT_EQ(resolved[0].evidence.identity.user, kWorker.user);
}

TEST(ThrottledClientTest, RateBelowThresholdNeverFires) {
  ThrottledClientConfig config;
  config.throttled_rate = 3;
  ThrottledClientDetector det(config);
  DetectorSim sim(det);
  sim.Run(PerSecond(Put(kWorker, 429, 1), 2, 0, 60 * kSec), 90 * kSec);  // 2/s < 3/s
  EXPECT_TRUE(sim.transitions().empty());
}

TEST(ThrottledClientTest, RateAtThresholdFires) {
  ThrottledClientConfig config;
  config.throttled_rate = 3;
  ThrottledClientDetector det(config);
  DetectorSim sim(det);
  sim.Run(PerSecond(Put(kWorker, 429, 1), 3, 0, 10 * kSec), 90 * kSec);  // exactly 3/s
  EXPECT_EQ(sim.Of(StormState::kFiring).size(), 1u);
}

TEST(ThrottledClientTest, OneSecondShortOfSustainNeverFires) {
  ThrottledClientDetector det;
  DetectorSim sim(det);
  sim.Run(PerSecond(Put(kWorker, 429), 5, 0, 9 * kSec), 60 * kSec);  // 9 s < 10 s
  EXPECT_TRUE(sim.transitions().empty());
}

TEST(ThrottledClientTest, AGapSecondRestartsTheSustainWindow) {
  ThrottledClientDetector det;
  DetectorSim sim(det);
  // 15 s of 429s with second 6 empty: runs of 6 and 9 seconds, never 10 in a row.
  std::vector<Event> events = PerSecond(Put(kWorker, 429), 5, 0, 6 * kSec);
  Append(events, PerSecond(Put(kWorker, 429), 5, 7 * kSec, 16 * kSec));
  sim.Run(std::move(events), 60 * kSec);
  EXPECT_TRUE(sim.transitions().empty());
}

TEST(ThrottledClientTest, DoesNotResolveBeforeTheResolveWindow) {
  ThrottledClientConfig config;
  config.resolve_s = 5;
  ThrottledClientDetector det(config);
  DetectorSim sim(det);
  std::vector<Event> events = PerSecond(Put(kWorker, 429), 2, 0, 12 * kSec);
  // 4 calm seconds (12..15), one throttled second (16), then calm for good.
  Append(events, PerSecond(Put(kWorker, 429), 2, 16 * kSec, 17 * kSec));
  sim.Run(std::move(events), 40 * kSec);
  auto resolved = sim.Of(StormState::kResolved);
  ASSERT_EQ(sim.Of(StormState::kFiring).size(), 1u);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].at_ns, 22 * kSec);  // 17..21 calm, decided at 22
}

TEST(ThrottledClientTest, NoClientSideLimitWhenTheRateIsNotFlat) {
  ThrottledClientDetector det;
  DetectorSim sim(det);
  // 429s at 5/s, other requests alternating 10 and 30 per second (mean 20, not flat).
  std::vector<Event> events = PerSecond(Put(kWorker, 429, 3), 5, 0, 12 * kSec);
  for (int64_t s = 0; s < 12; ++s) {
    Append(events, PerSecond(Put(kWorker, 200), s % 2 ? 25 : 5, s * kSec, (s + 1) * kSec));
  }
  sim.Run(std::move(events), 13 * kSec);
  auto firing = sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].evidence.details["client_side_limit"], false);
  EXPECT_EQ(firing[0].evidence.details["client_side_limit_qps"], 0.0);
  // Over seconds 1..9, the whole ones since the first 429: 5 x 30 + 4 x 10 requests.
  EXPECT_EQ(firing[0].evidence.details["requests_window_s"], 9);
  EXPECT_EQ(firing[0].evidence.details["requests_per_second"], 21.11);
  EXPECT_EQ(firing[0].evidence.details["retry_after_min_s"], 3);
}

TEST(ThrottledClientTest, FlatLimitToleranceBothSides) {
  SecondBuckets counts(16);
  auto fill = [&](std::vector<int> per_second) {
    counts = SecondBuckets(16);
    for (size_t s = 0; s < per_second.size(); ++s) {
      counts.Add(static_cast<int64_t>(s) * kSec, per_second[s]);
    }
  };
  fill({50, 46, 54, 45, 55});  // within 10 % of 50 every second
  EXPECT_EQ(FlatClientGoLimit(counts, 4, 5, 0.10), 50.0);
  fill({50, 46, 54, 44, 55});  // 44 is 12 % off
  EXPECT_EQ(FlatClientGoLimit(counts, 4, 5, 0.10), 0.0);
  fill({5, 5, 5, 5, 5});
  EXPECT_EQ(FlatClientGoLimit(counts, 4, 5, 0.10), 5.0);
  fill({0, 0, 0, 0, 0});
  EXPECT_EQ(FlatClientGoLimit(counts, 4, 5, 0.10), 0.0);
  fill({35, 35, 35, 35, 35});  // flat, but at no client-go default
  EXPECT_EQ(FlatClientGoLimit(counts, 4, 5, 0.10), 0.0);
}

TEST(ThrottledClientTest, IdentitiesAreSeparateAndAllowListed) {
  Identity system = Sa("kube-system", "generic-garbage-collector");
  Identity other_pod = Sa("jobs", "job-controller", "job-controller-5c6d7-zzzzz");
  // The allowed identity is throttled hard; two pods of one service account at 1/s each.
  std::vector<Event> events = PerSecond(Put(system, 429), 5, 0, 15 * kSec);
  Append(events, PerSecond(Put(kWorker, 429), 1, 0, 15 * kSec));
  Append(events, PerSecond(Put(other_pod, 429), 1, 0, 15 * kSec));

  ThrottledClientConfig config;
  config.allow.users = {"system:serviceaccount:kube-system:*"};
  ThrottledClientDetector det(config);  // 1/s: each pod fires on its own
  DetectorSim sim(det);
  sim.Run(events, 30 * kSec);
  auto firing = sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 2u);
  for (const StormTransition& t : firing) EXPECT_EQ(t.evidence.identity.sa_name, "job-controller");
  EXPECT_NE(firing[0].evidence.identity.pod_name, firing[1].evidence.identity.pod_name);
  EXPECT_EQ(det.Stats().observed, 30u);  // the allowed identity's 75 requests not even counted

  config.throttled_rate = 2;  // the pods are not summed into one 2/s client
  ThrottledClientDetector strict(config);
  DetectorSim strict_sim(strict);
  strict_sim.Run(events, 30 * kSec);
  EXPECT_TRUE(strict_sim.transitions().empty());
}

TEST(ThrottledClientTest, HealthyClientsAreQuiet) {
  ThrottledClientDetector det;
  DetectorSim sim(det);
  // A busy client at 50/s with an occasional 429 (one every 3 s) and a kubelet heartbeat.
  Identity kubelet;
  kubelet.user = "system:node:node-1";
  std::vector<Event> events = PerSecond(Put(kWorker, 200), 50, 0, 60 * kSec);
  Append(events, Every(Put(kWorker, 429, 1), 3 * kSec, 500 * kMs, 60 * kSec));
  Append(events, Every(Put(kubelet, 200), 10 * kSec, 0, 60 * kSec));
  sim.Run(std::move(events), 90 * kSec);
  EXPECT_TRUE(sim.transitions().empty());
}

TEST(ThrottledClientTest, TopResourcesAreRankedAndBounded) {
  ThrottledClientDetector det;
  DetectorSim sim(det);
  std::vector<Event> events;
  const std::vector<std::pair<std::string, int>> rates = {
      {"r1", 1}, {"r2", 2}, {"r3", 3}, {"r4", 4}, {"r5", 5}, {"r6", 6}, {"r7", 7}, {"r8", 8},
      {"r9", 9}};
  for (const auto& [resource, rate] : rates) {
    Append(events, PerSecond(Put(kWorker, 429, -1, resource), rate, 0, 11 * kSec));
  }
  sim.Run(std::move(events), 11 * kSec);
  auto firing = sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  const auto& top = firing[0].evidence.details["top_resources"];
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0]["resource"], "r9");
  EXPECT_EQ(top[0]["throttled_per_second"], 9.0);
  EXPECT_EQ(top[1]["resource"], "r8");
  EXPECT_EQ(top[2]["resource"], "r7");
  EXPECT_EQ(firing[0].evidence.details["throttled_per_second"], 45.0);
  EXPECT_EQ(firing[0].evidence.details["retry_after_min_s"], -1);  // none was sent
}

TEST(ThrottledClientTest, EvictionKeepsClientsBoundedAndResolvesFiringOnes) {
  ThrottledClientConfig config;
  config.max_clients = 2;
  ThrottledClientDetector det(config);
  DetectorSim sim(det);
  std::vector<Event> events = PerSecond(Put(kWorker, 429), 3, 0, 12 * kSec);
  // Other clients' first 429s take the two places; the firing client, touched, gets a second
  // chance at the first eviction, so it takes three.
  events.push_back({12 * kSec + 5, Put(Sa("x", "one"), 429)});
  events.push_back({12 * kSec + 6, Put(Sa("x", "two"), 429)});
  events.push_back({12 * kSec + 7, Put(Sa("x", "three"), 429)});
  sim.Run(std::move(events), 60 * kSec);
  ASSERT_EQ(sim.Of(StormState::kFiring).size(), 1u);
  auto resolved = sim.Of(StormState::kResolved);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].at_ns, 12 * kSec + 7);
  EXPECT_EQ(resolved[0].evidence.identity.user, kWorker.user);

  ThrottledClientDetector many(config);
  for (int i = 0; i < 10'000; ++i) many.Observe(Put(Sa("x", std::to_string(i)), 429), i * kMs);
  EXPECT_EQ(many.Stats().tracked, 2u);
  EXPECT_EQ(many.Stats().evictions, 9'998u);
  EXPECT_EQ(many.Stats().observed, 10'000u);
}

// A client entry taken over (max_clients reached) keeps its resource slots' buffers, so the
// first 429 of another client allocates nothing; the new client is shown only its own
// resources, even over seconds its predecessors were throttled in. Core resources: their
// names fit a string's inline buffer, so the per-thread cache of resource keys allocates
// nothing either when it first sees one.
TEST(ThrottledClientTest, ReusedEntryShowsOnlyItsOwnResourcesAndAllocatesNothing) {
  ThrottledClientConfig config;
  config.max_clients = 1;
  config.sustain_s = 2;
  ThrottledClientDetector det(config);
  auto put = [](const Identity& who, const std::string& resource) {
    RequestRecord r = Put(who, 429);
    r.path = "/api/v1/namespaces/team-a/" + resource + "/job-1/status";
    r.info = ParseRequestInfo(r.method, r.path);
    return r;
  };
  const Identity a = Sa("x", "a"), b = Sa("x", "b"), c = Sa("x", "c");
  for (const char* resource : {"r1", "r2", "r3"}) det.Observe(put(a, resource), 7 * kSec);
  det.Observe(put(b, "r4"), 7 * kSec + kMs);  // b takes a's entry, one slot of three
  const RequestRecord first = put(c, "r5");
  EXPECT_EQ(testing::AllocationsDuring([&] { det.Observe(first, 7 * kSec + 2 * kMs); }), 0u);
  for (int i = 1; i < 20; ++i) det.Observe(first, 7 * kSec + 100 * kMs * i);  // to second 8
  auto transitions = det.Evaluate(9 * kSec);  // seconds 7 and 8: a's and b's 429s among them
  ASSERT_EQ(transitions.size(), 1u);
  EXPECT_EQ(transitions[0].evidence.identity.user, c.user);
  EXPECT_EQ(transitions[0].evidence.details["window_s"], 2);
  const auto& top = transitions[0].evidence.details["top_resources"];
  ASSERT_EQ(top.size(), 1u) << top.dump();
  EXPECT_EQ(top[0]["resource"], "r5");
}

TEST(ThrottledClientTest, ClientsAreTrackedFromTheirFirst429) {
  ThrottledClientConfig config;
  config.max_clients = 4;
  ThrottledClientDetector det(config);
  // 1,000 clients answered 200 take no place and evict nothing.
  for (int i = 0; i < 1'000; ++i) det.Observe(Put(Sa("x", std::to_string(i)), 200), i * kMs);
  EXPECT_EQ(det.Stats().tracked, 0u);
  EXPECT_EQ(det.Stats().evictions, 0u);
  EXPECT_EQ(det.Stats().observed, 1'000u);
  det.Observe(Put(Sa("x", "7"), 429), kSec);
  det.Observe(Put(Sa("x", "7"), 200), kSec + 1);  // tracked now: counted
  det.Observe(Put(Sa("x", "8"), 200), kSec + 2);
  EXPECT_EQ(det.Stats().tracked, 1u);
}

TEST(ThrottledClientTest, RequestRateCountsOnlyWholeTrackedSeconds) {
  ThrottledClientDetector det;
  DetectorSim sim(det);
  // 20 requests/s from 0 s, flat at client-go QPS 20; from 5.5 s on, 4 of each second's 20 are
  // 429s (the half second before the first one is not seen: the client was not tracked).
  std::vector<Event> events = PerSecond(Put(kWorker, 200), 20, 0, 5500 * kMs);
  Append(events, PerSecond(Put(kWorker, 200), 16, 5500 * kMs, 30 * kSec));
  Append(events, PerSecond(Put(kWorker, 429, 1), 4, 5500 * kMs, 30 * kSec));
  sim.Run(std::move(events), 30 * kSec);
  auto firing = sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  const StormEvidence& e = firing[0].evidence;
  EXPECT_EQ(firing[0].at_ns, 15 * kSec);  // seconds 5..14 with 429s
  EXPECT_EQ(e.details["window_s"], 10);
  // Seconds 6..14: of second 5 only the 9 requests from the first 429 on were seen.
  EXPECT_EQ(e.details["requests_window_s"], 9);
  EXPECT_EQ(e.details["requests_per_second"], 20.0);
  EXPECT_EQ(e.details["client_side_limit"], true);
  EXPECT_EQ(e.details["client_side_limit_qps"], 20.0);
  // Later evidence (refreshed) spans the whole window.
  ASSERT_EQ(det.Active().size(), 1u);
  EXPECT_EQ(det.Active()[0].details["requests_window_s"], 10);
  EXPECT_EQ(det.Active()[0].details["requests_per_second"], 20.0);
}

}  // namespace
}  // namespace stormwatch
