// Exempt-client detector on an injected clock: who is reported (reasons, allow list, unknown
// priority levels), the active window, escalation on both sides of rate and sustain,
// hysteresis, evidence and bounded state.
#include "agent/analysis/exempt_client_detector.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/unit/detector_sim.h"

namespace stormwatch {
namespace {

using sim::Event;
using sim::kMs;
using sim::kSec;
using sim::PerSecond;

Identity CertUser(const std::string& name, bool masters, const std::string& user_agent) {
  Identity id = sim::User(name, user_agent);
  if (masters) {
    id.groups = {"system:masters"};
    id.system_masters = true;
  }
  return id;
}

const Identity kDeployer = CertUser("ci-deployer", true, "helm/v3.14.0");
const Identity kReporter = [] {
  Identity id;
  id.kind = Identity::Kind::kServiceAccount;
  id.user = "system:serviceaccount:monitoring:pod-reporter";
  id.sa_namespace = "monitoring";
  id.sa_name = "pod-reporter";
  id.user_agent = "OpenAPI-Generator/1.0.0/python";
  id.component = "OpenAPI-Generator";
  return id;
}();

RequestRecord Req(const Identity& who, const std::string& priority_level,
                  const std::string& method = "GET", const std::string& path = "/api/v1/pods") {
  RequestRecord r = sim::Request(who, method, path);
  r.response.priority_level = priority_level;
  r.response.flow_schema = priority_level == "exempt" ? "exempt" : "service-accounts";
  return r;
}

using Harness = sim::Harness<ExemptClientDetector>;

// --- the report (gauge) ---

TEST(ExemptClientTest, ReportsExemptClientsWithReasonRateAndLastSeen) {
  std::vector<Event> events = PerSecond(Req(kDeployer, "exempt"), 2, 0, 30 * kSec);
  sim::Append(events, PerSecond(Req(kReporter, "exempt"), 1, 10 * kSec, 40 * kSec));
  // A system:masters client whose responses' priority level was not mapped to a name.
  sim::Append(events, PerSecond(Req(CertUser("carol", true, "kubectl/v1.28.7"), ""), 1,
                                35 * kSec, 38 * kSec));
  // Not exempt: an APF-limited user, and an unknown level from a client not known as exempt.
  sim::Append(events, PerSecond(Req(CertUser("alice", false, "kubectl/v1.28.7"), "workload-low"),
                                5, 0, 40 * kSec));
  sim::Append(events,
              PerSecond(Req(CertUser("bob", false, "kubectl/v1.28.7"), ""), 5, 0, 40 * kSec));
  Harness run;
  run.sim.Run(std::move(events), 40 * kSec);

  const std::vector<ExemptClient> want = {
      // 60 requests over seconds 0..39.
      {"ci-deployer", "priority_level_exempt,system_masters", 1.5, 29'500 * kMs, 60, 60, 0},
      // 30 requests over 10..39.
      {"system:serviceaccount:monitoring:pod-reporter", "priority_level_exempt", 1.0, 39 * kSec,
       30, 0, 10 * kSec},
      // 3 requests over 35..39: averaged since first seen.
      {"carol", "system_masters", 0.6, 37 * kSec, 0, 3, 35 * kSec},
  };
  EXPECT_EQ(run.det.ExemptClients(40 * kSec), want);
  EXPECT_TRUE(run.sim.transitions().empty());
  EXPECT_EQ(run.det.Stats().observed, 60u + 30 + 3);
}

TEST(ExemptClientTest, ControlPlaneIdentitiesAreAllowedByDefault) {
  std::vector<Event> events;
  for (const char* user : {"system:apiserver", "system:kube-controller-manager",
                           "system:kube-scheduler", "system:serviceaccount:kube-system:job-controller",
                           "system:node:node-1"}) {
    sim::Append(events,
                PerSecond(Req(CertUser(user, true, "kube/v1.28.7"), "exempt"), 100, 0, 30 * kSec));
  }
  Harness run;
  run.sim.Run(std::move(events), 40 * kSec);
  EXPECT_TRUE(run.det.ExemptClients(30 * kSec).empty());
  EXPECT_TRUE(run.sim.transitions().empty());
  EXPECT_EQ(run.det.Stats().observed, 0u);
}

TEST(ExemptClientTest, ActiveWindowBothSides) {
  Harness run;
  run.sim.Run(PerSecond(Req(kReporter, "exempt"), 1, 10 * kSec, 11 * kSec), 11 * kSec);
  ASSERT_EQ(run.det.ExemptClients(70 * kSec).size(), 1u);  // last seen 10 s: 60 s ago
  EXPECT_EQ(run.det.ExemptClients(70 * kSec)[0].requests_per_second, 1.0 / 60);
  EXPECT_TRUE(run.det.ExemptClients(70 * kSec + 1).empty());
  // Evaluate forgets it once it is out of the window.
  run.sim.EvaluateUntil(70 * kSec);
  EXPECT_EQ(run.det.Stats().tracked, 1u);
  run.sim.EvaluateUntil(71 * kSec);
  EXPECT_EQ(run.det.Stats().tracked, 0u);
}

TEST(ExemptClientTest, UnknownLevelCountsOnlyForKnownExemptClients) {
  ExemptClientDetector det;
  det.Observe(Req(kReporter, ""), 1 * kSec);              // not known yet: ignored
  det.Observe(Req(kReporter, "exempt"), 2 * kSec);        // now known
  det.Observe(Req(kReporter, ""), 3 * kSec);              // counted
  det.Observe(Req(kReporter, "workload-low"), 4 * kSec);  // another level: not exempt
  EXPECT_EQ(det.Stats().observed, 2u);
  auto clients = det.ExemptClients(10 * kSec);
  ASSERT_EQ(clients.size(), 1u);
  EXPECT_EQ(clients[0].last_seen_ns, 3 * kSec);
  EXPECT_EQ(clients[0].requests_per_second, 2.0 / 8);  // first seen in second 2
}

// --- escalation: >= 20 requests/s in each of 10 consecutive seconds ---

TEST(ExemptClientTest, EscalatesAtRateForSustainAndResolvesAfterCalm) {
  // 20/s for 20 s, then 10/s: calm seconds 20..49.
  std::vector<Event> events = PerSecond(Req(kDeployer, "exempt"), 20, 0, 20 * kSec);
  sim::Append(events, PerSecond(Req(kDeployer, "exempt"), 10, 20 * kSec, 100 * kSec));
  Harness run;
  run.sim.Run(std::move(events), 100 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  auto resolved = run.sim.Of(StormState::kResolved);
  ASSERT_EQ(firing.size(), 1u);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(firing[0].at_ns, 10 * kSec);
  EXPECT_EQ(firing[0].evidence.since_ns, 0);
  EXPECT_EQ(firing[0].evidence.severity, "warning");
  EXPECT_EQ(resolved[0].at_ns, 50 * kSec);
  EXPECT_EQ(run.sim.ActiveAt(49), 1u);
  EXPECT_EQ(run.sim.ActiveAt(50), 0u);
  EXPECT_EQ(resolved[0].evidence.details, firing[0].evidence.details);
  // Still reported as an exempt client after the storm.
  EXPECT_EQ(run.det.ExemptClients(100 * kSec).size(), 1u);
}

TEST(ExemptClientTest, BelowRateNeverEscalates) {
  Harness run;
  run.sim.Run(PerSecond(Req(kDeployer, "exempt"), 19, 0, 120 * kSec), 120 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
  EXPECT_EQ(run.det.ExemptClients(120 * kSec).at(0).requests_per_second, 19.0);
}

TEST(ExemptClientTest, TooShortNeverEscalates) {
  Harness run;
  run.sim.Run(PerSecond(Req(kDeployer, "exempt"), 50, 0, 9 * kSec), 60 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
}

TEST(ExemptClientTest, OneSlowSecondRestartsTheSustainRun) {
  std::vector<Event> events = PerSecond(Req(kDeployer, "exempt"), 25, 0, 5 * kSec);
  sim::Append(events, PerSecond(Req(kDeployer, "exempt"), 19, 5 * kSec, 6 * kSec));
  sim::Append(events, PerSecond(Req(kDeployer, "exempt"), 25, 6 * kSec, 16 * kSec));
  Harness run;
  run.sim.Run(std::move(events), 20 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].at_ns, 16 * kSec);  // seconds 6..15
  EXPECT_EQ(firing[0].evidence.since_ns, 6 * kSec);
}

TEST(ExemptClientTest, ShortLullDoesNotFlap) {
  // 20/s for 20 s, nothing for 25 s, 20/s again until 60 s: calm 20..44 is under 30 s.
  std::vector<Event> events = PerSecond(Req(kDeployer, "exempt"), 20, 0, 20 * kSec);
  sim::Append(events, PerSecond(Req(kDeployer, "exempt"), 20, 45 * kSec, 60 * kSec));
  Harness run;
  run.sim.Run(std::move(events), 120 * kSec);
  auto resolved = run.sim.Of(StormState::kResolved);
  ASSERT_EQ(run.sim.Of(StormState::kFiring).size(), 1u);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].at_ns, 90 * kSec);
}

TEST(ExemptClientTest, NonExemptClientsNeverEscalate) {
  Harness run;
  run.sim.Run(PerSecond(Req(kReporter, "workload-high"), 100, 0, 60 * kSec), 60 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
  EXPECT_TRUE(run.det.ExemptClients(60 * kSec).empty());
  EXPECT_EQ(run.det.Stats().tracked, 0u);
}

// --- evidence ---

TEST(ExemptClientTest, EscalationEvidence) {
  // Per second: 12 LISTs of pods, 6 GETs of a configmap, 2 PATCHes of a deployment.
  std::vector<Event> events =
      PerSecond(Req(kReporter, "exempt", "GET", "/api/v1/pods"), 12, 0, 12 * kSec);
  sim::Append(events, PerSecond(Req(kReporter, "exempt", "GET",
                                    "/api/v1/namespaces/monitoring/configmaps/settings"),
                                6, 0, 12 * kSec));
  sim::Append(events, PerSecond(Req(kReporter, "exempt", "PATCH",
                                    "/apis/apps/v1/namespaces/monitoring/deployments/reporter"),
                                2, 0, 12 * kSec));
  Harness run;
  run.sim.Run(std::move(events), 12 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  const StormEvidence& ev = firing[0].evidence;
  EXPECT_EQ(ev.storm, "exempt_client");
  EXPECT_EQ(ev.severity, "warning");
  EXPECT_EQ(ev.identity.user, "system:serviceaccount:monitoring:pod-reporter");
  EXPECT_EQ(ev.resource, "");
  EXPECT_EQ(ev.fired_ns, 10 * kSec);
  // Counts since the client was first seen: seconds 0..9 at the Evaluate of 10 s.
  const nlohmann::json want = {
      {"reason", "priority_level_exempt"},
      {"requests_per_second", 20.0},
      {"window_s", 10},
      {"top_verbs", {{{"verb", "list"}, {"count", 120}},
                     {{"verb", "get"}, {"count", 60}},
                     {{"verb", "patch"}, {"count", 20}}}},
      {"top_resources", {{{"resource", "pods"}, {"count", 120}},
                         {{"resource", "configmaps"}, {"count", 60}},
                         {{"resource", "deployments.apps"}, {"count", 20}}}},
      {"user_agent", "OpenAPI-Generator/1.0.0/python"},
      {"component", "OpenAPI-Generator"},
      {"priority_level", "exempt"},
      {"flow_schema", "exempt"},
      {"system_masters", false},
  };
  EXPECT_EQ(ev.details, want) << ev.details.dump(2);
  EXPECT_EQ(ev.summary,
            "exempt client system:serviceaccount:monitoring:pod-reporter (priority_level_exempt) "
            "at 20.0 requests/s: API Priority and Fairness does not limit it");
  EXPECT_NE(ev.fix.find("system:masters"), std::string::npos);
  EXPECT_NE(ev.fix.find("FlowSchema"), std::string::npos);
  // The live evidence counts on: seconds 0..11 at the Evaluate of 12 s.
  ASSERT_EQ(run.det.Active().size(), 1u);
  EXPECT_EQ(run.det.Active()[0].details["top_verbs"][0]["count"], 144);
}

TEST(ExemptClientTest, SystemMastersEvidenceCarriesGroups) {
  Harness run;
  run.sim.Run(PerSecond(Req(kDeployer, ""), 30, 0, 12 * kSec), 12 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].evidence.details["reason"], "system_masters");
  EXPECT_EQ(firing[0].evidence.details["system_masters"], true);
  EXPECT_EQ(firing[0].evidence.details["groups"], nlohmann::json::array({"system:masters"}));
  EXPECT_EQ(firing[0].evidence.details["priority_level"], "");
  EXPECT_EQ(firing[0].evidence.details["user_agent"], "helm/v3.14.0");
}

// --- configuration and bounded state ---

TEST(ExemptClientTest, ThresholdsAreConfig) {
  ExemptClientConfig config;
  config.escalate_rate = 2;
  config.escalate_sustain_s = 3;
  config.resolve_s = 2;
  config.allow.users.clear();  // now the controller-manager is reported too
  Harness run(config);
  run.sim.Run(PerSecond(Req(CertUser("system:kube-controller-manager", false, "kcm/v1"), "exempt"),
                        2, 0, 4 * kSec),
              20 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  auto resolved = run.sim.Of(StormState::kResolved);
  ASSERT_EQ(firing.size(), 1u);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(firing[0].at_ns, 3 * kSec);
  EXPECT_EQ(resolved[0].at_ns, 6 * kSec);
}

TEST(ExemptClientTest, BadConfigIsClamped) {
  ExemptClientConfig bad;
  bad.escalate_rate = 0;
  bad.escalate_sustain_s = 0;
  bad.active_window_s = -1;
  bad.resolve_s = 0;
  bad.max_clients = 0;
  ExemptClientDetector det(bad);
  EXPECT_EQ(det.config().escalate_rate, 20.0);
  EXPECT_EQ(det.config().escalate_sustain_s, 1);
  EXPECT_EQ(det.config().active_window_s, 1);
  EXPECT_EQ(det.config().resolve_s, 1);
  EXPECT_EQ(det.config().max_clients, 1u);
}

TEST(ExemptClientTest, EvictionKeepsClientsBounded) {
  ExemptClientConfig config;
  config.max_clients = 1000;
  ExemptClientDetector det(config);
  for (int64_t i = 0; i < 100'000; ++i) {
    const int64_t t = i * kSec / 1000;
    det.Observe(Req(CertUser("token:" + std::to_string(i), true, "x/1"), "exempt"), t);
    if (i % 1000 == 999) det.Evaluate(t + 1);
    ASSERT_LE(det.Stats().tracked, 1000u);
  }
  EXPECT_EQ(det.Stats().tracked, 1000u);
  EXPECT_EQ(det.Stats().evictions, 99'000u);
  EXPECT_EQ(det.ExemptClients(100 * kSec).size(), 1000u);
}

TEST(ExemptClientTest, EvictedFiringClientResolvesOnce) {
  ExemptClientConfig config;
  config.max_clients = 2;
  std::vector<Event> events = PerSecond(Req(kDeployer, "exempt"), 20, 0, 12 * kSec);
  events.push_back({12 * kSec, Req(kReporter, "exempt")});
  events.push_back({12 * kSec + 1, Req(CertUser("carol", true, "kubectl/v1.28.7"), "")});
  // The deployer, touched, got a second chance at the first eviction: a third newcomer takes
  // its place.
  events.push_back({12 * kSec + 2, Req(CertUser("dave", true, "kubectl/v1.28.7"), "")});
  Harness run(config);
  run.sim.Run(std::move(events), 60 * kSec);
  auto resolved = run.sim.Of(StormState::kResolved);
  ASSERT_EQ(run.sim.Of(StormState::kFiring).size(), 1u);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].at_ns, 12 * kSec + 2);
  EXPECT_EQ(resolved[0].evidence.identity.user, "ci-deployer");
}

}  // namespace
}  // namespace stormwatch
