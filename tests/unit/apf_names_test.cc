// APF UID -> name: list parsing on lists shaped as kube-apiserver serves them (v1 from 1.29,
// v1beta3 from 1.26-1.31), the thread-safe table with its static fallback, the refresh policy on
// an injected clock, the source resolution, and a fetch that fails without leaking the token.
// ApfFetcherLive runs against the real test API server: tests/e2e/test_apf_names.py starts it.
#include "agent/kube/apf_names.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "agent/kube/apf_fetcher.h"

namespace stormwatch {
namespace {

constexpr int64_t kSec = 1'000'000'000;

// GET /apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations?resourceVersion=0 on
// 1.29: the mandatory exempt and catch-all levels and the suggested ones. Items of built-in
// lists carry no kind/apiVersion.
constexpr const char* kV1PriorityLevels = R"({
  "kind": "PriorityLevelConfigurationList",
  "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
  "metadata": {"resourceVersion": "5127"},
  "items": [
    {"metadata": {"name": "catch-all", "uid": "3b46dd0e-0a4f-4d5b-a3e1-4c2b8f6a7c01", "resourceVersion": "63",
      "generation": 1, "creationTimestamp": "2024-05-02T08:14:03Z",
      "annotations": {"apf.kubernetes.io/autoupdate-spec": "true"},
      "managedFields": [{"manager": "api-priority-and-fairness-config-producer-v1", "operation": "Update",
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "time": "2024-05-02T08:14:03Z", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:apf.kubernetes.io/autoupdate-spec": {}}}}}]},
     "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 5, "limitResponse": {"type": "Reject"},
       "lendablePercent": 0}},
     "status": {}},
    {"metadata": {"name": "exempt", "uid": "8a2f5c61-9e1d-4b7a-b0c3-2d4e6f8a1b02", "resourceVersion": "61",
      "generation": 1, "creationTimestamp": "2024-05-02T08:14:03Z",
      "annotations": {"apf.kubernetes.io/autoupdate-spec": "true"}},
     "spec": {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}},
     "status": {}},
    {"metadata": {"name": "global-default", "uid": "c0ffee00-1111-4222-8333-444455556603", "resourceVersion": "70", "generation": 1},
     "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 20, "lendablePercent": 50,
       "limitResponse": {"type": "Queue", "queuing": {"queues": 128, "handSize": 6, "queueLengthLimit": 50}}}},
     "status": {}},
    {"metadata": {"name": "leader-election", "uid": "c0ffee00-1111-4222-8333-444455556604", "resourceVersion": "66", "generation": 1},
     "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 10, "lendablePercent": 0,
       "limitResponse": {"type": "Queue", "queuing": {"queues": 16, "handSize": 4, "queueLengthLimit": 50}}}},
     "status": {}},
    {"metadata": {"name": "node-high", "uid": "c0ffee00-1111-4222-8333-444455556605", "resourceVersion": "65", "generation": 1},
     "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 40, "lendablePercent": 25,
       "limitResponse": {"type": "Queue", "queuing": {"queues": 64, "handSize": 6, "queueLengthLimit": 50}}}},
     "status": {}},
    {"metadata": {"name": "system", "uid": "c0ffee00-1111-4222-8333-444455556606", "resourceVersion": "64", "generation": 1},
     "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 30, "lendablePercent": 33,
       "limitResponse": {"type": "Queue", "queuing": {"queues": 64, "handSize": 6, "queueLengthLimit": 50}}}},
     "status": {}},
    {"metadata": {"name": "workload-high", "uid": "c0ffee00-1111-4222-8333-444455556607", "resourceVersion": "67", "generation": 1},
     "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 40, "lendablePercent": 50,
       "limitResponse": {"type": "Queue", "queuing": {"queues": 128, "handSize": 6, "queueLengthLimit": 50}}}},
     "status": {}},
    {"metadata": {"name": "workload-low", "uid": "c0ffee00-1111-4222-8333-444455556608", "resourceVersion": "68", "generation": 1},
     "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 100, "lendablePercent": 90,
       "limitResponse": {"type": "Queue", "queuing": {"queues": 128, "handSize": 6, "queueLengthLimit": 50}}}},
     "status": {}}
  ]
})";

// GET .../v1beta3/flowschemas?resourceVersion=0 on 1.28 (trimmed to the mandatory schemas and
// a few suggested ones).
constexpr const char* kV1beta3FlowSchemas = R"({
  "kind": "FlowSchemaList",
  "apiVersion": "flowcontrol.apiserver.k8s.io/v1beta3",
  "metadata": {"resourceVersion": "5127"},
  "items": [
    {"metadata": {"name": "exempt", "uid": "f5000000-0000-4000-8000-000000000001", "resourceVersion": "71", "generation": 1,
      "annotations": {"apf.kubernetes.io/autoupdate-spec": "true"}},
     "spec": {"priorityLevelConfiguration": {"name": "exempt"}, "matchingPrecedence": 1,
       "rules": [{"subjects": [{"kind": "Group", "group": {"name": "system:masters"}}],
         "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}],
         "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]},
     "status": {"conditions": [{"type": "Dangling", "status": "False", "lastTransitionTime": "2024-05-02T08:14:04Z",
       "reason": "Found", "message": "This FlowSchema references the PriorityLevelConfiguration object named \"exempt\" and it exists"}]}},
    {"metadata": {"name": "probes", "uid": "f5000000-0000-4000-8000-000000000002", "resourceVersion": "72", "generation": 1},
     "spec": {"priorityLevelConfiguration": {"name": "exempt"}, "matchingPrecedence": 2,
       "rules": [{"subjects": [{"kind": "Group", "group": {"name": "system:unauthenticated"}},
                               {"kind": "Group", "group": {"name": "system:authenticated"}}],
         "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz", "/livez"]}]}]},
     "status": {}},
    {"metadata": {"name": "system-leader-election", "uid": "f5000000-0000-4000-8000-000000000003", "resourceVersion": "73", "generation": 1},
     "spec": {"priorityLevelConfiguration": {"name": "leader-election"}, "matchingPrecedence": 100,
       "distinguisherMethod": {"type": "ByUser"}, "rules": []},
     "status": {}},
    {"metadata": {"name": "service-accounts", "uid": "f5000000-0000-4000-8000-000000000004", "resourceVersion": "80", "generation": 1},
     "spec": {"priorityLevelConfiguration": {"name": "workload-low"}, "matchingPrecedence": 9000,
       "distinguisherMethod": {"type": "ByUser"}, "rules": []},
     "status": {}},
    {"metadata": {"name": "global-default", "uid": "f5000000-0000-4000-8000-000000000005", "resourceVersion": "81", "generation": 1},
     "spec": {"priorityLevelConfiguration": {"name": "global-default"}, "matchingPrecedence": 9900,
       "distinguisherMethod": {"type": "ByUser"}, "rules": []},
     "status": {}},
    {"metadata": {"name": "catch-all", "uid": "f5000000-0000-4000-8000-000000000006", "resourceVersion": "82", "generation": 1},
     "spec": {"priorityLevelConfiguration": {"name": "catch-all"}, "matchingPrecedence": 10000,
       "distinguisherMethod": {"type": "ByUser"}, "rules": []},
     "status": {}}
  ]
})";

// The apiserver's answer when the ClusterRole is missing: a Status, not a list.
constexpr const char* kForbidden = R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
  "message":"flowschemas.flowcontrol.apiserver.k8s.io is forbidden: User \"system:serviceaccount:monitoring:stormwatch\" cannot list resource \"flowschemas\" in API group \"flowcontrol.apiserver.k8s.io\" at the cluster scope",
  "reason":"Forbidden","details":{"group":"flowcontrol.apiserver.k8s.io","kind":"flowschemas"},"code":403})";

TEST(ApfNamesParse, V1PriorityLevelsNameEveryLevelByUid) {
  Result<ApfUidNames> levels = ParseApfList(kV1PriorityLevels, "PriorityLevelConfigurationList");
  ASSERT_TRUE(levels.ok()) << levels.error().message;
  EXPECT_EQ(*levels, (ApfUidNames{
                         {"3b46dd0e-0a4f-4d5b-a3e1-4c2b8f6a7c01", "catch-all"},
                         {"8a2f5c61-9e1d-4b7a-b0c3-2d4e6f8a1b02", "exempt"},
                         {"c0ffee00-1111-4222-8333-444455556603", "global-default"},
                         {"c0ffee00-1111-4222-8333-444455556604", "leader-election"},
                         {"c0ffee00-1111-4222-8333-444455556605", "node-high"},
                         {"c0ffee00-1111-4222-8333-444455556606", "system"},
                         {"c0ffee00-1111-4222-8333-444455556607", "workload-high"},
                         {"c0ffee00-1111-4222-8333-444455556608", "workload-low"},
                     }));
}

TEST(ApfNamesParse, V1beta3FlowSchemasNameMandatoryAndSuggestedSchemas) {
  Result<ApfUidNames> schemas = ParseApfList(kV1beta3FlowSchemas, "FlowSchemaList");
  ASSERT_TRUE(schemas.ok()) << schemas.error().message;
  EXPECT_EQ(*schemas, (ApfUidNames{
                          {"f5000000-0000-4000-8000-000000000001", "exempt"},
                          {"f5000000-0000-4000-8000-000000000002", "probes"},
                          {"f5000000-0000-4000-8000-000000000003", "system-leader-election"},
                          {"f5000000-0000-4000-8000-000000000004", "service-accounts"},
                          {"f5000000-0000-4000-8000-000000000005", "global-default"},
                          {"f5000000-0000-4000-8000-000000000006", "catch-all"},
                      }));
}

TEST(ApfNamesParse, RefusesWhatIsNotTheExpectedList) {
  // The other kind of list: names must never land in the wrong table.
  EXPECT_FALSE(ParseApfList(kV1beta3FlowSchemas, "PriorityLevelConfigurationList").ok());
  EXPECT_FALSE(ParseApfList(kV1PriorityLevels, "FlowSchemaList").ok());
  Result<ApfUidNames> forbidden = ParseApfList(kForbidden, "FlowSchemaList");
  ASSERT_FALSE(forbidden.ok());
  EXPECT_EQ(forbidden.error().message, "not a FlowSchemaList");
  EXPECT_FALSE(ParseApfList("404 page not found\n", "FlowSchemaList").ok());
  EXPECT_FALSE(ParseApfList(R"({"kind":"FlowSchemaList","items":{}})", "FlowSchemaList").ok());
}

TEST(ApfNamesParse, EmptyListsAndIncompleteItems) {
  Result<ApfUidNames> empty = ParseApfList(R"({"kind":"FlowSchemaList","metadata":{},"items":[]})", "FlowSchemaList");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  // Items without a name or uid (or not objects) are skipped; the good one stays.
  Result<ApfUidNames> partial = ParseApfList(R"({"kind":"FlowSchemaList","items":[
      {"metadata":{"name":"no-uid"}}, {"metadata":{"uid":"u-noname"}}, {"metadata":{"name":"","uid":"u-empty"}},
      {"metadata":{"name":7,"uid":"u-number"}}, "junk", {"spec":{}},
      {"metadata":{"name":"kept","uid":"u-kept"}}]})",
                                             "FlowSchemaList");
  ASSERT_TRUE(partial.ok()) << partial.error().message;
  EXPECT_EQ(*partial, (ApfUidNames{{"u-kept", "kept"}}));
}

TEST(ApfNames, UnknownUidIsUnnamedUntilAnUpdateNamesIt) {
  ApfNames names;
  EXPECT_EQ(names.PriorityLevel("8a2f5c61-9e1d-4b7a-b0c3-2d4e6f8a1b02"), std::nullopt);
  names.Update(*ParseApfList(kV1PriorityLevels, "PriorityLevelConfigurationList"),
               *ParseApfList(kV1beta3FlowSchemas, "FlowSchemaList"));
  EXPECT_EQ(names.PriorityLevel("8a2f5c61-9e1d-4b7a-b0c3-2d4e6f8a1b02"), "exempt");
  EXPECT_EQ(names.PriorityLevel("c0ffee00-1111-4222-8333-444455556608"), "workload-low");
  EXPECT_EQ(names.FlowSchema("f5000000-0000-4000-8000-000000000004"), "service-accounts");
  EXPECT_EQ(names.FlowSchema("f5000000-0000-4000-8000-000000000006"), "catch-all");
  // Each lookup reads its own table: a flow schema UID is not a priority level.
  EXPECT_EQ(names.PriorityLevel("f5000000-0000-4000-8000-000000000004"), std::nullopt);
  EXPECT_EQ(names.FlowSchema("8a2f5c61-9e1d-4b7a-b0c3-2d4e6f8a1b02"), std::nullopt);
  EXPECT_EQ(names.PriorityLevel("00000000-0000-4000-8000-00000000dead"), std::nullopt);
  EXPECT_EQ(names.PriorityLevel(""), std::nullopt);
}

TEST(ApfNames, UpdateReplacesTheClusterNames) {
  ApfNames names;
  names.Update({{"pl-1", "workload-low"}}, {{"fs-1", "team-a"}});
  names.Update({{"pl-2", "team-b-level"}}, {{"fs-2", "team-b"}});
  EXPECT_EQ(names.PriorityLevel("pl-1"), std::nullopt);  // the object was deleted
  EXPECT_EQ(names.FlowSchema("fs-1"), std::nullopt);
  EXPECT_EQ(names.PriorityLevel("pl-2"), "team-b-level");
  EXPECT_EQ(names.FlowSchema("fs-2"), "team-b");
}

TEST(ApfNames, StaticMappingIsTheFallbackForBothKinds) {
  ApfNames names;
  names.SetStatic({{"pl-exempt", "exempt"}, {"fs-probes", "probes"}});
  // Before any fetch (or when fetching is not allowed): the static names.
  EXPECT_EQ(names.PriorityLevel("pl-exempt"), "exempt");
  EXPECT_EQ(names.FlowSchema("fs-probes"), "probes");
  EXPECT_EQ(names.PriorityLevel("pl-other"), std::nullopt);
  // The cluster's names win where they exist, and the static ones still fill the gaps.
  names.Update({{"pl-exempt", "exempt-renamed"}}, {});
  EXPECT_EQ(names.PriorityLevel("pl-exempt"), "exempt-renamed");
  EXPECT_EQ(names.FlowSchema("fs-probes"), "probes");
  names.Update({}, {});
  EXPECT_EQ(names.PriorityLevel("pl-exempt"), "exempt");
  names.SetStatic({});
  EXPECT_EQ(names.PriorityLevel("pl-exempt"), std::nullopt);
}

TEST(ApfRefreshSchedule, AtStartThenEveryFiveMinutes) {
  ApfRefreshSchedule schedule(300 * kSec, 60 * kSec);
  EXPECT_EQ(schedule.NextFetchNs(), 0);  // due at once
  schedule.FetchStarted(1000 * kSec);
  EXPECT_EQ(schedule.NextFetchNs(), 1300 * kSec);
  schedule.FetchStarted(1300 * kSec);
  EXPECT_EQ(schedule.NextFetchNs(), 1600 * kSec);
}

TEST(ApfRefreshSchedule, UnknownUidFetchesSoonButAtMostOnceAMinute) {
  ApfRefreshSchedule schedule(300 * kSec, 60 * kSec);
  schedule.FetchStarted(1000 * kSec);
  // Ten seconds after a fetch: not before a minute has passed since it.
  schedule.UnknownUid();
  EXPECT_EQ(schedule.NextFetchNs(), 1060 * kSec);
  // A stream of unknown UIDs does not bring it closer.
  schedule.UnknownUid();
  schedule.UnknownUid();
  EXPECT_EQ(schedule.NextFetchNs(), 1060 * kSec);
  // The fetch clears the request: back to the regular period.
  schedule.FetchStarted(1060 * kSec);
  EXPECT_EQ(schedule.NextFetchNs(), 1360 * kSec);
  // The next unknown UID: a minute after that fetch.
  schedule.UnknownUid();
  EXPECT_EQ(schedule.NextFetchNs(), 1120 * kSec);
}

TEST(ApfRefreshSchedule, UnknownUidBeforeTheFirstFetchChangesNothing) {
  ApfRefreshSchedule schedule(300 * kSec, 60 * kSec);
  schedule.UnknownUid();
  EXPECT_EQ(schedule.NextFetchNs(), 0);
}

const char* FakeEnv(const char* name, const std::map<std::string, std::string>& env) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : it->second.c_str();
}

TEST(ResolveApfSource, InClusterFromTheServiceEnvironment) {
  std::map<std::string, std::string> env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                                            {"KUBERNETES_SERVICE_PORT", "443"}};
  Result<ApfSourceOptions> source = ResolveApfSource({}, [&](const char* n) { return FakeEnv(n, env); });
  ASSERT_TRUE(source.ok()) << source.error().message;
  EXPECT_EQ(source->apiserver_url, "https://10.96.0.1:443");
  EXPECT_EQ(source->token_file, "/var/run/secrets/kubernetes.io/serviceaccount/token");
  EXPECT_EQ(source->ca_file, "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt");

  env["KUBERNETES_SERVICE_HOST"] = "fd00:10:96::1";
  source = ResolveApfSource({}, [&](const char* n) { return FakeEnv(n, env); });
  ASSERT_TRUE(source.ok()) << source.error().message;
  EXPECT_EQ(source->apiserver_url, "https://[fd00:10:96::1]:443");
}

TEST(ResolveApfSource, ExplicitUrlWinsAndMustBeHttps) {
  std::map<std::string, std::string> env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                                            {"KUBERNETES_SERVICE_PORT", "443"}};
  auto getenv_fn = [&](const char* n) { return FakeEnv(n, env); };
  ApfSourceOptions options;
  options.apiserver_url = "https://127.0.0.1:6443/";
  Result<ApfSourceOptions> source = ResolveApfSource(options, getenv_fn);
  ASSERT_TRUE(source.ok()) << source.error().message;
  EXPECT_EQ(source->apiserver_url, "https://127.0.0.1:6443");

  options.apiserver_url = "http://127.0.0.1:8080";  // the token would travel in clear
  EXPECT_FALSE(ResolveApfSource(options, getenv_fn).ok());
}

TEST(ResolveApfSource, OutsideAClusterWithoutUrlIsAnError) {
  std::map<std::string, std::string> env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}};
  Result<ApfSourceOptions> source = ResolveApfSource({}, [&](const char* n) { return FakeEnv(n, env); });
  ASSERT_FALSE(source.ok());
  EXPECT_NE(source.error().message.find("KUBERNETES_SERVICE_HOST"), std::string::npos);
}

class ApfFetcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("apf_fetcher_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(ApfFetcherTest, FailedFetchKeepsTheNamesAndNeverShowsTheToken) {
  const std::string token = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0LWNsYWltcw.c2lnbmF0dXJl";
  std::ofstream(dir_ / "token") << token << "\n";
  ApfNames names;
  names.Update({{"pl-1", "workload-low"}}, {{"fs-1", "service-accounts"}});
  ApfSourceOptions source;
  source.apiserver_url = "https://127.0.0.1:1";  // nothing listens on port 1
  source.token_file = dir_ / "token";
  source.ca_file = "";
  source.request_timeout = std::chrono::seconds(2);
  ApfFetcher fetcher(source, &names);

  EXPECT_FALSE(fetcher.FetchOnce());
  ApfFetchStats stats = fetcher.Stats();
  EXPECT_EQ(stats.fetches_ok, 0u);
  EXPECT_EQ(stats.fetches_failed, 1u);
  EXPECT_NE(stats.last_error.find("/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations"),
            std::string::npos)
      << stats.last_error;
  EXPECT_EQ(stats.last_error.find(token), std::string::npos);
  EXPECT_EQ(names.PriorityLevel("pl-1"), "workload-low");
  EXPECT_EQ(names.FlowSchema("fs-1"), "service-accounts");
}

TEST_F(ApfFetcherTest, MissingTokenFileIsAFailedFetch) {
  ApfNames names;
  ApfSourceOptions source;
  source.apiserver_url = "https://127.0.0.1:1";
  source.token_file = dir_ / "absent";
  ApfFetcher fetcher(source, &names);
  EXPECT_FALSE(fetcher.FetchOnce());
  ApfFetchStats stats = fetcher.Stats();
  EXPECT_EQ(stats.fetches_failed, 1u);
  EXPECT_EQ(stats.last_error, "cannot read token file " + (dir_ / "absent").string());

  std::ofstream(dir_ / "empty") << "\n";
  source.token_file = dir_ / "empty";
  ApfFetcher empty_token(source, &names);
  EXPECT_FALSE(empty_token.FetchOnce());
  EXPECT_EQ(empty_token.Stats().last_error, "token file " + (dir_ / "empty").string() + " is empty");
}

// Against the real test API server: tests/e2e/test_apf_names.py starts it with etcd, mints the
// service-account token, collects the UIDs the server returned in response headers, and passes
// {url, token_file, ca_file, priority_levels: {uid: name}, flow_schemas: {uid: name}} in the file
// named by STORMWATCH_APF_LIVE.
// DISABLED_: not part of the plain unit run (it needs the live server the e2e test starts).
TEST(ApfFetcherLive, DISABLED_NamesEveryUidTheServerReturns) {
  const char* spec_path = std::getenv("STORMWATCH_APF_LIVE");
  ASSERT_NE(spec_path, nullptr) << "run by tests/e2e/test_apf_names.py";
  nlohmann::json spec = nlohmann::json::parse(std::ifstream(spec_path));
  ApfSourceOptions source;
  source.apiserver_url = spec["url"].get<std::string>();
  source.token_file = spec["token_file"].get<std::string>();
  source.ca_file = spec["ca_file"].get<std::string>();
  source.unknown_uid_min_interval = std::chrono::seconds(0);  // the nudge is tested, not its limit
  Result<ApfSourceOptions> resolved = ResolveApfSource(source, [](const char*) { return nullptr; });
  ASSERT_TRUE(resolved.ok()) << resolved.error().message;

  ApfNames names;
  ApfFetcher fetcher(*resolved, &names);
  auto wait_for_fetches = [&](uint64_t n) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (std::chrono::steady_clock::now() < deadline) {
      ApfFetchStats s = fetcher.Stats();
      if (s.fetches_ok + s.fetches_failed >= n) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  fetcher.Start();
  wait_for_fetches(1);  // the fetch at start
  ApfFetchStats stats = fetcher.Stats();
  EXPECT_EQ(stats.fetches_ok, 1u) << stats.last_error;
  EXPECT_EQ(stats.fetches_failed, 0u);
  EXPECT_EQ(stats.api_version, "v1beta3");  // 1.28 serves no flowcontrol v1: 404, then v1beta3

  ASSERT_FALSE(spec["priority_levels"].empty());
  for (const auto& [uid, name] : spec["priority_levels"].items()) {
    EXPECT_EQ(names.PriorityLevel(uid), name.get<std::string>()) << uid;
    EXPECT_EQ(names.FlowSchema(uid), std::nullopt) << uid;
  }
  ASSERT_FALSE(spec["flow_schemas"].empty());
  for (const auto& [uid, name] : spec["flow_schemas"].items()) {
    EXPECT_EQ(names.FlowSchema(uid), name.get<std::string>()) << uid;
    EXPECT_EQ(names.PriorityLevel(uid), std::nullopt) << uid;
  }

  // An unknown UID makes the thread fetch again (the limit is 0 here), straight from v1beta3.
  fetcher.OnUnknownUid();
  wait_for_fetches(2);
  fetcher.Stop();
  stats = fetcher.Stats();
  EXPECT_EQ(stats.fetches_ok, 2u) << stats.last_error;
  EXPECT_EQ(stats.fetches_failed, 0u);
}

}  // namespace
}  // namespace stormwatch
