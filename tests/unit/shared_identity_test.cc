// Identities are interned once per client by the pipeline and shared by every detector:
// requests of one client carry the same Identity object; a changed identity gets a new one,
// and what detectors keep of it (KeepLatestIdentity) follows the latest user agent while
// system:masters and certificate groups, once seen, stay.
#include <gtest/gtest.h>

#include <vector>

#include "agent/analysis/storm.h"
#include "agent/metered_pipeline.h"
#include "agent/kube/record_keys.h"
#include "agent/pipeline/request_pipeline.h"
#include "exporters/prometheus_exporter.h"
#include "record_identity.h"
#include "tests/unit/allocation_count.h"

namespace stormwatch {
namespace {

RequestRecord Get(const std::string& user, const std::string& pod, const std::string& user_agent) {
  RequestRecord r;
  r.pid = 1;
  r.method = "GET";
  r.path = "/api/v1/namespaces/default/configmaps/a";
  r.status = 200;
  r.start_ns = 1'000'000'000;
  r.end_ns = 1'002'000'000;
  EditIdentity(r).kind = Identity::Kind::kServiceAccount;
  EditIdentity(r).user = user;
  EditIdentity(r).pod_name = pod;
  EditIdentity(r).user_agent = user_agent;
  return r;
}

// IdentityRef counts its references without atomics: copies and moves share one identity and
// allocate nothing, self-assignment keeps it, and the last reference frees it (the sanitizer
// stage runs this too: a count off by one is a leak or a use after free there).
TEST(SharedIdentity, ReferencesShareOneIdentityFreedWithTheLast) {
  using testing::AllocationsDuring;
  using testing::FreesDuring;
  Identity id;
  id.user = "system:serviceaccount:tenant-1:controller-1";  // past the inline 15 bytes
  IdentityRef a;
  EXPECT_FALSE(a);
  EXPECT_EQ(AllocationsDuring([&] { a = IdentityRef::Make(id); }), 2u);  // the identity, its user
  IdentityRef kept;
  EXPECT_EQ(AllocationsDuring([&] {
              IdentityRef b = a;
              IdentityRef c = std::move(b);
              EXPECT_FALSE(b);
              EXPECT_EQ(c, a);
              b = c;
              IdentityRef& alias = b;
              b = alias;             // self-assignment keeps it
              b = std::move(alias);  // and so does a self-move
              EXPECT_EQ(b, a);
              kept = std::move(b);
            }),
            0u);
  EXPECT_EQ(kept, a);
  EXPECT_EQ(FreesDuring([&] { a = IdentityRef(); }), 0u);  // `kept` still refers to it
  EXPECT_EQ(kept->user, id.user);
  // Assigned over by another: the last reference goes, the identity and its user are freed.
  const IdentityRef other = IdentityRef::Make(Identity());
  EXPECT_EQ(FreesDuring([&] { kept = other; }), 2u);
  EXPECT_EQ(kept, other);
  // Equal fields are not the same identity.
  EXPECT_NE(IdentityRef::Make(id), IdentityRef::Make(id));
}

TEST(SharedIdentity, OneObjectPerClientUntilItChanges) {
  PrometheusExporter exporter;
  MeteredPipeline pipeline(&exporter, DetectorsConfig{}, [](const StormTransition&) {});
  std::vector<IdentityRef> seen;
  pipeline.SetRecorder({.request = [&](const RequestRecord& r) { seen.push_back(r.identity); }});

  pipeline.ReplayRequest(Get("system:serviceaccount:a:op", "op-1", "op/v1"));
  pipeline.ReplayRequest(Get("system:serviceaccount:a:op", "op-1", "op/v1"));
  pipeline.ReplayRequest(Get("system:serviceaccount:a:op", "op-2", "op/v1"));  // another replica
  pipeline.ReplayRequest(Get("system:serviceaccount:a:op", "op-1", "op/v2"));  // upgraded
  pipeline.ReplayRequest(Get("system:serviceaccount:a:op", "op-1", "op/v2"));

  ASSERT_EQ(seen.size(), 5u);
  for (const IdentityRef& ref : seen) ASSERT_TRUE(ref);
  EXPECT_EQ(seen[0], seen[1]);  // the same object, not an equal copy
  EXPECT_NE(seen[1], seen[2]);
  EXPECT_EQ(seen[2]->pod_name, "op-2");
  EXPECT_NE(seen[1], seen[3]);
  EXPECT_EQ(seen[3]->user_agent, "op/v2");
  EXPECT_EQ(seen[3], seen[4]);
  EXPECT_EQ(seen[0]->user_agent, "op/v1");  // what a detector kept is never changed under it
}

// The client label is the user: replicas of one service account (different pods, so different
// RecordKeys::client) are one client of the metrics, found by the user's key, and its series
// end together once it is idle.
TEST(SharedIdentity, ReplicasOfOneUserShareTheirClientSeries) {
  PrometheusExporter exporter(ClientSeriesLimits{.max_clients = 1, .idle_s = 600});
  MeteredPipeline pipeline(&exporter, DetectorsConfig{}, [](const StormTransition&) {});
  Identity id;
  id.kind = Identity::Kind::kServiceAccount;
  id.user = "system:serviceaccount:a:op";
  for (const char* pod : {"op-1", "op-2", "op-1"}) {
    RequestRecord r = Get("", "", "");
    id.pod_name = pod;
    r.identity = ShareIdentity(id);  // keys set, as the identity cache makes them
    pipeline.ReplayRequest(std::move(r));
  }
  const std::string series =
      R"(stormwatch_requests_total{client="system:serviceaccount:a:op",code="200",group="",)"
      R"(resource="configmaps",scope="resource",subresource="",verb="GET",version="v1"} 3)";
  std::string m = exporter.Scrape();
  EXPECT_NE(m.find(series + "\n"), std::string::npos) << m;
  EXPECT_EQ(m.find(R"(stormwatch_requests_total{client="other")"), std::string::npos) << m;
  exporter.Compact(60'000'000'000);
  exporter.Compact(700'000'000'000);  // idle for 640 s
  m = exporter.Scrape();
  EXPECT_EQ(m.find(R"(client="system:serviceaccount:a:op")"), std::string::npos) << m;
}

TEST(SharedIdentity, KeepLatestIdentityCopiesOnlyOnChange) {
  RequestRecord first = Get("alice", "", "kubectl/v1.31.0");
  EditIdentity(first).component = "kubectl";
  EditIdentity(first).component_version = "v1.31.0";
  EditIdentity(first).system_masters = true;
  EditIdentity(first).groups = {"system:masters"};
  IdentityRef kept = first.identity;
  const Identity* before = kept.get();

  KeepLatestIdentity(kept, first);
  EXPECT_EQ(kept.get(), before);

  // A token request of the same user with a new client: latest user agent, masters and
  // groups from the certificate stay.
  RequestRecord later = Get("alice", "", "kubectl/v1.32.1");
  EditIdentity(later).component = "kubectl";
  EditIdentity(later).component_version = "v1.32.1";
  const IdentityRef held = kept;  // a detector still holding the old one keeps it alive
  KeepLatestIdentity(kept, later);
  EXPECT_NE(kept.get(), before);
  EXPECT_EQ(kept->user_agent, "kubectl/v1.32.1");
  EXPECT_EQ(kept->component_version, "v1.32.1");
  EXPECT_TRUE(kept->system_masters);
  EXPECT_EQ(kept->groups, std::vector<std::string>{"system:masters"});
  EXPECT_EQ(before->user_agent, "kubectl/v1.31.0");  // the old object is untouched

  // Seen first without, then with system:masters: it sticks.
  IdentityRef token = Get("bob", "", "kubectl/v1.31.0").identity;
  RequestRecord cert = Get("bob", "", "kubectl/v1.31.0");
  EditIdentity(cert).system_masters = true;
  EditIdentity(cert).groups = {"system:masters", "ops"};
  KeepLatestIdentity(token, cert);
  EXPECT_TRUE(token->system_masters);
  EXPECT_EQ(token->groups.size(), 2u);
}

}  // namespace
}  // namespace stormwatch
