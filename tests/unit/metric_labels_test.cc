// apiserver_request_total labels. Cases come from upstream metrics_test.go (TestCleanVerb,
// TestRecordDroppedRequests, TestCleanScope) restated as whole requests, and from the
// installer's route scopes.
#include "agent/kube/metric_labels.h"

#include <gtest/gtest.h>

#include "agent/kube/query_shape.h"
#include "agent/kube/request_info.h"

namespace stormwatch {
namespace {

struct LabelCase {
  const char* desc;
  const char* method;
  const char* target;
  const char* content_type;
  MetricLabels want;
};

const LabelCase kCases[] = {
    // TestCleanVerb
    {"LIST normally maps to LIST",
     "GET",
     "/api/v1/pods",
     "",
     {"LIST", "", "v1", "pods", "", "cluster"}},
    {"LIST becomes WATCH with the watch param",
     "GET",
     "/api/v1/pods?watch=true",
     "",
     {"WATCH", "", "v1", "pods", "", "cluster"}},
    {"LIST stays LIST with other params",
     "GET",
     "/api/v1/pods?blah=asdf&something=else",
     "",
     {"LIST", "", "v1", "pods", "", "cluster"}},
    {"GET of one object with watch=true is WATCH",
     "GET",
     "/api/v1/namespaces/foo/pods/bar?fieldSelector=metadata.name=baz&watch=true",
     "",
     {"WATCH", "", "v1", "pods", "", "resource"}},
    {"old pattern watch of a collection",
     "GET",
     "/api/v1/watch/pods",
     "",
     {"WATCH", "", "v1", "pods", "", "cluster"}},
    {"old pattern watch of one object",
     "GET",
     "/api/v1/watch/namespaces/ns/pods/p",
     "",
     {"WATCH", "", "v1", "pods", "", "resource"}},
    {"PATCH with apply content type is APPLY",
     "PATCH",
     "/apis/apps/v1/namespaces/ns/deployments/d",
     "application/apply-patch+yaml",
     {"APPLY", "apps", "v1", "deployments", "", "resource"}},
    {"PATCH without apply content type",
     "PATCH",
     "/apis/apps/v1/namespaces/ns/deployments/d",
     "application/merge-patch+json",
     {"PATCH", "apps", "v1", "deployments", "", "resource"}},
    {"unexpected verbs are other",
     "OPTIONS",
     "/api/v1/pods",
     "",
     {"other", "", "v1", "pods", "", "cluster"}},
    {"pod logs are CONNECT",
     "GET",
     "/api/v1/namespaces/default/pods/test-pod/log",
     "",
     {"CONNECT", "", "v1", "pods", "log", "resource"}},
    {"pod exec is CONNECT",
     "POST",
     "/api/v1/namespaces/default/pods/test-pod/exec?command=sh",
     "",
     {"CONNECT", "", "v1", "pods", "exec", "resource"}},
    {"pod portforward is CONNECT",
     "POST",
     "/api/v1/namespaces/default/pods/test-pod/portforward",
     "",
     {"CONNECT", "", "v1", "pods", "portforward", "resource"}},
    {"pod attach is CONNECT",
     "GET",
     "/api/v1/namespaces/default/pods/p/attach?stdout=1",
     "",
     {"CONNECT", "", "v1", "pods", "attach", "resource"}},
    {"service proxy is CONNECT",
     "GET",
     "/api/v1/namespaces/ns/services/s/proxy/metrics",
     "",
     {"CONNECT", "", "v1", "services", "proxy", "resource"}},
    {"logs with follow+watch still CONNECT",
     "GET",
     "/api/v1/namespaces/ns/pods/p/log?watch=1",
     "",
     {"CONNECT", "", "v1", "pods", "log", "resource"}},
    {"deployment scale is not CONNECT",
     "PUT",
     "/apis/apps/v1/namespaces/default/deployments/test-1/scale",
     "",
     {"PUT", "apps", "v1", "deployments", "scale", "resource"}},

    // TestRecordDroppedRequests
    {"list pods", "GET", "/api/v1/pods", "", {"LIST", "", "v1", "pods", "", "cluster"}},
    {"post pods",
     "POST",
     "/api/v1/namespaces/foo/pods",
     "",
     {"POST", "", "v1", "pods", "", "resource"}},
    {"patch job status",
     "PATCH",
     "/apis/batch/v1/namespaces/foo/jobs/bar/status?dryRun=All",
     "",
     {"PATCH", "batch", "v1", "jobs", "status", "resource"}},

    // Route scopes and method-based verbs.
    {"namespaced list",
     "GET",
     "/api/v1/namespaces/ns/pods",
     "",
     {"LIST", "", "v1", "pods", "", "namespace"}},
    {"cluster-scoped list", "GET", "/api/v1/nodes", "", {"LIST", "", "v1", "nodes", "", "cluster"}},
    {"cluster-scoped get",
     "GET",
     "/api/v1/nodes/n1",
     "",
     {"GET", "", "v1", "nodes", "", "resource"}},
    {"namespaces list",
     "GET",
     "/api/v1/namespaces",
     "",
     {"LIST", "", "v1", "namespaces", "", "cluster"}},
    {"namespace get",
     "GET",
     "/api/v1/namespaces/ns",
     "",
     {"GET", "", "v1", "namespaces", "", "resource"}},
    {"namespace finalize",
     "PUT",
     "/api/v1/namespaces/ns/finalize",
     "",
     {"PUT", "", "v1", "namespaces", "finalize", "resource"}},
    {"update is PUT",
     "PUT",
     "/apis/batch.company.com/v1/namespaces/a/datajobs/j",
     "application/json",
     {"PUT", "batch.company.com", "v1", "datajobs", "", "resource"}},
    {"create is POST",
     "POST",
     "/apis/apps/v1/namespaces/a/deployments",
     "",
     {"POST", "apps", "v1", "deployments", "", "resource"}},
    {"delete is DELETE",
     "DELETE",
     "/api/v1/namespaces/a/pods/p",
     "",
     {"DELETE", "", "v1", "pods", "", "resource"}},
    {"deletecollection is DELETE",
     "DELETE",
     "/api/v1/namespaces/a/pods",
     "",
     {"DELETE", "", "v1", "pods", "", "namespace"}},
    {"field-selector name keeps the list route scope",
     "GET",
     "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dweb-0",
     "",
     {"LIST", "", "v1", "pods", "", "namespace"}},
    {"watch with field-selector name",
     "GET",
     "/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%3Dcm&watch=true",
     "",
     {"WATCH", "", "v1", "configmaps", "", "namespace"}},
    {"HEAD of a collection is LIST",
     "HEAD",
     "/api/v1/pods",
     "",
     {"LIST", "", "v1", "pods", "", "cluster"}},
    {"HEAD ignores watch (getVerbIfWatch checks GET)",
     "HEAD",
     "/api/v1/pods?watch=1",
     "",
     {"LIST", "", "v1", "pods", "", "cluster"}},
    {"watch=false stays LIST",
     "GET",
     "/api/v1/pods?watch=false",
     "",
     {"LIST", "", "v1", "pods", "", "cluster"}},
    {"apply content type only on PATCH",
     "PUT",
     "/api/v1/namespaces/a/configmaps/c",
     "application/apply-patch+yaml",
     {"PUT", "", "v1", "configmaps", "", "resource"}},
    {"apply content type must match exactly",
     "PATCH",
     "/api/v1/namespaces/a/configmaps/c",
     "application/apply-patch+yaml; charset=utf-8",
     {"PATCH", "", "v1", "configmaps", "", "resource"}},

    // Non-resource requests.
    {"healthz", "GET", "/healthz", "", {"GET", "", "", "", "", ""}},
    {"HEAD on non-resource is GET", "HEAD", "/livez", "", {"GET", "", "", "", "", ""}},
    {"discovery", "GET", "/apis/apps/v1", "", {"GET", "", "", "", "", ""}},
    {"non-resource POST", "POST", "/apis", "", {"POST", "", "", "", "", ""}},
    {"non-resource OPTIONS", "OPTIONS", "/openapi/v3", "", {"other", "", "", "", "", ""}},
};

TEST(MetricLabelsTest, MatchesUpstreamRules) {
  for (const LabelCase& c : kCases) {
    SCOPED_TRACE(c.desc);
    RequestInfo info = ParseRequestInfo(c.method, c.target);
    MetricLabels got =
        MetricLabelsFor(info, ParseQueryShape(info, c.target), c.method, c.content_type, c.target);
    EXPECT_EQ(got.verb, c.want.verb);
    EXPECT_EQ(got.group, c.want.group);
    EXPECT_EQ(got.version, c.want.version);
    EXPECT_EQ(got.resource, c.want.resource);
    EXPECT_EQ(got.subresource, c.want.subresource);
    EXPECT_EQ(got.scope, c.want.scope);
  }
}

TEST(MetricLabelsTest, MethodCaseDoesNotMatter) {
  // metrics.go upper-cases req.Method before CanonicalVerb and getVerbIfWatch.
  const char* target = "/api/v1/pods?watch=true";
  RequestInfo info = ParseRequestInfo("get", target);
  EXPECT_EQ(MetricLabelsFor(info, ParseQueryShape(info, target), "get", "", target).verb, "WATCH");
}

TEST(MetricLabelsTest, TestCleanScopeEquivalents) {
  RequestInfo empty;
  EXPECT_EQ(MetricScope(empty, "GET"), "");
  RequestInfo cluster;
  cluster.is_resource_request = true;
  EXPECT_EQ(MetricScope(cluster, "GET"), "cluster");
  RequestInfo ns = cluster;
  ns.namespace_ = "my-namespace";
  EXPECT_EQ(MetricScope(ns, "GET"), "namespace");
  EXPECT_EQ(MetricScope(ns, "POST"), "resource");
  RequestInfo named = ns;
  named.parts_count = 2;  // {"pods", "my-resource"}
  named.name = "my-resource";
  EXPECT_EQ(MetricScope(named, "GET"), "resource");
}

TEST(MetricLabelsTest, CouldBeServedApiAcceptsApiNamesOnly) {
  auto served = [](std::string_view group, std::string_view version, std::string_view resource,
                   std::string_view subresource = "") {
    return CouldBeServedApi({.verb = "GET", .group = group, .version = version,
                             .resource = resource, .subresource = subresource, .scope = ""});
  };
  EXPECT_TRUE(served("", "v1", "configmaps"));
  EXPECT_TRUE(served("batch.company.com", "v1beta1", "data-jobs", "status"));
  EXPECT_TRUE(served("", "", ""));  // not a resource request
  EXPECT_FALSE(served("", "v1", "Pods"));
  EXPECT_FALSE(served("", "v1", "r\xffz"));
  EXPECT_FALSE(served("", "v1", "-pods"));
  EXPECT_FALSE(served("", "v1", std::string(64, 'a')));
  EXPECT_FALSE(served("Bad_Group", "v1", "things"));
  EXPECT_FALSE(served("a..b", "v1", "things"));
  EXPECT_FALSE(served("", "V1", "pods"));
  EXPECT_FALSE(served("", "", "pods"));
  EXPECT_FALSE(served("", "v1", "pods", "st atus"));
}

}  // namespace
}  // namespace stormwatch
