// Update-loop detector on an injected clock: both sides of every threshold, hysteresis,
// healthy traffic that must stay quiet, evidence, and bounded state.
#include "agent/analysis/update_loop_detector.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/unit/detector_sim.h"

namespace stormwatch {
namespace {

using sim::Append;
using sim::Event;
using sim::kMs;
using sim::kSec;
using sim::Sa;
using sim::Stream;
using Harness = sim::Harness<UpdateLoopDetector>;

const Identity kOperator = Sa("data", "datajob-operator", "datajob-operator-7d9f8-x2x4q");

RequestRecord Write(const Identity& who, const std::string& ns, const std::string& name,
                    int status = 200, const std::string& method = "PUT",
                    const std::string& group = "batch.company.com",
                    const std::string& resource = "datajobs") {
  return sim::Request(who, method,
                      "/apis/" + group + "/v1/namespaces/" + ns + "/" + resource + "/" + name,
                      status);
}

std::string Name(const char* prefix, int i) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%s-%03d", prefix, i);
  return buf;
}

// --- object rule: >= 5/s for 10 s ---

TEST(UpdateLoopTest, BelowObjectRateForLongNeverFires) {
  Harness run;
  run.sim.Run(Stream(Write(kOperator, "team-a", "job-1"), 9, 2, 0, 30 * kSec), 60 * kSec);  // 4.5/s
  EXPECT_TRUE(run.sim.transitions().empty());
}

TEST(UpdateLoopTest, AboveObjectRateTooShortNeverFires) {
  Harness run;
  run.sim.Run(Stream(Write(kOperator, "team-a", "job-1"), 11, 2, 0, 9 * kSec), 60 * kSec);  // 5.5/s
  EXPECT_TRUE(run.sim.transitions().empty());
}

TEST(UpdateLoopTest, AboveObjectRateLongEnoughFiresOnce) {
  Harness run;
  run.sim.Run(Stream(Write(kOperator, "team-a", "job-1"), 11, 2, 0, 11 * kSec), 60 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  const UpdateLoopTransition& f = firing[0];
  EXPECT_EQ(f.at_ns, 10 * kSec);  // ten complete seconds at >= 5 writes
  EXPECT_EQ(f.evidence.storm, "update_loop");
  EXPECT_EQ(f.evidence.rule, "object");
  EXPECT_EQ(f.evidence.identity.user, "system:serviceaccount:data:datajob-operator");
  EXPECT_EQ(f.evidence.identity.sa_namespace, "data");
  EXPECT_EQ(f.evidence.identity.sa_name, "datajob-operator");
  EXPECT_EQ(f.evidence.identity.pod_name, "datajob-operator-7d9f8-x2x4q");
  EXPECT_EQ(f.evidence.identity.user_agent, "datajob-operator/v1.0");
  EXPECT_EQ(f.evidence.api_group, "batch.company.com");
  EXPECT_EQ(f.evidence.resource, "datajobs");
  EXPECT_EQ(f.evidence.namespace_, "team-a");
  ASSERT_EQ(f.evidence.top_objects.size(), 1u);
  EXPECT_EQ(f.evidence.top_objects[0], (TopObject{"team-a", "job-1", 5.5}));
  EXPECT_DOUBLE_EQ(f.evidence.resource_writes_per_second, 5.5);
  EXPECT_EQ(f.evidence.since_ns, 0);
  EXPECT_EQ(f.evidence.first_seen_ns, 0);
  EXPECT_EQ(f.evidence.fired_ns, 10 * kSec);
  EXPECT_NE(f.evidence.fix.find("GenerationChangedPredicate"), std::string::npos);
  EXPECT_NE(f.evidence.fix.find("/status"), std::string::npos);
  // ...and it ends exactly once.
  EXPECT_EQ(run.sim.Of(StormState::kResolved).size(), 1u);
}

TEST(UpdateLoopTest, ObjectThresholdIsInclusive) {
  Harness run;
  run.sim.Run(Stream(Write(kOperator, "team-a", "job-1"), 5, 1, 0, 10 * kSec), 30 * kSec);  // 5.0/s
  EXPECT_EQ(run.sim.Of(StormState::kFiring).size(), 1u);
}

// --- resource rule: >= 100/s for 3 s ---

std::vector<Event> Spread(const Identity& who, int64_t per_second, int objects, int64_t start,
                          int64_t end) {
  std::vector<Event> out;
  for (int64_t k = 0;; ++k) {
    int64_t t = start + k * kSec / per_second;
    if (t >= end) break;
    out.push_back({t, Write(who, "team-a", Name("job", static_cast<int>(k % objects)))});
  }
  return out;
}

TEST(UpdateLoopTest, ResourceRateOverManyObjectsFires) {
  Harness run;
  run.sim.Run(Spread(kOperator, 101, 200, 0, 6 * kSec), 30 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].at_ns, 3 * kSec);
  EXPECT_EQ(firing[0].evidence.rule, "resource");
  EXPECT_DOUBLE_EQ(firing[0].evidence.resource_writes_per_second, 101.0);
  ASSERT_EQ(firing[0].evidence.top_objects.size(), 5u);
  // 303 writes round-robin over 200 objects in 3 s: job-000..job-102 got 2, the rest 1.
  EXPECT_EQ(firing[0].evidence.top_objects[0].name, "job-000");
  EXPECT_DOUBLE_EQ(firing[0].evidence.top_objects[0].writes_per_second, 2.0 / 3);
  EXPECT_EQ(firing[0].evidence.top_objects[4].name, "job-004");
  EXPECT_DOUBLE_EQ(firing[0].evidence.top_objects[4].writes_per_second, 2.0 / 3);
  EXPECT_EQ(run.sim.Of(StormState::kResolved).size(), 1u);
}

TEST(UpdateLoopTest, ResourceRateBelowThresholdNeverFires) {
  Harness run;
  run.sim.Run(Spread(kOperator, 90, 200, 0, 60 * kSec), 90 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
}

TEST(UpdateLoopTest, ResourceRateTooShortNeverFires) {
  Harness run;
  run.sim.Run(Spread(kOperator, 150, 200, 0, 2 * kSec), 30 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
}

// --- lifecycle ---

TEST(UpdateLoopTest, ResolvesAfterResolveWindowAndNotBefore) {
  Harness run;
  run.sim.Run(Stream(Write(kOperator, "team-a", "job-1"), 10, 1, 0, 20 * kSec), 60 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  auto resolved = run.sim.Of(StormState::kResolved);
  ASSERT_EQ(firing.size(), 1u);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(firing[0].at_ns, 10 * kSec);
  // Last writes in second 19; seconds 20..29 calm; decided once second 29 is complete.
  EXPECT_EQ(resolved[0].at_ns, 30 * kSec);
  EXPECT_EQ(run.sim.ActiveAt(29), 1u);
  EXPECT_EQ(run.sim.ActiveAt(30), 0u);
  // Resolved repeats what fired, so the alert's labels and text match.
  EXPECT_EQ(resolved[0].evidence.identity.user, firing[0].evidence.identity.user);
  EXPECT_EQ(resolved[0].evidence.top_objects, firing[0].evidence.top_objects);
  EXPECT_TRUE(run.det.Active().empty());
}

TEST(UpdateLoopTest, ShortLullsDoNotFlap) {
  // 12 s steady at 10/s so it fires, then 10/s but silent 2 s out of every 6: under the
  // threshold now and then, never for the 10 s resolve window, until it stops at 70 s.
  RequestRecord w = Write(kOperator, "team-a", "job-1");
  std::vector<Event> events = Stream(w, 10, 1, 0, 12 * kSec);
  for (int64_t block = 0; block < 10; ++block) {
    int64_t start = 12 * kSec + block * 6 * kSec;
    Append(events, Stream(w, 10, 1, start, start + 4 * kSec));
  }
  Harness run;
  run.sim.Run(std::move(events), 120 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  auto resolved = run.sim.Of(StormState::kResolved);
  ASSERT_EQ(firing.size(), 1u);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(firing[0].at_ns, 10 * kSec);
  EXPECT_EQ(resolved[0].at_ns, 80 * kSec);
}

TEST(UpdateLoopTest, ActiveReportsLiveEvidence) {
  UpdateLoopDetector det;
  auto events = Stream(Write(kOperator, "team-a", "job-1"), 8, 1, 0, 15 * kSec);
  int64_t next = kSec;
  for (const Event& e : events) {
    for (; next <= e.t; next += kSec) det.Evaluate(next);
    det.Observe(e.r, e.t);
  }
  det.Evaluate(15 * kSec);
  auto active = det.Active();
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].identity.user, kOperator.user);
  EXPECT_DOUBLE_EQ(active[0].resource_writes_per_second, 8.0);
  EXPECT_EQ(active[0].fired_ns, 10 * kSec);
}

// --- healthy traffic stays quiet ---

TEST(UpdateLoopTest, KubeletHeartbeatsAreQuiet) {
  // 1000 kubelets, each renewing its own Lease every 10 s (and patching its node status),
  // phases spread over the period.
  std::vector<Event> events;
  for (int n = 0; n < 1000; ++n) {
    Identity node;
    node.kind = Identity::Kind::kUser;
    node.user = Name("system:node:node", n);
    node.user_agent = "kubelet/v1.28.7 (linux/amd64) kubernetes/c8dcb00";
    int64_t phase = n * 10 * kSec / 1000;
    RequestRecord lease = Write(node, "kube-node-lease", Name("node", n), 200, "PUT",
                                "coordination.k8s.io", "leases");
    RequestRecord status = Write(node, "", Name("node", n), 200, "PATCH", "", "nodes");
    status.path = "/api/v1/nodes/" + Name("node", n) + "/status";
    status.info = ParseRequestInfo("PATCH", status.path);
    Append(events, Stream(lease, 1, 10, phase, 120 * kSec));
    Append(events, Stream(status, 1, 10, phase + kSec / 2, 120 * kSec));
  }
  const size_t writes = events.size();
  Harness run;
  run.sim.Run(std::move(events), 150 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
  EXPECT_GT(writes, 23'000u);
  EXPECT_EQ(run.det.Stats().writes_observed, writes);
}

TEST(UpdateLoopTest, ControllerManagerResyncBurstIsQuiet) {
  Identity kcm;
  kcm.kind = Identity::Kind::kUser;
  kcm.user = "system:kube-controller-manager";
  kcm.user_agent =
      "kube-controller-manager/v1.28.7 (linux/amd64) "
      "kubernetes/c8dcb00/system:serviceaccount:kube-system:deployment-controller";
  std::vector<Event> events;
  for (int i = 0; i < 500; ++i) {
    events.push_back({30 * kSec + i * 2 * kSec / 500,
                      Write(kcm, "team-a", Name("deploy", i), 200, "PUT", "apps", "deployments")});
  }
  Harness run;
  run.sim.Run(std::move(events), 90 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
}

TEST(UpdateLoopTest, ReadsCreatesDeletesAreIgnored) {
  UpdateLoopDetector det;
  for (int64_t i = 0; i < 2000; ++i) {
    int64_t t = i * kSec / 100;
    RequestRecord get = Write(kOperator, "team-a", "job-1", 200, "GET");
    RequestRecord del = Write(kOperator, "team-a", "job-1", 200, "DELETE");
    RequestRecord create = Write(kOperator, "team-a", "", 201, "POST");
    create.path = "/apis/batch.company.com/v1/namespaces/team-a/datajobs";
    create.info = ParseRequestInfo("POST", create.path);
    RequestRecord healthz;
    healthz.info = ParseRequestInfo("PUT", "/healthz");
    for (const RequestRecord* r : {&get, &del, &create, &healthz}) det.Observe(*r, t);
  }
  EXPECT_TRUE(det.Evaluate(30 * kSec).empty());
  EXPECT_EQ(det.Stats().writes_observed, 0u);
}

// --- evidence ---

TEST(UpdateLoopTest, TopObjectsRatesAndCodes) {
  std::vector<Event> events;
  const std::pair<const char*, int> rates[] = {{"a", 12}, {"b", 9}, {"c", 7}, {"d", 6},
                                               {"e", 5},  {"f", 2}, {"g", 1}};
  for (const auto& [name, rate] : rates) {
    auto stream = Stream(Write(kOperator, "team-a", name), rate, 1, 0, 15 * kSec);
    if (std::string(name) == "a") {
      for (size_t k = 0; k < stream.size(); ++k) {
        if (k % 4 == 3) stream[k].r.status = 409;  // every 4th write of "a" conflicts
      }
    }
    Append(events, std::move(stream));
  }
  // A write whose response was never seen.
  events.push_back({5 * kSec + 1, Write(kOperator, "team-a", "g", 0)});
  Harness run;
  run.sim.Run(std::move(events), 40 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  const UpdateLoopEvidence& ev = firing[0].evidence;
  EXPECT_EQ(firing[0].at_ns, 10 * kSec);
  EXPECT_EQ(ev.rule, "object");
  std::vector<TopObject> want = {{"team-a", "a", 12.0},
                                 {"team-a", "b", 9.0},
                                 {"team-a", "c", 7.0},
                                 {"team-a", "d", 6.0},
                                 {"team-a", "e", 5.0}};
  EXPECT_EQ(ev.top_objects, want);
  EXPECT_DOUBLE_EQ(ev.resource_writes_per_second, (120 + 90 + 70 + 60 + 50 + 20 + 10 + 1) / 10.0);
  std::vector<CodeCount> codes = {{0, 1}, {200, 390}, {409, 30}};
  EXPECT_EQ(ev.codes, codes);
  EXPECT_EQ(ev.namespace_, "team-a");
}

TEST(UpdateLoopTest, ConflictLoopCountsToo) {
  Harness run;
  RequestRecord conflict = Write(kOperator, "team-a", "job-1", 409);
  run.sim.Run(Stream(conflict, 20, 1, 0, 12 * kSec), 30 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].evidence.codes, (std::vector<CodeCount>{{409, 200}}));
}

TEST(UpdateLoopTest, PatchAndApplyCount) {
  // Server-side apply is a PATCH: a loop of applies is still a loop.
  RequestRecord apply = Write(kOperator, "team-a", "job-1", 200, "PATCH");
  apply.content_type = "application/apply-patch+yaml";
  Harness run;
  run.sim.Run(Stream(apply, 6, 1, 0, 12 * kSec), 30 * kSec);
  EXPECT_EQ(run.sim.Of(StormState::kFiring).size(), 1u);
}

TEST(UpdateLoopTest, ObjectsInSeveralNamespacesLeaveNamespaceEmpty) {
  std::vector<Event> events = Stream(Write(kOperator, "team-a", "x"), 6, 1, 0, 12 * kSec);
  Append(events, Stream(Write(kOperator, "team-b", "y"), 6, 1, 0, 12 * kSec));
  Harness run;
  run.sim.Run(std::move(events), 30 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].evidence.namespace_, "");
  ASSERT_EQ(firing[0].evidence.top_objects.size(), 2u);
  EXPECT_EQ(firing[0].evidence.top_objects[0].namespace_, "team-a");
  EXPECT_EQ(firing[0].evidence.top_objects[1].namespace_, "team-b");
}

// --- identity separation ---

TEST(UpdateLoopTest, TwoIdentitiesOnOneObjectAreSeparateStorms) {
  Identity other = Sa("ops", "janitor");
  std::vector<Event> events = Stream(Write(kOperator, "team-a", "job-1"), 6, 1, 0, 15 * kSec);
  Append(events, Stream(Write(other, "team-a", "job-1"), 7, 1, 0, 15 * kSec));
  Harness run;
  run.sim.Run(std::move(events), 60 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 2u);
  std::vector<std::string> users = {firing[0].evidence.identity.user,
                                    firing[1].evidence.identity.user};
  std::sort(users.begin(), users.end());
  EXPECT_EQ(users, (std::vector<std::string>{"system:serviceaccount:data:datajob-operator",
                                             "system:serviceaccount:ops:janitor"}));
  for (const auto& f : firing) {
    double want = f.evidence.identity.user == other.user ? 7.0 : 6.0;
    EXPECT_DOUBLE_EQ(f.evidence.top_objects.at(0).writes_per_second, want);
  }
  EXPECT_EQ(run.sim.Of(StormState::kResolved).size(), 2u);
}

TEST(UpdateLoopTest, IdentitiesAreNotSummed) {
  // 3/s each from two identities: 6/s on the object, but no single client loops.
  std::vector<Event> events = Stream(Write(kOperator, "team-a", "job-1"), 3, 1, 0, 30 * kSec);
  Append(events, Stream(Write(Sa("ops", "janitor"), "team-a", "job-1"), 3, 1, 0, 30 * kSec));
  Harness run;
  run.sim.Run(std::move(events), 60 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
}

TEST(UpdateLoopTest, PodsOfOneServiceAccountAreSeparate) {
  std::vector<Event> events =
      Stream(Write(Sa("data", "op", "op-1"), "team-a", "job-1"), 3, 1, 0, 30 * kSec);
  Append(events, Stream(Write(Sa("data", "op", "op-2"), "team-a", "job-1"), 3, 1, 0, 30 * kSec));
  Harness run;
  run.sim.Run(std::move(events), 60 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
}

// --- configuration ---

TEST(UpdateLoopTest, ThresholdsAreConfig) {
  UpdateLoopConfig config;
  config.object_rate = 2;
  config.object_sustain_s = 3;
  config.resolve_s = 2;
  EXPECT_TRUE(config.Problems().empty());
  Harness run(config);
  run.sim.Run(Stream(Write(kOperator, "team-a", "job-1"), 2, 1, 0, 4 * kSec), 20 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  auto resolved = run.sim.Of(StormState::kResolved);
  ASSERT_EQ(firing.size(), 1u);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(firing[0].at_ns, 3 * kSec);
  EXPECT_EQ(resolved[0].at_ns, 6 * kSec);
}

TEST(UpdateLoopTest, BadConfigIsReportedAndClamped) {
  UpdateLoopConfig bad;
  bad.object_rate = 0;
  bad.resolve_s = 0;
  bad.max_objects = 0;
  auto problems = bad.Problems();
  EXPECT_EQ(problems.size(), 3u);
  UpdateLoopDetector det(bad);
  EXPECT_EQ(det.config().object_rate, 5.0);
  EXPECT_EQ(det.config().resolve_s, 1);
  EXPECT_EQ(det.config().max_objects, 1u);
  det.Observe(Write(kOperator, "team-a", "job-1"), 0);
  EXPECT_TRUE(det.Evaluate(5 * kSec).empty());
}

// --- bounded state ---

TEST(UpdateLoopTest, EvictionKeepsObjectsBounded) {
  UpdateLoopConfig config;
  config.max_objects = 10'000;
  UpdateLoopDetector det(config);
  RequestRecord r = Write(kOperator, "team-a", "x");
  const int64_t n = 1'000'000;
  for (int64_t i = 0; i < n; ++i) {
    r.info.name = "obj-" + std::to_string(i);
    int64_t t = i * kSec / 5000;  // 5000 writes/s over 200 s
    det.Observe(r, t);
    if (i % 5000 == 4999) det.Evaluate(t + 1);
    ASSERT_LE(det.Stats().tracked_objects, config.max_objects);
  }
  UpdateLoopStats stats = det.Stats();
  EXPECT_EQ(stats.tracked_objects, config.max_objects);
  // Alike newcomers, seen once each: most refused (see ListStormTest.EvictionKeepsKeysBounded).
  EXPECT_EQ(stats.object_evictions + stats.object_refusals, static_cast<uint64_t>(n) - config.max_objects);
  EXPECT_GT(stats.object_refusals, 3 * stats.object_evictions) << stats.object_evictions;
  EXPECT_EQ(stats.writes_observed, static_cast<uint64_t>(n));
  EXPECT_EQ(stats.tracked_resources, 1u);
}

TEST(UpdateLoopTest, EvictionKeepsIdentitiesBounded) {
  UpdateLoopConfig config;
  config.max_resources = 1000;
  config.max_objects = 2000;
  UpdateLoopDetector det(config);
  for (int64_t i = 0; i < 100'000; ++i) {
    Identity who;
    who.user = "token:" + std::to_string(i);
    det.Observe(Write(who, "team-a", "job-1"), i * kSec / 1000);
  }
  UpdateLoopStats stats = det.Stats();
  EXPECT_EQ(stats.tracked_resources, 1000u);
  EXPECT_EQ(stats.resource_evictions + stats.resource_refusals, 99'000u);
  EXPECT_GT(stats.resource_refusals, 3 * stats.resource_evictions) << stats.resource_evictions;
  EXPECT_EQ(stats.tracked_objects, 2000u);
}

TEST(UpdateLoopTest, ALoopGetsInAmongManyAlikeWriters) {
  // Tables of 20 clients and 40 objects, 100 quiet operators (one write of their object every
  // 10 s each): the tables are full and refuse most newcomers. A loop starting at 30 s is seen
  // more often than any key held within a few writes: it gets in and fires; no quiet one does.
  UpdateLoopConfig config;
  config.max_resources = 20;
  config.max_objects = 40;
  std::vector<Event> events;
  for (int i = 0; i < 100; ++i) {
    const RequestRecord quiet = Write(Sa("x", Name("op", i)), "team-b", Name("cfg", i));
    for (int64_t t = i * 100 * kMs; t < 90 * kSec; t += 10 * kSec) events.push_back({t, quiet});
  }
  Append(events, Stream(Write(kOperator, "team-a", "job-1"), 11, 2, 30 * kSec, 60 * kSec));
  Harness run(config);
  run.sim.Run(std::move(events), 120 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].evidence.identity.user, kOperator.user);
  ASSERT_EQ(firing[0].evidence.top_objects.size(), 1u);
  EXPECT_EQ(firing[0].evidence.top_objects[0].name, "job-1");
  EXPECT_LE(firing[0].at_ns, 42 * kSec);  // ten seconds of the loop, give or take its admission
  EXPECT_EQ(run.sim.Of(StormState::kResolved).size(), 1u);
  const UpdateLoopStats stats = run.det.Stats();
  EXPECT_GT(stats.resource_refusals, 300u) << stats.resource_evictions;  // of 900 quiet writes
  EXPECT_EQ(stats.tracked_resources, 20u);
}

TEST(UpdateLoopTest, EvictedFiringStormStillResolvesOnce) {
  UpdateLoopConfig config;
  config.max_resources = 2;
  Harness run(config);
  std::vector<Event> events = Stream(Write(kOperator, "team-a", "job-1"), 10, 1, 0, 12 * kSec);
  // Three other clients show up while the storm is still firing and push it out: touched, it
  // gets a second chance at the first eviction (the first newcomer goes), and the third
  // newcomer takes its place.
  events.push_back({13 * kSec, Write(Sa("x", "one"), "team-a", "job-2")});
  events.push_back({13 * kSec + 1, Write(Sa("x", "two"), "team-a", "job-3")});
  events.push_back({13 * kSec + 2, Write(Sa("x", "three"), "team-a", "job-4")});
  run.sim.Run(std::move(events), 60 * kSec);
  auto resolved = run.sim.Of(StormState::kResolved);
  ASSERT_EQ(run.sim.Of(StormState::kFiring).size(), 1u);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].at_ns, 13 * kSec + 2);
  EXPECT_EQ(resolved[0].evidence.identity.user, kOperator.user);
}

TEST(UpdateLoopTest, LateWritesOutsideTheRingAreCounted) {
  UpdateLoopDetector det;
  det.Observe(Write(kOperator, "team-a", "job-1"), 100 * kSec);
  det.Observe(Write(kOperator, "team-a", "job-1"), 50 * kSec);  // far older than any bucket
  det.Observe(Write(kOperator, "team-a", "job-1"), 99 * kSec);  // still in the ring
  EXPECT_EQ(det.Stats().late_dropped, 1u);
  EXPECT_EQ(det.Stats().writes_observed, 3u);
}

}  // namespace
}  // namespace stormwatch

namespace stormwatch {
namespace {

// STORMS.md §1 "metadata-only": the write responses' metadata.generation never moves.
std::vector<Event> GenerationStream(int64_t first_generation, bool bump_each_write) {
  std::vector<Event> out;
  for (int k = 0; k < 60; ++k) {  // 6 writes/s for 10 s
    RequestRecord r = Write(kOperator, "team-a", "job-1");
    r.response.object_seen = true;
    r.response.generation = bump_each_write ? first_generation + k : first_generation;
    out.push_back({k * kSec / 6, r});
  }
  return out;
}

TEST(UpdateLoopTest, GenerationThatNeverMovesIsMetadataOnly) {
  Harness run;
  run.sim.Run(GenerationStream(7, false), 12 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].evidence.metadata_only, "yes");
  EXPECT_EQ(firing[0].evidence.top_objects[0].generation, 7);
  StormEvidence e = ToStormEvidence(firing[0].evidence);
  EXPECT_EQ(e.details["metadata_only"], "yes");
  EXPECT_EQ(e.details["top_objects"][0]["generation_changed"], false);
  EXPECT_NE(e.summary.find("generation never changes"), std::string::npos) << e.summary;
}

TEST(UpdateLoopTest, GenerationThatMovesIsNotMetadataOnly) {
  Harness run;
  run.sim.Run(GenerationStream(1, true), 12 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].evidence.metadata_only, "no");
  EXPECT_EQ(firing[0].evidence.top_objects[0].generation_changes, 59u);
}

TEST(UpdateLoopTest, WithoutResponseBodiesMetadataOnlyIsUnknown) {
  Harness run;
  run.sim.Run(Stream(Write(kOperator, "team-a", "job-1"), 11, 2, 0, 11 * kSec), 12 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].evidence.metadata_only, "unknown");
}

}  // namespace
}  // namespace stormwatch
