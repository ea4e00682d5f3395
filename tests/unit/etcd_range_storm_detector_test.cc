// etcd Range storm detector on an injected clock: both sides of the call and byte rates and of
// the sustain window, the correlation with the apiserver's consistent LISTs, allow-list, bounds.
#include "agent/analysis/etcd_range_storm_detector.h"

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
using sim::User;

// The simulation's records stand for etcd calls too: r.path the method, r.info.resource the
// key's resource, r.response_bytes the key and value bytes returned.
EtcdRequest AsEtcdCall(const RequestRecord& r) {
  EtcdRequest e;
  e.method = r.path;
  e.decoded.registry = true;
  e.decoded.prefix = true;
  e.decoded.resource = r.info.resource;
  e.decoded.key_prefix = r.info.resource.empty() ? "" : "/registry/" + r.info.resource + "/";
  e.kv_bytes = r.response_bytes;
  e.start_ns = r.start_ns;
  e.end_ns = r.end_ns;
  e.identity = *r.identity;
  return e;
}

// Routes etcd's gRPC requests to ObserveEtcd, the rest to Observe, so one simulation drives
// both sides in time order.
class BothSides final : public StormDetector {
 public:
  explicit BothSides(EtcdRangeStormDetector& det) : det_(det) {}
  const char* storm() const override { return det_.storm(); }
  void Observe(const RequestRecord& r, int64_t now_ns) override {
    if (r.path.rfind("/etcdserverpb.", 0) == 0) {
      det_.ObserveEtcd(AsEtcdCall(r), now_ns);
    } else {
      det_.Observe(r, now_ns);
    }
  }
  std::vector<StormTransition> Evaluate(int64_t now_ns) override { return det_.Evaluate(now_ns); }
  std::vector<StormEvidence> Active() const override { return det_.Active(); }
  DetectorStats Stats() const override { return det_.Stats(); }

 private:
  EtcdRangeStormDetector& det_;
};

const Identity kApiserverCert = User("kube-apiserver-etcd-client");
const Identity kPythonAgent =
    User("system:serviceaccount:monitoring:inventory", "OpenAPI-Generator/1.0.0/python",
         "inventory-5d8-x1");
const Identity kController = User("system:serviceaccount:apps:pod-watcher", "pod-watcher/v2");

RequestRecord Range(const std::string& resource, uint64_t bytes, int64_t latency_ms = 20,
                    const Identity& client = kApiserverCert,
                    const std::string& method = kEtcdRangeMethod) {
  RequestRecord r;
  r.path = method;
  r.info.resource = resource;
  r.response_bytes = bytes;
  r.start_ns = 1'000;
  r.end_ns = 1'000 + latency_ms * kMs;
  r.identity = IdentityRef::Make(client);
  r.status = 200;
  return r;
}

RequestRecord List(const Identity& who, const std::string& path_and_query) {
  return sim::Request(who, "GET", path_and_query, 200);
}

TEST(EtcdRangeStormTest, ListStormIsTracedToItsClients) {
  EtcdRangeStormDetector det;
  BothSides both(det);
  DetectorSim sim(both);
  // The Python agent's consistent LISTs of all pods at 6/s, a controller's at 1/s; a kubelet
  // reading from the watch cache (resourceVersion=0) and a node lister do not touch this prefix.
  std::vector<Event> events = PerSecond(List(kPythonAgent, "/api/v1/pods"), 6, 0, 15 * kSec);
  Append(events, PerSecond(List(kController, "/api/v1/namespaces/apps/pods"), 1, 0, 15 * kSec));
  Append(events, PerSecond(List(User("system:node:n1"), "/api/v1/pods?resourceVersion=0"), 10, 0,
                           15 * kSec));
  Append(events, PerSecond(List(User("node-lister"), "/api/v1/nodes"), 3, 0, 15 * kSec));
  // etcd: 600 Range/s on /registry/pods/, 100 kB each, 20 ms.
  Append(events, PerSecond(Range("pods", 100'000), 600, 0, 15 * kSec));
  sim.Run(std::move(events), 60 * kSec);

  auto firing = sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  const StormEvidence& e = firing[0].evidence;
  EXPECT_EQ(firing[0].at_ns, 10 * kSec);
  EXPECT_EQ(e.storm, "etcd_range_storm");
  EXPECT_EQ(e.identity.user, kPythonAgent.user);
  EXPECT_EQ(e.identity.user_agent, "OpenAPI-Generator/1.0.0/python");
  EXPECT_EQ(e.resource, "pods");
  EXPECT_EQ(e.api_group, "");
  EXPECT_EQ(e.since_ns, 0);
  EXPECT_EQ(e.details["ranges_per_second"], 600.0);
  EXPECT_EQ(e.details["bytes_per_second"], 60'000'000.0);
  EXPECT_EQ(e.details["mean_latency_ms"], 20.0);
  EXPECT_EQ(e.details["window_s"], 10);
  EXPECT_EQ(e.details["key_prefix"], "/registry/pods/");
  EXPECT_EQ(e.details["etcd_client"], "kube-apiserver-etcd-client");
  const auto& clients = e.details["correlated_list_clients"];
  ASSERT_EQ(clients.size(), 2u);
  EXPECT_EQ(clients[0]["client"], kPythonAgent.user);
  EXPECT_EQ(clients[0]["pod"], "inventory-5d8-x1");
  EXPECT_EQ(clients[0]["consistent_lists"], 60.0);
  EXPECT_EQ(clients[0]["consistent_lists_per_second"], 6.0);
  EXPECT_EQ(clients[0]["resources"], "pods");
  EXPECT_EQ(clients[1]["client"], kController.user);
  EXPECT_EQ(clients[1]["consistent_lists_per_second"], 1.0);
  EXPECT_NE(e.summary.find("caused by consistent LISTs from " + kPythonAgent.user),
            std::string::npos)
      << e.summary;
  EXPECT_NE(e.fix.find("resourceVersion=0"), std::string::npos);

  // Last Range in second 14; 15..44 calm: resolved once 44 is complete.
  auto resolved = sim.Of(StormState::kResolved);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].at_ns, 45 * kSec);
  EXPECT_EQ(sim.ActiveAt(44), 1u);
  EXPECT_EQ(sim.ActiveAt(45), 0u);
  EXPECT_EQ(resolved[0].evidence.identity.user, kPythonAgent.user);
}

TEST(EtcdRangeStormTest, RangeRateBothSides) {
  {
    EtcdRangeStormDetector det;
    BothSides both(det);
    DetectorSim sim(both);
    sim.Run(PerSecond(Range("pods", 1'000), 499, 0, 30 * kSec), 60 * kSec);
    EXPECT_TRUE(sim.transitions().empty());
  }
  {
    EtcdRangeStormDetector det;
    BothSides both(det);
    DetectorSim sim(both);
    sim.Run(PerSecond(Range("pods", 1'000), 500, 0, 30 * kSec), 60 * kSec);
    auto firing = sim.Of(StormState::kFiring);
    ASSERT_EQ(firing.size(), 1u);
    // No apiserver LIST to blame: the etcd client is named.
    EXPECT_EQ(firing[0].evidence.identity.user, "kube-apiserver-etcd-client");
    EXPECT_TRUE(firing[0].evidence.details["correlated_list_clients"].empty());
  }
}

TEST(EtcdRangeStormTest, ByteRateBothSides) {
  constexpr uint64_t kFiveMiB = 5 * 1024 * 1024;
  {
    EtcdRangeStormDetector det;  // 10 x (5 MiB - 1) per second: just under 50 MiB/s
    BothSides both(det);
    DetectorSim sim(both);
    sim.Run(PerSecond(Range("nodes", kFiveMiB - 1), 10, 0, 30 * kSec), 60 * kSec);
    EXPECT_TRUE(sim.transitions().empty());
  }
  {
    EtcdRangeStormDetector det;
    BothSides both(det);
    DetectorSim sim(both);
    sim.Run(PerSecond(Range("nodes", kFiveMiB), 10, 0, 30 * kSec), 60 * kSec);
    auto firing = sim.Of(StormState::kFiring);
    ASSERT_EQ(firing.size(), 1u);
    EXPECT_EQ(firing[0].evidence.details["bytes_per_second"], 10.0 * kFiveMiB);
    EXPECT_EQ(firing[0].evidence.details["ranges_per_second"], 10.0);
  }
}

TEST(EtcdRangeStormTest, SustainBothSidesAndAGapRestarts) {
  {
    EtcdRangeStormDetector det;
    BothSides both(det);
    DetectorSim sim(both);
    sim.Run(PerSecond(Range("pods", 1'000), 800, 0, 9 * kSec), 60 * kSec);  // 9 s < 10 s
    EXPECT_TRUE(sim.transitions().empty());
  }
  {
    EtcdRangeStormDetector det;
    BothSides both(det);
    DetectorSim sim(both);
    std::vector<Event> events = PerSecond(Range("pods", 1'000), 800, 0, 5 * kSec);
    Append(events, PerSecond(Range("pods", 1'000), 100, 5 * kSec, 6 * kSec));  // a low second
    Append(events, PerSecond(Range("pods", 1'000), 800, 6 * kSec, 15 * kSec));
    sim.Run(std::move(events), 60 * kSec);
    EXPECT_TRUE(sim.transitions().empty());
  }
}

TEST(EtcdRangeStormTest, UnknownPrefixCorrelatesEveryResource) {
  EtcdRangeStormDetector det;
  BothSides both(det);
  DetectorSim sim(both);
  const Identity a = User("a"), b = User("b"), c = User("c"), d = User("d");
  std::vector<Event> events = PerSecond(Range("", 10), 500, 0, 11 * kSec);
  Append(events, PerSecond(List(a, "/api/v1/pods"), 2, 0, 11 * kSec));
  Append(events, PerSecond(List(a, "/api/v1/nodes"), 2, 0, 11 * kSec));
  Append(events, PerSecond(List(b, "/apis/apps/v1/deployments"), 5, 0, 11 * kSec));
  Append(events, PerSecond(List(c, "/api/v1/secrets"), 1, 0, 11 * kSec));
  Append(events, PerSecond(List(d, "/api/v1/configmaps"), 1, 0, 11 * kSec));
  sim.Run(std::move(events), 11 * kSec);
  auto firing = sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  const StormEvidence& e = firing[0].evidence;
  EXPECT_EQ(e.resource, "");
  EXPECT_EQ(e.details["key_prefix"], "");
  EXPECT_EQ(e.identity.user, "b");
  const auto& clients = e.details["correlated_list_clients"];
  ASSERT_EQ(clients.size(), 3u);
  EXPECT_EQ(clients[0]["client"], "b");
  EXPECT_EQ(clients[0]["consistent_lists_per_second"], 5.0);
  EXPECT_EQ(clients[1]["client"], "a");
  EXPECT_EQ(clients[1]["consistent_lists_per_second"], 4.0);
  const std::string resources = clients[1]["resources"];
  EXPECT_TRUE(resources == "pods,nodes" || resources == "nodes,pods") << resources;
  EXPECT_EQ(clients[2]["client"], "c");  // c and d tie: by name
}

TEST(EtcdRangeStormTest, OtherMethodsAndAllowListedClientsAreIgnored) {
  EtcdRangeStormConfig config;
  config.allow.users = {"backup-*", "system:serviceaccount:monitoring:inventory"};
  EtcdRangeStormDetector det(config);
  BothSides both(det);
  DetectorSim sim(both);
  std::vector<Event> events =
      PerSecond(Range("pods", 10, 1, kApiserverCert, "/etcdserverpb.KV/Txn"), 900, 0, 12 * kSec);
  Append(events, PerSecond(Range("pods", 10, 1, User("backup-tool")), 900, 0, 12 * kSec));
  sim.Run(events, 30 * kSec);
  EXPECT_TRUE(sim.transitions().empty());
  EXPECT_EQ(det.Stats().observed, 0u);

  // A storm from the apiserver: the allowed LIST client is not blamed.
  events = PerSecond(Range("pods", 10), 600, 30 * kSec, 42 * kSec);
  Append(events, PerSecond(List(kPythonAgent, "/api/v1/pods"), 6, 30 * kSec, 42 * kSec));
  sim.Run(std::move(events), 42 * kSec);
  auto firing = sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].evidence.identity.user, "kube-apiserver-etcd-client");
}

TEST(EtcdRangeStormTest, StateIsBoundedAndEvictedStormsResolve) {
  EtcdRangeStormConfig config;
  config.max_keys = 2;
  config.max_list_clients = 50;
  EtcdRangeStormDetector det(config);
  BothSides both(det);
  DetectorSim sim(both);
  std::vector<Event> events = PerSecond(Range("pods", 10), 600, 0, 11 * kSec);
  events.push_back({11 * kSec + 5, Range("nodes", 10)});
  events.push_back({11 * kSec + 6, Range("leases", 10)});
  // pods, touched, got a second chance when leases came (nodes went): one more pushes it out.
  events.push_back({11 * kSec + 7, Range("configmaps", 10)});
  sim.Run(std::move(events), 30 * kSec);
  ASSERT_EQ(sim.Of(StormState::kFiring).size(), 1u);
  auto resolved = sim.Of(StormState::kResolved);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].at_ns, 11 * kSec + 7);
  EXPECT_EQ(resolved[0].evidence.resource, "pods");

  for (int i = 0; i < 1000; ++i) {
    det.Observe(List(User("u" + std::to_string(i)), "/api/v1/pods"), 30 * kSec + i);
    det.ObserveEtcd(AsEtcdCall(Range("pods", 10, 1, User("etcd-client-" + std::to_string(i)))), 30 * kSec + i);
  }
  EXPECT_EQ(det.Stats().tracked, 2u + 50u);
  // Prefixes: nodes, then pods, then one more when pods comes back; list clients: 950.
  EXPECT_EQ(det.Stats().evictions, 2u + 1u + 950u);
}

}  // namespace
}  // namespace stormwatch
