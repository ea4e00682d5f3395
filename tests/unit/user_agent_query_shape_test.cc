// User-agent parsing (the clients of STORMS.md) and query shape (what a read costs).
#include <gtest/gtest.h>

#include "agent/kube/identity.h"
#include "agent/kube/query_shape.h"
#include "agent/kube/request_info.h"
#include "agent/kube/user_agent.h"

namespace stormwatch {
namespace {

TEST(UserAgent, KnownClients) {
  struct Case {
    const char* ua;
    UserAgentInfo want;
  } cases[] = {
      {"kubectl/v1.32.4 (linux/amd64) kubernetes/59526cd", {"kubectl", "v1.32.4", "linux/amd64", ""}},
      {"kube-controller-manager/v1.28.7 (linux/amd64) kubernetes/c8dcb00/deployment-controller",
       {"kube-controller-manager", "v1.28.7", "linux/amd64", "deployment-controller"}},
      {"kube-controller-manager/v1.28.7 (linux/amd64) kubernetes/c8dcb00/system:serviceaccount:kube-system:generic-garbage-collector",
       {"kube-controller-manager", "v1.28.7", "linux/amd64",
        "system:serviceaccount:kube-system:generic-garbage-collector"}},
      {"manager/v0.0.0 (linux/arm64) kubernetes/$Format", {"manager", "v0.0.0", "linux/arm64", ""}},
      {"OpenAPI-Generator/1.0.0/python", {"OpenAPI-Generator", "1.0.0", "python", ""}},
      {"OpenAPI-Generator/22.6.0/python", {"OpenAPI-Generator", "22.6.0", "python", ""}},
      {"kubelet/v1.28.7 (linux/amd64) kubernetes/c8dcb00", {"kubelet", "v1.28.7", "linux/amd64", ""}},
      {"curl/7.88.1", {"curl", "7.88.1", "", ""}},
      {"Go-http-client/2.0", {"Go-http-client", "2.0", "", ""}},
      {"datajob-operator/v1.4.2 (linux/amd64) kubernetes/4c1e2a7",
       {"datajob-operator", "v1.4.2", "linux/amd64", ""}},
      {"", {"", "", "", ""}},
      {"weird (unterminated", {"weird", "", "unterminated", ""}},
  };
  for (const Case& c : cases) {
    UserAgentInfo got = ParseUserAgent(c.ua);
    EXPECT_EQ(got.component, c.want.component) << c.ua;
    EXPECT_EQ(got.version, c.want.version) << c.ua;
    EXPECT_EQ(got.platform, c.want.platform) << c.ua;
    EXPECT_EQ(got.detail, c.want.detail) << c.ua;
  }
}

TEST(UserAgent, FillsTheIdentity) {
  Identity id = IdentityFromHeaders("", "OpenAPI-Generator/1.0.0/python");
  EXPECT_EQ(id.component, "OpenAPI-Generator");
  EXPECT_EQ(id.component_version, "1.0.0");
}

QueryShape Shape(const char* method, const char* target) {
  return ParseQueryShape(ParseRequestInfo(method, target), target);
}

TEST(QueryShape, ResourceVersionSemantics) {
  using C = QueryShape::Consistency;
  // Seed 002: the Python client's list_pod_for_all_namespaces(): consistent and unpaginated.
  auto seed = Shape("GET", "/api/v1/pods");
  EXPECT_EQ(seed.consistency, C::kConsistent);
  EXPECT_FALSE(seed.paginated);
  EXPECT_EQ(Shape("GET", "/api/v1/pods?resourceVersion=").consistency, C::kConsistent);
  EXPECT_EQ(Shape("GET", "/api/v1/pods?resourceVersion=0").consistency, C::kAny);
  EXPECT_EQ(Shape("GET", "/api/v1/pods?resourceVersion=123&resourceVersionMatch=Exact").consistency,
            C::kExact);
  EXPECT_EQ(Shape("GET", "/api/v1/pods?resourceVersion=123&resourceVersionMatch=NotOlderThan")
                .consistency,
            C::kNotOlderThan);
  // An informer's first page and its next page.
  auto first = Shape("GET", "/api/v1/pods?limit=500&resourceVersion=0");
  EXPECT_TRUE(first.paginated);
  EXPECT_EQ(first.limit, 500);
  auto next = Shape("GET", "/api/v1/pods?limit=500&continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ");
  EXPECT_TRUE(next.continued);
  EXPECT_EQ(next.consistency, C::kExact);
  auto watch = Shape("GET", "/api/v1/namespaces/a/pods?watch=1&resourceVersion=42&timeoutSeconds=300&sendInitialEvents=true&labelSelector=app%3Dx");
  EXPECT_EQ(watch.consistency, C::kNotOlderThan);
  EXPECT_EQ(watch.timeout_seconds, 300);
  EXPECT_TRUE(watch.send_initial_events);
  EXPECT_TRUE(watch.label_selector);
  EXPECT_FALSE(watch.field_selector);
  // Writes are not reads.
  EXPECT_EQ(Shape("PUT", "/api/v1/namespaces/a/pods/p").consistency, C::kNotARead);
  EXPECT_EQ(Shape("POST", "/api/v1/namespaces/a/pods").consistency, C::kNotARead);
}

TEST(QueryShape, TheExpensiveList) {
  auto rec = [](const char* target) {
    RequestRecord r;
    r.method = "GET";
    r.path = target;
    r.info = ParseRequestInfo(r.method, r.path);
    r.shape = ParseQueryShape(r.info, r.path);
    return r;
  };
  EXPECT_TRUE(IsConsistentUnpaginatedClusterList(rec("/api/v1/pods")));
  EXPECT_TRUE(IsConsistentUnpaginatedClusterList(rec("/api/v1/nodes")));
  EXPECT_FALSE(IsConsistentUnpaginatedClusterList(rec("/api/v1/pods?resourceVersion=0")));
  EXPECT_FALSE(IsConsistentUnpaginatedClusterList(rec("/api/v1/pods?limit=500")));
  EXPECT_FALSE(IsConsistentUnpaginatedClusterList(rec("/api/v1/namespaces/a/pods")));
  EXPECT_FALSE(IsConsistentUnpaginatedClusterList(rec("/api/v1/namespaces/a/pods/p")));
  EXPECT_FALSE(IsConsistentUnpaginatedClusterList(rec("/api/v1/pods?watch=true")));
}

}  // namespace
}  // namespace stormwatch
