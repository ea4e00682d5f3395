// RequestInfo: every table of upstream's requestinfo_test.go (TestGetAPIRequestInfo,
// TestGetNonAPIRequestInfo, TestFieldSelectorParsing and its successor TestSelectorParsing),
// then the Go net/url and apimachinery behaviour the parser depends on.
#include "agent/kube/request_info.h"
#include "agent/kube/query_shape.h"

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stormwatch {

// A failed comparison prints the fields, not the struct's bytes (found by ADL: not in the
// anonymous namespace).
void PrintTo(const RequestInfo& i, std::ostream* os) {
  *os << "{resource_request=" << i.is_resource_request << " path=\"" << i.path << "\" verb=\""
      << i.verb << "\" prefix=\"" << i.api_prefix << "\" group=\"" << i.api_group
      << "\" version=\"" << i.api_version << "\" namespace=\"" << i.namespace_ << "\" resource=\""
      << i.resource << "\" subresource=\"" << i.subresource << "\" name=\"" << i.name
      << "\" parts=" << i.parts_count << " via_path=" << i.verb_via_path_prefix
      << " field_selector=\"" << i.field_selector << "\" label_selector=\"" << i.label_selector
      << "\"}";
}

void PrintTo(const QueryShape& s, std::ostream* os) {
  *os << "{consistency=" << ConsistencyName(s.consistency) << " paginated=" << s.paginated
      << " continued=" << s.continued << " limit=" << s.limit << " label_selector="
      << s.label_selector << " field_selector=" << s.field_selector
      << " send_initial_events=" << s.send_initial_events << " timeout=" << s.timeout_seconds
      << " watch_param=" << s.watch_param
      << "}";
}

namespace {

using Parts = std::vector<std::string>;

struct ApiCase {
  const char* method;
  const char* url;
  const char* verb;
  const char* api_prefix;
  const char* api_group;
  const char* api_version;
  const char* namespace_;
  const char* resource;
  const char* subresource;
  const char* name;
  Parts parts;
};

// Upstream's table lists "api" as the expected prefix for /apis/... rows but never checks
// it; the prefix here is what the URL actually starts with.
const ApiCase kApiCases[] = {
    // resource paths
    {"GET",
     "/api/v1/namespaces",
     "list",
     "api",
     "",
     "v1",
     "",
     "namespaces",
     "",
     "",
     {"namespaces"}},
    {"GET",
     "/api/v1/namespaces/other",
     "get",
     "api",
     "",
     "v1",
     "other",
     "namespaces",
     "",
     "other",
     {"namespaces", "other"}},
    {"GET",
     "/api/v1/namespaces/other/pods",
     "list",
     "api",
     "",
     "v1",
     "other",
     "pods",
     "",
     "",
     {"pods"}},
    {"GET",
     "/api/v1/namespaces/other/pods/foo",
     "get",
     "api",
     "",
     "v1",
     "other",
     "pods",
     "",
     "foo",
     {"pods", "foo"}},
    {"HEAD",
     "/api/v1/namespaces/other/pods/foo",
     "get",
     "api",
     "",
     "v1",
     "other",
     "pods",
     "",
     "foo",
     {"pods", "foo"}},
    {"GET", "/api/v1/pods", "list", "api", "", "v1", "", "pods", "", "", {"pods"}},
    {"HEAD", "/api/v1/pods", "list", "api", "", "v1", "", "pods", "", "", {"pods"}},
    {"GET",
     "/api/v1/namespaces/other/pods/foo",
     "get",
     "api",
     "",
     "v1",
     "other",
     "pods",
     "",
     "foo",
     {"pods", "foo"}},
    {"GET",
     "/api/v1/namespaces/other/pods",
     "list",
     "api",
     "",
     "v1",
     "other",
     "pods",
     "",
     "",
     {"pods"}},
    // A 2020 upstream table (kubernetes#94656) expected namespace "" here; that special case
    // was reverted and current requestinfo.go sets the namespace, as every other GET/PUT does.
    {"PATCH",
     "/api/v1/namespaces/new-namespace",
     "patch",
     "api",
     "",
     "v1",
     "new-namespace",
     "namespaces",
     "",
     "new-namespace",
     {"namespaces", "new-namespace"}},

    // special verbs
    {"GET",
     "/api/v1/proxy/namespaces/other/pods/foo",
     "proxy",
     "api",
     "",
     "v1",
     "other",
     "pods",
     "",
     "foo",
     {"pods", "foo"}},
    {"GET",
     "/api/v1/proxy/namespaces/other/pods/foo/subpath/not/a/subresource",
     "proxy",
     "api",
     "",
     "v1",
     "other",
     "pods",
     "",
     "foo",
     {"pods", "foo", "subpath", "not", "a", "subresource"}},
    {"GET", "/api/v1/watch/pods", "watch", "api", "", "v1", "", "pods", "", "", {"pods"}},
    {"GET", "/api/v1/pods?watch=true", "watch", "api", "", "v1", "", "pods", "", "", {"pods"}},
    {"GET", "/api/v1/pods?watch=false", "list", "api", "", "v1", "", "pods", "", "", {"pods"}},
    {"GET",
     "/api/v1/watch/namespaces/other/pods",
     "watch",
     "api",
     "",
     "v1",
     "other",
     "pods",
     "",
     "",
     {"pods"}},
    {"GET",
     "/api/v1/namespaces/other/pods?watch=1",
     "watch",
     "api",
     "",
     "v1",
     "other",
     "pods",
     "",
     "",
     {"pods"}},
    {"GET",
     "/api/v1/namespaces/other/pods?watch=0",
     "list",
     "api",
     "",
     "v1",
     "other",
     "pods",
     "",
     "",
     {"pods"}},

    // subresource identification
    {"GET",
     "/api/v1/namespaces/other/pods/foo/status",
     "get",
     "api",
     "",
     "v1",
     "other",
     "pods",
     "status",
     "foo",
     {"pods", "foo", "status"}},
    {"GET",
     "/api/v1/namespaces/other/pods/foo/proxy/subpath",
     "get",
     "api",
     "",
     "v1",
     "other",
     "pods",
     "proxy",
     "foo",
     {"pods", "foo", "proxy", "subpath"}},
    {"PUT",
     "/api/v1/namespaces/other/finalize",
     "update",
     "api",
     "",
     "v1",
     "other",
     "namespaces",
     "finalize",
     "other",
     {"namespaces", "other", "finalize"}},
    {"PUT",
     "/api/v1/namespaces/other/status",
     "update",
     "api",
     "",
     "v1",
     "other",
     "namespaces",
     "status",
     "other",
     {"namespaces", "other", "status"}},

    // verb identification
    {"PATCH",
     "/api/v1/namespaces/other/pods/foo",
     "patch",
     "api",
     "",
     "v1",
     "other",
     "pods",
     "",
     "foo",
     {"pods", "foo"}},
    {"DELETE",
     "/api/v1/namespaces/other/pods/foo",
     "delete",
     "api",
     "",
     "v1",
     "other",
     "pods",
     "",
     "foo",
     {"pods", "foo"}},
    {"POST",
     "/api/v1/namespaces/other/pods",
     "create",
     "api",
     "",
     "v1",
     "other",
     "pods",
     "",
     "",
     {"pods"}},

    // deletecollection verb identification
    {"DELETE",
     "/api/v1/nodes",
     "deletecollection",
     "api",
     "",
     "v1",
     "",
     "nodes",
     "",
     "",
     {"nodes"}},
    {"DELETE",
     "/api/v1/namespaces",
     "deletecollection",
     "api",
     "",
     "v1",
     "",
     "namespaces",
     "",
     "",
     {"namespaces"}},
    {"DELETE",
     "/api/v1/namespaces/other/pods",
     "deletecollection",
     "api",
     "",
     "v1",
     "other",
     "pods",
     "",
     "",
     {"pods"}},
    {"DELETE",
     "/apis/extensions/v1/namespaces/other/pods",
     "deletecollection",
     "apis",
     "extensions",
     "v1",
     "other",
     "pods",
     "",
     "",
     {"pods"}},

    // api group identification
    {"POST",
     "/apis/extensions/v1/namespaces/other/pods",
     "create",
     "apis",
     "extensions",
     "v1",
     "other",
     "pods",
     "",
     "",
     {"pods"}},

    // api version identification
    {"POST",
     "/apis/extensions/v1beta3/namespaces/other/pods",
     "create",
     "apis",
     "extensions",
     "v1beta3",
     "other",
     "pods",
     "",
     "",
     {"pods"}},
};

class RequestInfoApiTest : public ::testing::TestWithParam<ApiCase> {};

TEST_P(RequestInfoApiTest, MatchesUpstream) {
  const ApiCase& c = GetParam();
  std::vector<std::string> parts;
  RequestInfo info = ParseRequestInfo(c.method, c.url, &parts);
  SCOPED_TRACE(std::string(c.method) + " " + c.url);
  EXPECT_TRUE(info.is_resource_request);
  EXPECT_EQ(info.verb, c.verb);
  EXPECT_EQ(info.api_prefix, c.api_prefix);
  EXPECT_EQ(info.api_group, c.api_group);
  EXPECT_EQ(info.api_version, c.api_version);
  EXPECT_EQ(info.namespace_, c.namespace_);
  EXPECT_EQ(info.resource, c.resource);
  EXPECT_EQ(info.subresource, c.subresource);
  EXPECT_EQ(info.name, c.name);
  EXPECT_EQ(parts, c.parts);
  EXPECT_EQ(info.parts_count, c.parts.size());
}

INSTANTIATE_TEST_SUITE_P(RequestInfoTestGetAPIRequestInfo, RequestInfoApiTest,
                         ::testing::ValuesIn(kApiCases));

// TestGetAPIRequestInfo's errorCases: all non-resource requests.
TEST(RequestInfoTest, UpstreamErrorCasesAreNonResource) {
  for (const char* url : {"/", "/api/version/", "/apis/group/version/", "/api/version/",
                          "/badprefix/version/resource", "/apis/version/resource"}) {
    SCOPED_TRACE(url);
    RequestInfo info = ParseRequestInfo("GET", url);
    EXPECT_FALSE(info.is_resource_request);
    EXPECT_EQ(info.verb, "get");
    EXPECT_EQ(info.path, url);
  }
}

struct NonApiCase {
  const char* name;
  const char* url;
  bool resource;
};

const NonApiCase kNonApiCases[] = {
    {"simple groupless", "/api/version/resource", true},
    {"simple group", "/apis/group/version/resource/name/subresource", true},
    {"more steps", "/api/version/resource/name/subresource", true},
    {"group list", "/apis/batch/v1/job", true},
    {"group get", "/apis/batch/v1/job/foo", true},
    {"group subresource", "/apis/batch/v1/job/foo/scale", true},
    {"bad root", "/not-api/version/resource", false},
    {"group without enough steps", "/apis/extensions/v1beta1", false},
    {"group without enough steps 2", "/apis/extensions/v1beta1/", false},
    {"not enough steps", "/api/version", false},
    {"one step", "/api", false},
    {"zero step", "/", false},
    {"empty", "", false},
};

TEST(RequestInfoTest, TestGetNonAPIRequestInfo) {
  for (const NonApiCase& c : kNonApiCases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(ParseRequestInfo("GET", c.url).is_resource_request, c.resource);
  }
}

struct SelectorCase {
  const char* name;
  const char* method;
  const char* url;
  const char* expected_name;
  const char* verb;
  const char* field_selector;
  const char* label_selector;
};

// TestFieldSelectorParsing (older upstream): name and verb only.
const SelectorCase kFieldSelectorCases[] = {
    {"no selector", "GET", "/apis/group/version/resource", "", "list", nullptr, nullptr},
    {"metadata.name selector", "GET",
     "/apis/group/version/resource?fieldSelector=metadata.name=name1", "name1", "list", nullptr,
     nullptr},
    {"metadata.name selector with watch", "GET",
     "/apis/group/version/resource?watch=true&fieldSelector=metadata.name=name1", "name1", "watch",
     nullptr, nullptr},
    {"random selector", "GET", "/apis/group/version/resource?fieldSelector=foo=bar", "", "list",
     nullptr, nullptr},
    {"invalid selector with metadata.name", "GET",
     "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo", "", "list", nullptr,
     nullptr},
    {"invalid selector with metadata.name with watch", "GET",
     "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo&watch=true", "", "watch",
     nullptr, nullptr},
    {"invalid selector with metadata.name with watch false", "GET",
     "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo&watch=false", "", "list",
     nullptr, nullptr},
};

// TestSelectorParsing (current upstream, AuthorizeWithSelectors on).
const SelectorCase kSelectorCases[] = {
    {"no selector", "GET", "/apis/group/version/resource", "", "list", "", ""},
    {"metadata.name selector", "GET",
     "/apis/group/version/resource?fieldSelector=metadata.name=name1", "name1", "list",
     "metadata.name=name1", ""},
    {"metadata.name selector with watch", "GET",
     "/apis/group/version/resource?watch=true&fieldSelector=metadata.name=name1", "name1", "watch",
     "metadata.name=name1", ""},
    {"random selector", "GET",
     "/apis/group/version/resource?fieldSelector=foo=bar&labelSelector=baz=qux", "", "list",
     "foo=bar", "baz=qux"},
    {"invalid selector with metadata.name", "GET",
     "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo", "", "list",
     "metadata.name=name1,foo", ""},
    {"invalid selector with metadata.name with watch", "GET",
     "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo&watch=true", "", "watch",
     "metadata.name=name1,foo", ""},
    {"invalid selector with metadata.name with watch false", "GET",
     "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo&watch=false", "", "list",
     "metadata.name=name1,foo", ""},
    {"selector on deletecollection is honored", "DELETE",
     "/apis/group/version/resource?fieldSelector=foo=bar&labelSelector=baz=qux", "",
     "deletecollection", "foo=bar", "baz=qux"},
    {"selector on repeated param matches parsed param", "GET",
     "/apis/group/version/resource?fieldSelector=metadata.name=foo&fieldSelector=metadata.name=bar"
     "&labelSelector=foo=bar&labelSelector=foo=baz",
     "foo", "list", "metadata.name=foo", "foo=bar"},
    {"selector on other verb is ignored", "GET",
     "/apis/group/version/resource/name?fieldSelector=foo=bar&labelSelector=foo=bar", "name", "get",
     "", ""},
    {"selector on deprecated root type watch is not parsed", "GET",
     "/apis/group/version/watch/resource?fieldSelector=metadata.name=foo&labelSelector=foo=bar", "",
     "watch", "", ""},
    {"selector on deprecated root item watch is not parsed", "GET",
     "/apis/group/version/watch/resource/"
     "name?fieldSelector=metadata.name=foo&labelSelector=foo=bar",
     "name", "watch", "", ""},
};

void CheckSelectorCase(const SelectorCase& c) {
  SCOPED_TRACE(c.name);
  RequestInfo info = ParseRequestInfo(c.method, c.url);
  EXPECT_EQ(info.name, c.expected_name);
  EXPECT_EQ(info.verb, c.verb);
  if (c.field_selector) {
    EXPECT_EQ(info.field_selector, c.field_selector);
  }
  if (c.label_selector) {
    EXPECT_EQ(info.label_selector, c.label_selector);
  }
}

TEST(RequestInfoTest, TestFieldSelectorParsing) {
  for (const SelectorCase& c : kFieldSelectorCases) CheckSelectorCase(c);
}

TEST(RequestInfoTest, TestSelectorParsing) {
  for (const SelectorCase& c : kSelectorCases) CheckSelectorCase(c);
}

// --- beyond upstream's tables: the Go behaviour the rules above rely on ---

TEST(RequestInfoTest, NonResourceVerbIsLowerCasedMethod) {
  EXPECT_EQ(ParseRequestInfo("GET", "/healthz").verb, "get");
  EXPECT_EQ(ParseRequestInfo("OPTIONS", "/apis").verb, "options");
  EXPECT_EQ(ParseRequestInfo("Post", "/version").verb, "post");
  RequestInfo info = ParseRequestInfo("GET", "/readyz?verbose");
  EXPECT_EQ(info.path, "/readyz");
  EXPECT_FALSE(info.is_resource_request);
}

TEST(RequestInfoTest, UnknownMethodOnResourceHasEmptyVerb) {
  // Methods are matched case-sensitively, as Go's switch on req.Method does.
  EXPECT_EQ(ParseRequestInfo("OPTIONS", "/api/v1/pods").verb, "");
  EXPECT_EQ(ParseRequestInfo("get", "/api/v1/pods").verb, "");
}

TEST(RequestInfoTest, SpecialVerbWithoutResourceStaysResourceRequest) {
  // Upstream returns an error with the info as far as parsed.
  RequestInfo info = ParseRequestInfo("GET", "/api/v1/watch");
  EXPECT_TRUE(info.is_resource_request);
  EXPECT_EQ(info.verb, "get");
  EXPECT_EQ(info.resource, "");
}

TEST(RequestInfoTest, LegacyWatchOfOneObject) {
  RequestInfo info = ParseRequestInfo("GET", "/api/v1/watch/namespaces/ns/pods/p1");
  EXPECT_EQ(info.verb, "watch");
  EXPECT_TRUE(info.verb_via_path_prefix);
  EXPECT_EQ(info.name, "p1");
  EXPECT_EQ(info.namespace_, "ns");
}

TEST(RequestInfoTest, UpdateLoopShapedRequest) {
  RequestInfo info = ParseRequestInfo(
      "PUT", "/apis/batch.company.com/v1/namespaces/team-a/datajobs/job-17?fieldManager=op");
  EXPECT_TRUE(info.is_resource_request);
  EXPECT_EQ(info.verb, "update");
  EXPECT_EQ(info.api_group, "batch.company.com");
  EXPECT_EQ(info.resource, "datajobs");
  EXPECT_EQ(info.namespace_, "team-a");
  EXPECT_EQ(info.name, "job-17");
  EXPECT_EQ(info.path, "/apis/batch.company.com/v1/namespaces/team-a/datajobs/job-17");
}

TEST(RequestInfoTest, WatchValuesFollowConvertSliceStringToBool) {
  for (const char* q : {"watch=true", "watch=1", "watch=", "watch", "watch=yes", "watch=TRUE",
                        "watch=t", "watch=true&watch=false"}) {
    SCOPED_TRACE(q);
    EXPECT_EQ(ParseRequestInfo("GET", std::string("/api/v1/pods?") + q).verb, "watch");
  }
  for (const char* q : {"watch=false", "watch=FALSE", "watch=False", "watch=0",
                        "watch=false&watch=true", "watchx=true", "watch%3Dtrue"}) {
    SCOPED_TRACE(q);
    EXPECT_EQ(ParseRequestInfo("GET", std::string("/api/v1/pods?") + q).verb, "list");
  }
}

TEST(RequestInfoTest, QueryIsUrlDecoded) {
  EXPECT_EQ(ParseRequestInfo("GET", "/api/v1/pods?%77atch=%74rue").verb, "watch");
  // Go drops pairs containing ';' and pairs with bad escapes.
  EXPECT_EQ(ParseRequestInfo("GET", "/api/v1/pods?watch=true;x=1").verb, "list");
  EXPECT_EQ(ParseRequestInfo("GET", "/api/v1/pods?watch=%zz").verb, "list");
  RequestInfo info = ParseRequestInfo(
      "GET",
      "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dweb-0&labelSelector=a+in+(b)");
  EXPECT_EQ(info.name, "web-0");
  EXPECT_EQ(info.field_selector, "metadata.name=web-0");
  EXPECT_EQ(info.label_selector, "a in (b)");
}

TEST(RequestInfoTest, PathIsUrlDecodedBeforeSplitting) {
  RequestInfo info = ParseRequestInfo("GET", "/api/v1/namespaces/n%73/pods/p%2Fq");
  EXPECT_EQ(info.path, "/api/v1/namespaces/ns/pods/p/q");
  EXPECT_EQ(info.namespace_, "ns");
  EXPECT_EQ(info.name, "p");
  EXPECT_EQ(info.subresource, "q");
  // '+' is literal in a path.
  EXPECT_EQ(ParseRequestInfo("GET", "/api/v1/namespaces/ns/pods/a+b").name, "a+b");
  // Go would reject a bad escape; keep the raw path rather than guess.
  EXPECT_EQ(ParseRequestInfo("GET", "/api/v1/pods/%zz").path, "/api/v1/pods/%zz");
}

TEST(RequestInfoTest, AbsoluteFormTarget) {
  RequestInfo info = ParseRequestInfo("GET", "https://10.0.0.1:6443/api/v1/nodes?watch=1");
  EXPECT_EQ(info.verb, "watch");
  EXPECT_EQ(info.resource, "nodes");
  EXPECT_EQ(info.path, "/api/v1/nodes");
}

TEST(RequestInfoTest, SlashesAreTrimmedAndEmptySegmentsKept) {
  RequestInfo info = ParseRequestInfo("GET", "//api/v1//pods/");
  EXPECT_TRUE(info.is_resource_request);
  EXPECT_EQ(info.resource, "");
  EXPECT_EQ(info.name, "pods");  // parts: ["", "pods"], as Go's strings.Split gives
}

TEST(RequestInfoTest, FieldSelectorNameNeedsCleanListOptions) {
  const std::string base = "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name=web-0";
  EXPECT_EQ(ParseRequestInfo("GET", base).name, "web-0");
  EXPECT_EQ(ParseRequestInfo("GET", base + "&limit=500").name, "web-0");
  EXPECT_EQ(ParseRequestInfo("GET", base + "&limit=%2B500").name, "web-0");
  EXPECT_EQ(ParseRequestInfo("GET", base + "&timeoutSeconds=300&watch=1").name, "web-0");
  // Any ListOptions decode error drops the name but keeps list/watch.
  EXPECT_EQ(ParseRequestInfo("GET", base + "&limit=abc").name, "");
  EXPECT_EQ(ParseRequestInfo("GET", base + "&limit=").name, "");
  EXPECT_EQ(ParseRequestInfo("GET", base + "&timeoutSeconds=1.5").name, "");
  EXPECT_EQ(ParseRequestInfo("GET", base + "&labelSelector=a%3D%3Db%3D%3Dc").name, "");
  RequestInfo watch = ParseRequestInfo("GET", base + "&limit=abc&watch=true");
  EXPECT_EQ(watch.name, "");
  EXPECT_EQ(watch.verb, "watch");
  // The name must be a valid path segment.
  EXPECT_EQ(ParseRequestInfo("GET", "/api/v1/pods?fieldSelector=metadata.name%3Da%2Fb").name, "");
  EXPECT_EQ(ParseRequestInfo("GET", "/api/v1/pods?fieldSelector=metadata.name%3D..").name, "");
  EXPECT_EQ(ParseRequestInfo("GET", "/api/v1/pods?fieldSelector=metadata.name%3Da%25b").name, "");
  // "==" is an exact match too, "!=" is not.
  EXPECT_EQ(ParseRequestInfo("GET", "/api/v1/pods?fieldSelector=metadata.name%3D%3Dx").name, "x");
  EXPECT_EQ(ParseRequestInfo("GET", "/api/v1/pods?fieldSelector=metadata.name!%3Dx").name, "");
  // Only for GET: a DELETE with the same selector stays a deletecollection.
  RequestInfo del = ParseRequestInfo("DELETE", base);
  EXPECT_EQ(del.verb, "deletecollection");
  EXPECT_EQ(del.name, "");
}

TEST(RequestInfoTest, QueryParam) {
  const char* target = "/api/v1/pods?limit=500&resourceVersion=&continue=abc%3D%3D&x=a+b&x=c";
  EXPECT_EQ(QueryParam(target, "limit"), "500");
  EXPECT_EQ(QueryParam(target, "resourceVersion"), "");
  EXPECT_EQ(QueryParam(target, "continue"), "abc==");
  EXPECT_EQ(QueryParam(target, "x"), "a b");
  EXPECT_EQ(QueryParam(target, "missing"), std::nullopt);
  EXPECT_EQ(QueryParam("/api/v1/pods", "limit"), std::nullopt);
  EXPECT_EQ(QueryParam("/api/v1/pods?", "limit"), std::nullopt);
  EXPECT_EQ(QueryParam("/api/v1/pods?%72esourceVersion=0", "resourceVersion"), "0");
  EXPECT_EQ(QueryParam("/api/v1/pods?resourceVersion=0#frag", "resourceVersion"), "0");
}

TEST(RequestInfoTest, ParseQueryLikeGo) {
  auto q = ParseQuery("a=1&&b&c=%41&d=x;y&e=%g1&=v&f=1=2");
  QueryParams want = {{"a", "1"}, {"b", ""}, {"c", "A"}, {"", "v"}, {"f", "1=2"}};
  EXPECT_EQ(q, want);
}

TEST(RequestInfoTest, PercentDecode) {
  EXPECT_EQ(PercentDecode("a%2Fb+c", false), "a/b+c");
  EXPECT_EQ(PercentDecode("a%2fb+c", true), "a/b c");
  EXPECT_EQ(PercentDecode("%", true), std::nullopt);
  EXPECT_EQ(PercentDecode("%4", true), std::nullopt);
  EXPECT_EQ(PercentDecode("%4g", true), std::nullopt);
  EXPECT_EQ(PercentDecode("", true), "");
  // Nothing to decode (the common case, copied in one go): '+' is a space only in queries.
  EXPECT_EQ(PercentDecode("/api/v1/namespaces/a+b/pods", false), "/api/v1/namespaces/a+b/pods");
  EXPECT_EQ(PercentDecode("a+b", true), "a b");
  EXPECT_EQ(PercentDecode("plain", true), "plain");
}

TEST(RequestInfoTest, FieldSelectorParsing) {
  auto terms = ParseFieldSelector("spec.nodeName=n1,metadata.name==a\\,b,status.phase!=Running");
  ASSERT_TRUE(terms.ok()) << terms.error().message;
  ASSERT_EQ(terms->size(), 3u);
  EXPECT_EQ(RequiresExactMatch(*terms, "metadata.name"), "a,b");
  EXPECT_EQ(RequiresExactMatch(*terms, "spec.nodeName"), "n1");
  EXPECT_EQ(RequiresExactMatch(*terms, "status.phase"), std::nullopt);
  // Upstream sorts terms, so with two names the lexically smaller term wins.
  auto two = ParseFieldSelector("metadata.name=b,metadata.name=a");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(RequiresExactMatch(*two, "metadata.name"), "a");
  EXPECT_TRUE(ParseFieldSelector("").ok());
  EXPECT_TRUE(ParseFieldSelector(",,").ok());
  EXPECT_TRUE(ParseFieldSelector("x=").ok());
  EXPECT_FALSE(ParseFieldSelector("foo").ok());
  EXPECT_FALSE(ParseFieldSelector("a=b=c").ok());   // unescaped '='
  EXPECT_FALSE(ParseFieldSelector("a=b\\x").ok());  // bad escape
  EXPECT_FALSE(ParseFieldSelector("a=b\\").ok());   // dangling escape
}

TEST(RequestInfoTest, LabelSelectorValidationMatchesUpstream) {
  // k8s.io/apimachinery/pkg/labels selector_test.go TestSelectorParse.
  for (const char* good :
       {"x=a,y=b,z=c", "", "x!=a,y=b", "x=", "x= ", "x=,z= ", "x= ,z= ", "!x", "x>1", "x>1,z<5",
        "x in (a,b,c)", "x in (a,b),y in (c,d)", "x notin (a,b,c)", "x in (a,b),y notin (a,b)",
        "x in ()", "x in (,a)", "example.com/app=web", "in=notin", "x==y"}) {
    EXPECT_TRUE(ValidateLabelSelector(good).ok()) << good;
  }
  for (const char* bad : {"x=a||y=b",
                          "x==a==b",
                          "!x=a",
                          "x<a",
                          "x in a",
                          "x in (a",
                          "x in (a,b",
                          "x=(a,b)",
                          "!!!",
                          "app in (",
                          ",",
                          "x,",
                          "x>",
                          "x>1.5",
                          "Example.com/app=web",
                          "a/b/c=d",
                          "x=-a",
                          "-x=a",
                          "x>-3",
                          "x="
                          "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}) {
    EXPECT_FALSE(ValidateLabelSelector(bad).ok()) << bad;
  }
  EXPECT_EQ(*ValidateLabelSelector("a,b=c,!d"), 3u);
}

// The pipeline parses every request into one RequestInfo: each parse must leave it exactly as a
// fresh parse would, whatever the previous request left in it.
TEST(RequestInfoInto, ReusedInfoEqualsAFreshParse) {
  const std::pair<const char*, const char*> requests[] = {
      {"GET", "/apis/apps/v1/namespaces/team-a/deployments?labelSelector=app%3Dweb&fieldSelector=metadata.name%3Dweb-1"},
      {"GET", "/healthz"},
      {"GET", "/api/v1/watch/namespaces/kube-system/pods/coredns-5d78c9869d-abcde"},
      {"PUT", "/apis/batch.company.com/v1/namespaces/team-a/datajobs/job-17/status"},
      {"GET", "/api/v1/pods/%zz"},
      {"DELETE", "/api/v1/namespaces/ns/configmaps?labelSelector=tier%3Dcache"},
      {"OPTIONS", "/apis"},
      {"GET", "/api/v1/namespaces/ns/pods?watch=true&fieldSelector=spec.nodeName%3Dnode-1"},
  };
  RequestInfo reused;
  std::vector<std::string> reused_parts;
  for (int round = 0; round < 2; ++round) {
    for (const auto& [method, target] : requests) {
      std::vector<std::string> parts;
      const RequestInfo fresh = ParseRequestInfo(method, target, &parts);
      ParseRequestInfoInto(method, target, reused, &reused_parts);
      EXPECT_EQ(reused, fresh) << method << " " << target;
      EXPECT_EQ(reused_parts, parts) << method << " " << target;
    }
  }
  // The sequence does exercise every field: a selector, a name from it, then none of them.
  EXPECT_EQ(ParseRequestInfo("GET", requests[0].second).name, "web-1");
  EXPECT_EQ(ParseRequestInfo("GET", requests[0].second).label_selector, "app=web");
  EXPECT_EQ(ParseRequestInfo("PUT", requests[3].second).subresource, "status");
  EXPECT_TRUE(ParseRequestInfo("GET", requests[2].second).verb_via_path_prefix);
}

// Sinks test the verb by its number: every verb upstream's RequestInfo gives has its own, set
// with the string in every case (a reused RequestInfo included), and anything else is kOther.
TEST(RequestInfoInto, VerbKindFollowsTheVerb) {
  struct Case {
    const char* method;
    const char* target;
    const char* verb;
    KubeVerb kind;
  };
  const Case cases[] = {
      {"GET", "/api/v1/namespaces/ns/pods/p", "get", KubeVerb::kGet},
      {"HEAD", "/api/v1/namespaces/ns/pods/p", "get", KubeVerb::kGet},
      {"GET", "/api/v1/pods", "list", KubeVerb::kList},
      {"GET", "/api/v1/pods?watch=1", "watch", KubeVerb::kWatch},
      {"GET", "/api/v1/watch/namespaces/ns/pods", "watch", KubeVerb::kWatch},
      {"POST", "/apis/apps/v1/namespaces/ns/deployments", "create", KubeVerb::kCreate},
      {"PUT", "/apis/apps/v1/namespaces/ns/deployments/d/status", "update", KubeVerb::kUpdate},
      {"PATCH", "/api/v1/nodes/n", "patch", KubeVerb::kPatch},
      {"DELETE", "/api/v1/namespaces/ns/pods/p", "delete", KubeVerb::kDelete},
      {"DELETE", "/api/v1/namespaces/ns/pods", "deletecollection", KubeVerb::kDeleteCollection},
      {"GET", "/api/v1/proxy/namespaces/ns/pods/p", "proxy", KubeVerb::kProxy},
      {"OPTIONS", "/api/v1/pods", "", KubeVerb::kOther},  // a resource path: no verb upstream
      {"OPTIONS", "/openapi/v3", "options", KubeVerb::kOther},
      {"GET", "/healthz", "get", KubeVerb::kGet},
      {"PUT", "/healthz", "put", KubeVerb::kOther},
      {"get", "/api/v1/pods", "", KubeVerb::kOther},  // methods are case-sensitive upstream
  };
  RequestInfo reused;
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < std::size(cases); ++i) {
      const Case& c = cases[round == 0 ? i : std::size(cases) - 1 - i];
      ParseRequestInfoInto(c.method, c.target, reused);
      EXPECT_EQ(reused.verb, c.verb) << c.method << " " << c.target;
      EXPECT_EQ(reused.verb_kind, c.kind) << c.method << " " << c.target;
      EXPECT_EQ(KubeVerbOf(c.verb), c.kind) << c.verb;
      EXPECT_EQ(ParseRequestInfo(c.method, c.target).verb_kind, c.kind) << c.method << " " << c.target;
    }
  }
  EXPECT_EQ(KubeVerbOf("watchlist"), KubeVerb::kOther);
  EXPECT_EQ(KubeVerbOf("LIST"), KubeVerb::kOther);
}

// The pipeline parses a read's query once, with its RequestInfo, and takes its shape from that
// parse: the same shape as parsing the target again, the query emptied for what is no read.
TEST(RequestInfoInto, QueryParsedOnceGivesTheSameShape) {
  const std::pair<const char*, const char*> requests[] = {
      {"GET", "/api/v1/namespaces/ns/pods?limit=500&resourceVersion=0"},
      {"PATCH", "/apis/apps/v1/namespaces/ns/deployments/web?fieldManager=kubectl&limit=5"},
      {"GET", "/api/v1/pods?resourceVersion=12&resourceVersionMatch=Exact&labelSelector=a%3Db"},
      {"GET", "/api/v1/namespaces/ns/configmaps/cm?resourceVersion=7"},
      {"GET", "/api/v1/pods?watch=1&sendInitialEvents=true&timeoutSeconds=300&resourceVersion="},
      {"GET", "/api/v1/pods?continue=abc%3D&limit=50#fragment?limit=9"},
      {"GET", "/api/v1/pods#limit?limit=9"},
      {"DELETE", "/api/v1/namespaces/ns/pods?labelSelector=x"},
      {"GET", "/api/v1/watch/pods?resourceVersion=5"},
      {"GET", "https://10.0.0.1:6443/api/v1/pods?limit=3"},
  };
  RequestInfo info;
  QueryParams query = {{"left", "over"}};
  for (const auto& [method, target] : requests) {
    ParseRequestInfoInto(method, target, info, /*parts=*/nullptr, &query);
    const RequestInfo fresh = ParseRequestInfo(method, target);
    EXPECT_EQ(info, fresh) << method << " " << target;
    EXPECT_EQ(QueryShapeOf(info, query), ParseQueryShape(fresh, target)) << method << " " << target;
    const bool read = info.verb == "get" || info.verb == "list" || info.verb == "watch";
    EXPECT_EQ(IsRead(info.verb_kind), read) << method << " " << target;
    EXPECT_EQ(query.empty(), !read || std::string_view(target).find('?') == std::string_view::npos ||
                                 std::string_view(target).find('#') < std::string_view(target).find('?'))
        << method << " " << target;
  }
  // The cases do differ: a paged cache read, a fragment that is no query, a legacy watch.
  ParseRequestInfoInto("GET", requests[0].second, info, nullptr, &query);
  EXPECT_EQ(QueryShapeOf(info, query).limit, 500);
  EXPECT_EQ(QueryShapeOf(info, query).consistency, QueryShape::Consistency::kAny);
  ParseRequestInfoInto("GET", requests[5].second, info, nullptr, &query);
  EXPECT_EQ(QueryShapeOf(info, query).limit, 50);
  ParseRequestInfoInto("GET", requests[6].second, info, nullptr, &query);
  EXPECT_EQ(QueryShapeOf(info, query).limit, 0);
  EXPECT_EQ(QueryShapeOf(info, query).consistency, QueryShape::Consistency::kConsistent);
  ParseRequestInfoInto("GET", requests[8].second, info, nullptr, &query);
  EXPECT_EQ(QueryShapeOf(info, query).consistency, QueryShape::Consistency::kNotOlderThan);
}

TEST(PercentDecodeInto, ReusesItsOutputAndReportsBadEscapes) {
  std::string out = "left over from before";
  EXPECT_TRUE(PercentDecodeInto("a%2Fb+c", /*plus_is_space=*/true, out));
  EXPECT_EQ(out, "a/b c");
  EXPECT_TRUE(PercentDecodeInto("plain", /*plus_is_space=*/false, out));
  EXPECT_EQ(out, "plain");
  EXPECT_FALSE(PercentDecodeInto("bad%zz", /*plus_is_space=*/false, out));
  EXPECT_FALSE(PercentDecodeInto("cut%2", /*plus_is_space=*/false, out));
}

}  // namespace
}  // namespace stormwatch
