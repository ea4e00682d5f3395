// LIST storm detector on an injected clock: both sides of each threshold (rate, bytes,
// weight, sustain), hysteresis, the seed-002 poller's evidence, healthy traffic that must stay
// quiet, allow list and bounded state.
#include "agent/analysis/list_storm_detector.h"

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
using sim::Request;
using sim::User;

constexpr uint64_t kMiB = 1024 * 1024;

// The seed-002 agent: a Python client whose service account sits in system:masters.
Identity Poller(const std::string& pod = "pod-reporter-5f7c9-abcde") {
  Identity id;
  id.kind = Identity::Kind::kServiceAccount;
  id.user = "system:serviceaccount:monitoring:pod-reporter";
  id.sa_namespace = "monitoring";
  id.sa_name = "pod-reporter";
  id.pod_name = pod;
  id.user_agent = "OpenAPI-Generator/1.0.0/python";
  id.component = "OpenAPI-Generator";
  id.component_version = "1.0.0";
  id.groups = {"system:masters"};
  id.system_masters = true;
  return id;
}

const Identity kAlice = User("alice", "kubectl/v1.28.7 (linux/amd64) kubernetes/c8dcb00");

RequestRecord List(const Identity& who, const std::string& path, uint64_t bytes = 1000,
                   const std::string& priority_level = "workload-low",
                   const std::string& flow_schema = "service-accounts") {
  RequestRecord r = Request(who, "GET", path);
  r.response_bytes = bytes;
  r.response.priority_level = priority_level;
  r.response.flow_schema = flow_schema;
  return r;
}

// The expensive shape: no resourceVersion (consistent), no limit, cluster scope.
RequestRecord AllPods(const Identity& who, uint64_t bytes = 1000) {
  return List(who, "/api/v1/pods", bytes);
}

// `per_burst` copies of `r`, 10 ms apart, at the start of every `period_s` in [start, end).
std::vector<Event> Bursts(const RequestRecord& r, int per_burst, int64_t period_s,
                          int64_t start_ns, int64_t end_ns) {
  std::vector<Event> out;
  for (int64_t t = start_ns; t < end_ns; t += period_s * kSec) {
    for (int i = 0; i < per_burst; ++i) out.push_back({t + i * 10 * kMs, r});
  }
  return out;
}

using Harness = sim::Harness<ListStormDetector>;

// --- list rate: weighted LISTs/s averaged over 15 s >= 5 ---

TEST(ListStormTest, BurstyPollerAboveListRateFiresOnce) {
  // 13 expensive LISTs every 5 s: 39 LISTs, weight 2 = 78 per 15 s = 5.2/s.
  Harness run;
  run.sim.Run(Bursts(AllPods(kAlice), 13, 5, 0, 120 * kSec), 120 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].at_ns, 15 * kSec);  // the first window the key spans whole: [0, 14]
  EXPECT_EQ(firing[0].evidence.storm, "list_storm");
  EXPECT_EQ(firing[0].evidence.identity.user, "alice");
  EXPECT_EQ(firing[0].evidence.resource, "pods");
  EXPECT_EQ(firing[0].evidence.details["weighted_lists_per_second"], 5.2);
  EXPECT_EQ(firing[0].evidence.details["lists_per_second"], 2.6);
  EXPECT_EQ(run.sim.ActiveAt(119), 1u);
}

TEST(ListStormTest, BurstyPollerBelowListRateNeverFires) {
  // 12 every 5 s: 72 weighted per 15 s = 4.8/s.
  Harness run;
  run.sim.Run(Bursts(AllPods(kAlice), 12, 5, 0, 300 * kSec), 300 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
  EXPECT_EQ(run.det.Stats().observed, 60u * 12);
}

TEST(ListStormTest, ListRateIsInclusiveAndCheapListsCountOnce) {
  // Paginated LISTs weigh 1: 25 every 5 s = exactly 5/s fires, 24 = 4.8/s does not.
  const RequestRecord paginated = List(kAlice, "/api/v1/pods?limit=500");
  Harness at;
  at.sim.Run(Bursts(paginated, 25, 5, 0, 60 * kSec), 60 * kSec);
  ASSERT_EQ(at.sim.Of(StormState::kFiring).size(), 1u);
  EXPECT_EQ(at.sim.Of(StormState::kFiring)[0].evidence.details["weighted_lists_per_second"], 5.0);
  Harness below;
  below.sim.Run(Bursts(paginated, 24, 5, 0, 120 * kSec), 120 * kSec);
  EXPECT_TRUE(below.sim.transitions().empty());
}

TEST(ListStormTest, OnlyConsistentUnpaginatedClusterListsWeighDouble) {
  // 13 every 5 s weighs 5.2/s when expensive; any one cheap property makes it 2.6/s.
  for (const char* path : {"/api/v1/pods?limit=500", "/api/v1/pods?resourceVersion=0",
                           "/api/v1/namespaces/team-a/pods"}) {
    Harness run;
    run.sim.Run(Bursts(List(kAlice, path), 13, 5, 0, 120 * kSec), 120 * kSec);
    EXPECT_TRUE(run.sim.transitions().empty()) << path;
  }
}

TEST(ListStormTest, NothingFiresBeforeTheKeySpansTheWholeWindow) {
  // 6 expensive LISTs/s (12/s weighted) from 0.5 s: the sum passes 75 after ~7 s, but a
  // key younger than the window is never averaged over fewer seconds.
  Harness run;
  run.sim.Run(sim::Every(AllPods(kAlice), kSec / 6, kSec / 2, 30 * kSec), 30 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].at_ns, 15 * kSec);  // window [0, 14]: first seen in second 0
  EXPECT_EQ(firing[0].evidence.since_ns, kSec / 2);
}

TEST(ListStormTest, ShortBurstDoesNotAverageUp) {
  // 10 expensive LISTs/s for 3 s: 20/s weighted while it lasts, 4/s over 15 s.
  Harness run;
  run.sim.Run(sim::Every(AllPods(kAlice), kSec / 10, 0, 3 * kSec), 60 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
}

// --- bytes: weighted response bytes/s averaged over 15 s >= 5 MiB ---

TEST(ListStormTest, BytesRateBothSides) {
  // One cheap (namespaced, resourceVersion=0) LIST a second: 1 LIST/s, far under the rate.
  const std::string path = "/api/v1/namespaces/team-a/configmaps?resourceVersion=0";
  Harness at;
  at.sim.Run(sim::Every(List(kAlice, path, 5 * kMiB), kSec, 0, 40 * kSec), 40 * kSec);
  auto firing = at.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].at_ns, 15 * kSec);
  EXPECT_EQ(firing[0].evidence.resource, "configmaps");
  EXPECT_EQ(firing[0].evidence.details["bytes_per_second"], 5.0 * kMiB);

  Harness below;
  below.sim.Run(sim::Every(List(kAlice, path, 5 * kMiB - 1), kSec, 0, 120 * kSec), 120 * kSec);
  EXPECT_TRUE(below.sim.transitions().empty());
}

TEST(ListStormTest, ExpensiveListBytesWeighDouble) {
  Harness run;
  run.sim.Run(sim::Every(AllPods(kAlice, 5 * kMiB / 2), kSec, 0, 40 * kSec), 40 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].evidence.details["bytes_per_second"], 2.5 * kMiB);
  EXPECT_EQ(firing[0].evidence.details["weighted_bytes_per_second"], 5.0 * kMiB);
  EXPECT_EQ(firing[0].evidence.details["weighted_lists_per_second"], 2.0);
}

// --- lifecycle ---

TEST(ListStormTest, ResolvesAfterResolveWindowAndNotBefore) {
  // Bursts at 0, 5, ..., 50. The window ending at 54 still holds 40, 45, 50 (78 weighted);
  // from 55 on windows hold two bursts at most: 30 calm seconds 55..84.
  Harness run;
  run.sim.Run(Bursts(AllPods(kAlice), 13, 5, 0, 51 * kSec), 150 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  auto resolved = run.sim.Of(StormState::kResolved);
  ASSERT_EQ(firing.size(), 1u);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(firing[0].at_ns, 15 * kSec);
  EXPECT_EQ(resolved[0].at_ns, 85 * kSec);
  EXPECT_EQ(run.sim.ActiveAt(84), 1u);
  EXPECT_EQ(run.sim.ActiveAt(85), 0u);
  // Resolved repeats what fired.
  EXPECT_EQ(resolved[0].evidence.details, firing[0].evidence.details);
  EXPECT_EQ(resolved[0].evidence.fired_ns, 15 * kSec);
  EXPECT_TRUE(run.det.Active().empty());
}

TEST(ListStormTest, ShortLullDoesNotFlap) {
  // Calm windows 55..79 (25 s) before the poller is back at 70, 75, 80: still one storm.
  std::vector<Event> events = Bursts(AllPods(kAlice), 13, 5, 0, 51 * kSec);
  Append(events, Bursts(AllPods(kAlice), 13, 5, 70 * kSec, 151 * kSec));
  Harness run;
  run.sim.Run(std::move(events), 300 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  auto resolved = run.sim.Of(StormState::kResolved);
  ASSERT_EQ(firing.size(), 1u);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].at_ns, 185 * kSec);
}

TEST(ListStormTest, ActiveCarriesLiveFigures) {
  // 13 then 20 expensive LISTs per 5 s: the live evidence follows, Firing's stays.
  std::vector<Event> events = Bursts(AllPods(kAlice), 13, 5, 0, 20 * kSec);
  Append(events, Bursts(AllPods(kAlice), 20, 5, 20 * kSec, 60 * kSec));
  ListStormDetector det;
  DetectorSim sim(det);
  sim.Run(std::move(events), 50 * kSec);
  auto active = det.Active();
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].details["lists_per_second"], 4.0);  // window [35, 49]: 3 bursts of 20
  EXPECT_EQ(active[0].fired_ns, 15 * kSec);
  EXPECT_EQ(active[0].since_ns, 0);
  EXPECT_EQ(sim.Of(StormState::kFiring)[0].evidence.details["lists_per_second"], 2.6);
}

// --- evidence: the seed-002 poller ---

TEST(ListStormTest, ExemptPollerEvidence) {
  // Every 5 s: 18 expensive LISTs of pods, 1 from the watch cache (resourceVersion=0) and 1
  // paginated namespaced one; and nodes. All served at the exempt level, 10 MB each.
  const Identity poller = Poller();
  auto exempt = [&](const std::string& path) {
    return List(poller, path, 10'000'000, "exempt", "exempt");
  };
  std::vector<Event> events = Bursts(exempt("/api/v1/pods"), 18, 5, 0, 60 * kSec);
  Append(events, Bursts(exempt("/api/v1/pods?resourceVersion=0"), 1, 5, 200 * kMs, 60 * kSec));
  Append(events,
         Bursts(exempt("/api/v1/namespaces/team-a/pods?limit=500"), 1, 5, 300 * kMs, 60 * kSec));
  Append(events, Bursts(exempt("/api/v1/nodes"), 3, 5, 400 * kMs, 60 * kSec));
  Harness run;
  run.sim.Run(std::move(events), 60 * kSec);

  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 2u);  // pods and nodes are separate keys
  const StormEvidence& pods =
      firing[0].evidence.resource == "pods" ? firing[0].evidence : firing[1].evidence;
  const StormEvidence& nodes =
      firing[0].evidence.resource == "nodes" ? firing[0].evidence : firing[1].evidence;
  EXPECT_EQ(pods.storm, "list_storm");
  EXPECT_EQ(pods.severity, "critical");
  EXPECT_EQ(pods.identity.user, "system:serviceaccount:monitoring:pod-reporter");
  EXPECT_EQ(pods.identity.pod_name, "pod-reporter-5f7c9-abcde");
  EXPECT_EQ(pods.api_group, "");
  EXPECT_EQ(pods.fired_ns, 15 * kSec);
  EXPECT_EQ(pods.since_ns, 0);
  // Window [0, 14]: 3 bursts of 20 LISTs, 54 of them expensive, 10 MB each.
  const nlohmann::json want = {
      {"window_s", 15},
      {"lists_per_second", 4.0},
      {"weighted_lists_per_second", 7.6},
      {"bytes_per_second", 40'000'000.0},
      {"weighted_bytes_per_second", 76'000'000.0},
      {"average_bytes_per_list", 10'000'000.0},
      {"exempt", true},
      {"shape",
       {{"consistent", 57},
        {"any", 3},
        {"exact", 0},
        {"not_older_than", 0},
        {"paginated", 3},
        {"unpaginated", 57},
        {"cluster_scope", 57},
        {"namespace_scope", 3},
        {"consistent_unpaginated_cluster_scope", 54}}},
      {"user_agent", "OpenAPI-Generator/1.0.0/python"},
      {"component", "OpenAPI-Generator"},
      {"priority_level", "exempt"},
      {"flow_schema", "exempt"},
      {"system_masters", true},
      {"groups", nlohmann::json::array({"system:masters"})},
  };
  EXPECT_EQ(pods.details, want) << pods.details.dump(2);
  EXPECT_EQ(pods.summary,
            "client system:serviceaccount:monitoring:pod-reporter is polling LIST pods: 4.0 "
            "LIST/s (weighted 7.6/s), 38.1 MB/s, 54 of 60 consistent, unpaginated, "
            "cluster-scope, priority level exempt, group system:masters");
  EXPECT_NE(pods.fix.find("informer"), std::string::npos);
  EXPECT_NE(pods.fix.find("resourceVersion=0"), std::string::npos);
  EXPECT_NE(pods.fix.find("limit=500"), std::string::npos);
  EXPECT_NE(pods.fix.find("system:masters"), std::string::npos);
  // nodes: 3 expensive LISTs per 5 s = 1.2/s weighted, but 12 MB/s weighted.
  EXPECT_EQ(nodes.details["weighted_lists_per_second"], 1.2);
  EXPECT_EQ(nodes.details["weighted_bytes_per_second"], 12'000'000.0);
}

TEST(ListStormTest, SeverityIsTheStormsAndEvidenceSaysExempt) {
  Harness limited;
  limited.sim.Run(Bursts(AllPods(kAlice), 13, 5, 0, 30 * kSec), 30 * kSec);
  ASSERT_EQ(limited.sim.Of(StormState::kFiring).size(), 1u);
  const StormEvidence ev = limited.sim.Of(StormState::kFiring)[0].evidence;
  EXPECT_EQ(ev.severity, "critical");
  EXPECT_EQ(ev.details["exempt"], false);
  EXPECT_EQ(ev.details["priority_level"], "workload-low");
  EXPECT_EQ(ev.details["system_masters"], false);
  EXPECT_FALSE(ev.details.contains("groups"));

  // Most LISTs at workload-low, some exempt: the level shown is the common one, and any
  // exempt LIST shows in the evidence.
  RequestRecord exempt = AllPods(kAlice);
  exempt.response.priority_level = "exempt";
  std::vector<Event> events = Bursts(AllPods(kAlice), 12, 5, 0, 30 * kSec);
  Append(events, Bursts(exempt, 1, 5, 500 * kMs, 30 * kSec));
  Harness mixed;
  mixed.sim.Run(std::move(events), 30 * kSec);
  ASSERT_EQ(mixed.sim.Of(StormState::kFiring).size(), 1u);
  EXPECT_EQ(mixed.sim.Of(StormState::kFiring)[0].evidence.severity, "critical");
  EXPECT_EQ(mixed.sim.Of(StormState::kFiring)[0].evidence.details["exempt"], true);
  EXPECT_EQ(mixed.sim.Of(StormState::kFiring)[0].evidence.details["priority_level"],
            "workload-low");
}

// --- identities ---

TEST(ListStormTest, ReplicasOfOneServiceAccountAddUpOtherUsersDoNot) {
  // 7 expensive LISTs per 5 s each: 42 weighted per 15 s alone, 84 together.
  std::vector<Event> replicas = Bursts(AllPods(Poller("pod-1")), 7, 5, 0, 60 * kSec);
  Append(replicas, Bursts(AllPods(Poller("pod-2")), 7, 5, 2 * kSec, 60 * kSec));
  Harness same;
  same.sim.Run(std::move(replicas), 60 * kSec);
  ASSERT_EQ(same.sim.Of(StormState::kFiring).size(), 1u);
  EXPECT_EQ(same.sim.Of(StormState::kFiring)[0].evidence.details["lists_per_second"], 2.8);

  std::vector<Event> users = Bursts(AllPods(kAlice), 7, 5, 0, 60 * kSec);
  Append(users, Bursts(AllPods(User("bob", "kubectl/v1.28.7")), 7, 5, 2 * kSec, 60 * kSec));
  Harness different;
  different.sim.Run(std::move(users), 60 * kSec);
  EXPECT_TRUE(different.sim.transitions().empty());
}

TEST(ListStormTest, AllowListedIdentityIsIgnored) {
  ListStormConfig config;
  config.allow.users = {"system:serviceaccount:monitoring:*"};
  Harness run(config);
  run.sim.Run(Bursts(AllPods(Poller()), 40, 5, 0, 60 * kSec), 60 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
  EXPECT_EQ(run.det.Stats().observed, 0u);
  EXPECT_EQ(run.det.Stats().tracked, 0u);
}

TEST(ListStormTest, OnlyListsCount) {
  Harness run;
  std::vector<Event> events;
  for (const auto& [method, path] : std::vector<std::pair<std::string, std::string>>{
           {"GET", "/api/v1/namespaces/team-a/pods/p-1"},
           {"GET", "/api/v1/pods?watch=true"},
           {"POST", "/api/v1/namespaces/team-a/pods"},
           {"DELETE", "/api/v1/namespaces/team-a/pods"}}) {
    Append(events, sim::Every(Request(kAlice, method, path), kSec / 50, 0, 30 * kSec));
  }
  run.sim.Run(std::move(events), 30 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
  EXPECT_EQ(run.det.Stats().observed, 0u);
}

// --- healthy traffic stays quiet ---

TEST(ListStormTest, InformerInitialPaginatedListThenWatchIsQuiet) {
  // 10k pods: 20 pages of 500 (2 MiB each) in 2 s, then a WATCH; again after 5 minutes.
  Identity kcm = User("system:kube-controller-manager", "kube-controller-manager/v1.28.7");
  std::vector<Event> events;
  for (int64_t start : {10 * kSec, 310 * kSec}) {
    events.push_back({start, List(kcm, "/api/v1/pods?limit=500", 2 * kMiB)});
    for (int page = 1; page < 20; ++page) {
      events.push_back({start + page * 100 * kMs,
                        List(kcm, "/api/v1/pods?limit=500&continue=token" + std::to_string(page),
                             2 * kMiB)});
    }
    RequestRecord watch = Request(kcm, "GET", "/api/v1/pods?watch=true&resourceVersion=12345");
    events.push_back({start + 300 * kSec, watch});
  }
  Harness run;
  run.sim.Run(std::move(events), 700 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
  EXPECT_EQ(run.det.Stats().observed, 40u);
}

TEST(ListStormTest, KubectlGetEveryFewSecondsIsQuiet) {
  // `kubectl get pods -A` (chunked) every 3 s for 10 minutes, and `--chunk-size=0` every 2 s.
  std::vector<Event> events =
      sim::Every(List(kAlice, "/api/v1/pods?limit=500", 500'000), 3 * kSec, 0, 600 * kSec);
  Append(events, sim::Every(List(kAlice, "/api/v1/nodes", 500'000), 2 * kSec, 0, 600 * kSec));
  Harness run;
  run.sim.Run(std::move(events), 600 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
}

TEST(ListStormTest, ControllerManagerResyncBurstsAreQuiet) {
  // Three informer restarts 5 s apart (leader election flapping): each lists 40 resources
  // in 10 pages of 500 within 2 s: 30 LISTs of a resource in 15 s.
  Identity kcm = User("system:kube-controller-manager", "kube-controller-manager/v1.28.7");
  std::vector<Event> events;
  for (int64_t restart : {0, 5, 10}) {
    for (int res = 0; res < 40; ++res) {
      const std::string path = "/apis/example.com/v1/resource" + std::to_string(res);
      for (int page = 0; page < 10; ++page) {
        const std::string query =
            page == 0 ? "?limit=500" : "?limit=500&continue=t" + std::to_string(page);
        events.push_back({restart * kSec + (res * 10 + page) * 4 * kMs,
                          List(kcm, path + query, 1 * kMiB)});
      }
    }
  }
  Harness run;
  run.sim.Run(std::move(events), 120 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
  EXPECT_EQ(run.det.Stats().tracked, 40u);
}

// --- configuration and bounded state ---

TEST(ListStormTest, ThresholdsAreConfig) {
  ListStormConfig config;
  config.list_rate = 1;
  config.sustain_s = 4;
  config.resolve_s = 2;
  config.expensive_weight = 1;
  Harness run(config);
  // 1 expensive LIST/s for 6 s: fires once the key spans 4 s, calm windows from second 9.
  run.sim.Run(sim::Every(AllPods(kAlice), kSec, 0, 6 * kSec), 30 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  auto resolved = run.sim.Of(StormState::kResolved);
  ASSERT_EQ(firing.size(), 1u);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(firing[0].at_ns, 4 * kSec);
  EXPECT_EQ(resolved[0].at_ns, 8 * kSec);  // windows ending at 6 and 7 hold < 4 LISTs
}

TEST(ListStormTest, BadConfigIsClamped) {
  ListStormConfig bad;
  bad.list_rate = 0;
  bad.sustain_s = 0;
  bad.resolve_s = -3;
  bad.expensive_weight = 0.5;
  bad.max_keys = 0;
  ListStormDetector det(bad);
  EXPECT_EQ(det.config().list_rate, 5.0);
  EXPECT_EQ(det.config().sustain_s, 1);
  EXPECT_EQ(det.config().resolve_s, 1);
  EXPECT_EQ(det.config().expensive_weight, 1.0);
  EXPECT_EQ(det.config().max_keys, 1u);
}

TEST(ListStormTest, EvictionKeepsKeysBounded) {
  ListStormConfig config;
  config.max_keys = 1000;
  ListStormDetector det(config);
  for (int64_t i = 0; i < 100'000; ++i) {
    Identity who;
    who.user = "token:" + std::to_string(i);
    det.Observe(AllPods(who), i * kSec / 1000);
    if (i % 1000 == 999) det.Evaluate(i * kSec / 1000 + 1);
    ASSERT_LE(det.Stats().tracked, 1000u);
  }
  DetectorStats stats = det.Stats();
  EXPECT_EQ(stats.tracked, 1000u);
  // Each newcomer past the first 1,000 took a key's place or was refused; seen once each, as
  // often as the keys held, most were refused (the keys held turn over only after the
  // admission sketch halves its counts, every 10,000 sightings).
  EXPECT_EQ(stats.evictions + stats.refusals, 99'000u);
  EXPECT_GT(stats.refusals, 3 * stats.evictions) << stats.evictions;
  EXPECT_EQ(stats.observed, 100'000u);
}

TEST(ListStormTest, AStormGetsInAmongManyAlikeClients) {
  // A table of 20 keys, 100 quiet users (one LIST of pods every 10 s each): the table is full
  // and refuses most newcomers. bob's storm from 30 s is seen more often than any key held
  // within a few LISTs: it gets in and fires; no quiet user does.
  ListStormConfig config;
  config.max_keys = 20;
  std::vector<Event> events;
  for (int i = 0; i < 100; ++i) {
    const RequestRecord quiet = AllPods(User("quiet-" + std::to_string(i), "kubectl/v1.28.7"));
    for (int64_t t = i * 100 * kMs; t < 120 * kSec; t += 10 * kSec) events.push_back({t, quiet});
  }
  Append(events, Bursts(AllPods(User("bob", "kubectl/v1.28.7")), 13, 5, 30 * kSec, 90 * kSec));
  Harness run(config);
  run.sim.Run(std::move(events), 150 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].evidence.identity.user, "bob");
  EXPECT_LE(firing[0].at_ns, 50 * kSec);
  EXPECT_EQ(run.sim.Of(StormState::kResolved).size(), 1u);
  const DetectorStats stats = run.det.Stats();
  EXPECT_GT(stats.refusals, 500u) << stats.evictions;  // of 1,200 quiet LISTs
  EXPECT_EQ(stats.tracked, 20u);
}

TEST(ListStormTest, EvictedFiringStormResolvesOnce) {
  ListStormConfig config;
  config.max_keys = 2;
  std::vector<Event> events = Bursts(AllPods(kAlice), 13, 5, 0, 20 * kSec);
  // Three other keys push the firing one out: touched, it gets a second chance at the first
  // eviction (the first newcomer goes), and the third newcomer takes its place.
  events.push_back({21 * kSec, AllPods(User("bob", "kubectl/v1.28.7"))});
  events.push_back({21 * kSec + 1, List(kAlice, "/api/v1/nodes")});
  events.push_back({21 * kSec + 2, List(kAlice, "/api/v1/namespaces")});
  Harness run(config);
  run.sim.Run(std::move(events), 120 * kSec);
  auto resolved = run.sim.Of(StormState::kResolved);
  ASSERT_EQ(run.sim.Of(StormState::kFiring).size(), 1u);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].at_ns, 21 * kSec + 2);
  EXPECT_EQ(resolved[0].evidence.identity.user, "alice");
  EXPECT_EQ(resolved[0].evidence.resource, "pods");
}

}  // namespace
}  // namespace stormwatch
