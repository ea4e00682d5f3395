// The /metrics contract: bounded client series (ClientCap, its Space-Saving sketch), every
// family's exact text, and promtool's linter on all of it.
#include "exporters/prometheus_exporter.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "agent/kube/record_keys.h"
#include "exporters/client_cap.h"

namespace stormwatch {
namespace {

constexpr int64_t kSec = 1'000'000'000;
constexpr int64_t kIdle = 600 * kSec;

std::string Metrics(const PrometheusExporter& e) {
  return prometheus::TextSerializer().Serialize(e.Collect());
}

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

// How many times `part` occurs in `text`.
size_t Count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// --- SpaceSaving ---

TEST(SpaceSavingTest, ExactWhileUnderCapacity) {
  SpaceSaving s(4);
  for (int i = 0; i < 5; ++i) s.Add("a");
  s.Add("b", 3);
  s.Add("c");
  EXPECT_EQ(s.Guaranteed("a"), 5u);
  EXPECT_EQ(s.Guaranteed("b"), 3u);
  EXPECT_EQ(s.Guaranteed("missing"), 0u);
  auto top = s.Top(2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0], (std::pair<std::string, uint64_t>{"a", 5}));
  EXPECT_EQ(top[1], (std::pair<std::string, uint64_t>{"b", 3}));
}

TEST(SpaceSavingTest, HeavyHitterSurvivesACrowdOfOneOffClients) {
  // 300 items, every third one from "heavy": 100 > 300 / capacity, so it is never replaced and
  // its count stays exact; the one-off clients only ever get an over-estimate (error) that
  // leaves their guaranteed count at 1.
  SpaceSaving s(4);
  for (int i = 0; i < 300; ++i) {
    s.Add(i % 3 == 0 ? "heavy" : "once-" + std::to_string(i));
  }
  EXPECT_EQ(s.size(), 4u);
  EXPECT_EQ(s.Guaranteed("heavy"), 100u);
  auto top = s.Top(4);
  ASSERT_FALSE(top.empty());
  EXPECT_EQ(top[0].first, "heavy");
  for (size_t i = 1; i < top.size(); ++i) EXPECT_EQ(top[i].second, 1u) << top[i].first;
}

TEST(SpaceSavingTest, DecayHalvesAndForgetsWhatReachesZero) {
  SpaceSaving s(4);
  s.Add("a", 9);
  s.Add("b", 1);
  s.Decay();
  EXPECT_EQ(s.Guaranteed("a"), 4u);
  EXPECT_EQ(s.Guaranteed("b"), 0u);
  EXPECT_EQ(s.size(), 1u);
  s.Erase("a");
  EXPECT_EQ(s.size(), 0u);
  EXPECT_TRUE(s.Top(4).empty());
}

// --- ClientCap ---

void Requests(ClientCap& cap, const std::string& client, int n) {
  for (int i = 0; i < n; ++i) cap.Admit(client, true);
}

TEST(ClientCapTest, AdmitsWhileThereIsRoomThenFolds) {
  ClientCap cap(2, kIdle);
  EXPECT_TRUE(cap.Admit("a", true));
  EXPECT_TRUE(cap.Admit("b", true));
  EXPECT_FALSE(cap.Admit("c", true));
  EXPECT_TRUE(cap.Admit("a", false));
  EXPECT_TRUE(cap.Admit(kOtherClient, true));  // never takes a slot
  EXPECT_EQ(cap.admitted(), 2u);
  EXPECT_EQ(cap.folded().Guaranteed(ClientName("c").key), 1u);
}

TEST(ClientCapTest, EndsClientsIdleForIdleSeconds) {
  ClientCap cap(2, kIdle);
  Requests(cap, "a", 1);
  Requests(cap, "b", 1);
  EXPECT_TRUE(cap.Compact(60 * kSec).empty());  // both last seen at 60 s
  for (int64_t t = 120; t <= 600; t += 60) {
    Requests(cap, "b", 1);
    EXPECT_TRUE(cap.Compact(t * kSec).empty()) << t;  // a idle for 540 s at 600 s
  }
  Requests(cap, "b", 1);
  EXPECT_EQ(cap.Compact(660 * kSec), std::vector<std::string>{"a"});  // idle for 600 s
  EXPECT_EQ(cap.admitted(), 1u);
}

TEST(ClientCapTest, FreedSlotGoesToTheHeaviestFoldedClient) {
  ClientCap cap(2, kIdle);
  Requests(cap, "a", 1);
  Requests(cap, "b", 1);
  // 20 requests a minute never add up to kMinDisplaceRequests (decay halves every minute), so
  // only a freed slot lets "heavy" in.
  for (int64_t t = 60; t <= 660; t += 60) {
    Requests(cap, "b", 1);
    Requests(cap, "heavy", 20);
    Requests(cap, "light", 1);
    EXPECT_EQ(cap.Compact(t * kSec), t == 660 ? std::vector<std::string>{"a"}
                                               : std::vector<std::string>{}) << t;
  }
  // The slot "a" left is kept for "heavy", not given to whoever comes first.
  EXPECT_EQ(cap.admitted(), 1u);
  EXPECT_FALSE(cap.Admit("light", true));
  EXPECT_TRUE(cap.Admit("heavy", true));
  EXPECT_EQ(cap.admitted(), 2u);
  EXPECT_FALSE(cap.Admit("light", true));
}

// A folded client displaces the least active admitted one only with at least kDisplaceFactor
// times its requests and at least kMinDisplaceRequests: both boundaries, both sides.
std::vector<std::string> DisplaceScenario(int a, int b, int newcomer) {
  ClientCap cap(2, kIdle);
  Requests(cap, "a", a);
  Requests(cap, "b", b);
  Requests(cap, "storm", newcomer);
  return cap.Compact(60 * kSec);
}

TEST(ClientCapTest, MuchHeavierFoldedClientDisplacesTheLeastActive) {
  static_assert(ClientCap::kDisplaceFactor == 4 && ClientCap::kMinDisplaceRequests == 60);
  EXPECT_EQ(DisplaceScenario(20, 30, 80), std::vector<std::string>{"a"});
  EXPECT_TRUE(DisplaceScenario(20, 30, 79).empty());
  EXPECT_EQ(DisplaceScenario(1, 1, 60).size(), 1u);
  EXPECT_TRUE(DisplaceScenario(1, 1, 59).empty());

  ClientCap cap(2, kIdle);
  Requests(cap, "a", 20);
  Requests(cap, "b", 30);
  Requests(cap, "storm", 200);
  EXPECT_EQ(cap.Compact(60 * kSec), std::vector<std::string>{"a"});
  EXPECT_TRUE(cap.Admit("storm", true));
  EXPECT_FALSE(cap.Admit("a", true));
  EXPECT_TRUE(cap.Admit("b", true));
}

// Past 16 candidates the sketch is indexed, and a full one counts a folded client only when it
// was seen more often lately than the candidate it would replace. The frequency sketch's keys
// are keyed hashes (a secret per process), so which light clients share counters differs from
// run to run: a light client whose four counters all collide (a few per run here) looks
// heavier and may take one candidate's place. Without the gate every light client takes one.
TEST(ClientCapTest, ALightCrowdLeavesTheCandidatesBeAndAStormIsCounted) {
  ClientCap cap(10, kIdle);  // 40 candidates
  for (int i = 0; i < 10; ++i) Requests(cap, "a" + std::to_string(i), 1);
  for (int i = 0; i < 40; ++i) Requests(cap, "c" + std::to_string(i), 1);
  ASSERT_EQ(cap.folded().size(), 40u);
  for (int i = 0; i < 2000; ++i) Requests(cap, "light" + std::to_string(i), 1);
  int kept = 0;
  for (int i = 0; i < 40; ++i) kept += cap.folded().Guaranteed(ClientName("c" + std::to_string(i)).key) == 1;
  EXPECT_GE(kept, 32);  // at most 8 of 2,000 light clients got in (without the gate: 40)
  // Counted from its second request (its first is no heavier than a candidate's single one;
  // a collision moves that by one either way), taking a candidate's slot and count (1) as its
  // error.
  Requests(cap, "storm", 100);
  EXPECT_GE(cap.folded().Guaranteed(ClientName("storm").key), 98u);
  EXPECT_LE(cap.folded().Guaranteed(ClientName("storm").key), 100u);
  EXPECT_EQ(cap.Compact(60 * kSec), std::vector<std::string>{"a0"});
  EXPECT_TRUE(cap.Admit("storm", true));
}

// The candidate a newcomer would replace is still counted: it is no lighter than itself.
TEST(ClientCapTest, TheLeastCountedCandidateIsStillCounted) {
  ClientCap cap(10, kIdle);  // 40 candidates
  for (int i = 0; i < 10; ++i) Requests(cap, "a" + std::to_string(i), 1);
  for (int i = 0; i < 39; ++i) Requests(cap, "c" + std::to_string(i), 3);
  Requests(cap, "late", 1);  // the 40th candidate, the least counted
  Requests(cap, "late", 50);
  // 51 unless a candidate's counters collide with others' and it looks heavier for a request
  // or two; never counted, it would stay at 1.
  EXPECT_GE(cap.folded().Guaranteed(ClientName("late").key), 48u);
  EXPECT_LE(cap.folded().Guaranteed(ClientName("late").key), 51u);
}

// --- PrometheusExporter ---

RequestLabels Get(const std::string& client, const std::string& code = "200") {
  return {client, "GET", "", "v1", "pods", "", "namespace", code};
}

TEST(PrometheusExporterTest, ClientsBeyondTheLimitAreCountedAsOther) {
  PrometheusExporter e(ClientSeriesLimits{.max_clients = 2, .idle_s = 600});
  e.CountRequest(Get("alice"), 100);
  e.CountRequest(Get("bob"), 100);
  for (int i = 0; i < 3; ++i) e.CountRequest(Get("carol"), 10);
  e.CountRequest(Get("dave"), 0);
  e.CountList("carol", "", "pods", "cluster", "consistent", false);
  e.CountList("alice", "", "pods", "cluster", "any", true);

  std::string m = Metrics(e);
  EXPECT_TRUE(Has(m, R"(stormwatch_requests_total{client="alice",code="200",group="",resource="pods",scope="namespace",subresource="",verb="GET",version="v1"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_requests_total{client="other",code="200",group="",resource="pods",scope="namespace",subresource="",verb="GET",version="v1"} 4)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_response_bytes_total{client="other",code="200",group="",resource="pods",scope="namespace",subresource="",verb="GET",version="v1"} 30)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_list_requests_total{client="other",consistency="consistent",group="",paginated="false",resource="pods",scope="cluster"} 1)")) << m;
  EXPECT_EQ(m.find("carol"), std::string::npos);
  EXPECT_EQ(m.find("dave"), std::string::npos);
  EXPECT_TRUE(Has(m, R"(stormwatch_series_folded_total{metric="stormwatch_requests_total"} 4)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_series_folded_total{metric="stormwatch_response_bytes_total"} 3)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_series_folded_total{metric="stormwatch_list_requests_total"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_client_series{metric="stormwatch_requests_total"} 3)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_client_series{metric="stormwatch_list_requests_total"} 2)")) << m;
}

// The exporter remembers the last client's counters between families; the map holding them
// grows (entries move) and shrinks (Compact) between two requests of one client.
TEST(PrometheusExporterTest, CountsStayExactWhileClientsComeAndGo) {
  PrometheusExporter e(ClientSeriesLimits{.max_clients = 300, .idle_s = 600});
  for (int round = 0; round < 3; ++round) {
    e.CountRequest(Get("steady"), 7);
    for (int i = 0; i < 200; ++i) e.CountRequest(Get("c" + std::to_string(round) + "-" + std::to_string(i)), 1);
    e.CountRequest(Get("steady"), 7);
    e.Compact(static_cast<int64_t>(round + 1) * 700 * kSec);  // ends the idle clients
  }
  e.CountRequest(Get("steady"), 7);
  const std::string m = Metrics(e);
  EXPECT_TRUE(Has(m, R"(stormwatch_requests_total{client="steady",code="200",group="",resource="pods",scope="namespace",subresource="",verb="GET",version="v1"} 7)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_response_bytes_total{client="steady",code="200",group="",resource="pods",scope="namespace",subresource="",verb="GET",version="v1"} 49)")) << m;
  EXPECT_EQ(m.find(R"(client="c0-0")"), std::string::npos) << m;
}

// A label set is found by a keyed hash of its labels, the resource pair's part given by the
// caller (the record's key) or hashed from the labels: the same set either way, and a set of
// its own for a change in any one label.
TEST(PrometheusExporterTest, ALabelSetIsFoundByEveryOneOfItsLabels) {
  PrometheusExporter e;
  const std::string kAlice = "alice", k200 = "200";
  const RequestObservation base{Get(kAlice, k200), 1, true, "workload-low", "service-accounts", -1};
  std::vector<RequestObservation> each(8, base);
  each[1].resource_key = HashFields({"", "pods"});  // given: the same set as base's
  each[2].labels.resource = "secrets";
  each[2].resource_key = HashFields({"", "secrets"});
  each[3].labels.code = "404";
  each[4].labels.version = "v2";
  each[5].labels.subresource = "status";
  each[6].labels.scope = "cluster";
  each[7].labels.verb = "LIST";
  for (const RequestObservation& o : each) e.CountRequest(o);
  RequestObservation high = base;
  high.priority_level = "workload-high";
  e.CountRequest(high);
  const std::string m = Metrics(e);
  auto series = [](std::string_view code, std::string_view resource, std::string_view scope,
                   std::string_view subresource, std::string_view verb, std::string_view version) {
    return std::string(R"(stormwatch_requests_total{client="alice",code=")") + std::string(code) +
           R"(",group="",resource=")" + std::string(resource) + R"(",scope=")" + std::string(scope) +
           R"(",subresource=")" + std::string(subresource) + R"(",verb=")" + std::string(verb) +
           R"(",version=")" + std::string(version) + R"("} )";
  };
  EXPECT_TRUE(Has(m, series("200", "pods", "namespace", "", "GET", "v1") + "3")) << m;  // + high
  EXPECT_TRUE(Has(m, series("200", "secrets", "namespace", "", "GET", "v1") + "1")) << m;
  EXPECT_TRUE(Has(m, series("404", "pods", "namespace", "", "GET", "v1") + "1")) << m;
  EXPECT_TRUE(Has(m, series("200", "pods", "namespace", "", "GET", "v2") + "1")) << m;
  EXPECT_TRUE(Has(m, series("200", "pods", "namespace", "status", "GET", "v1") + "1")) << m;
  EXPECT_TRUE(Has(m, series("200", "pods", "cluster", "", "GET", "v1") + "1")) << m;
  EXPECT_TRUE(Has(m, series("200", "pods", "namespace", "", "LIST", "v1") + "1")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_apf_requests_total{client="alice",flow_schema="service-accounts",priority_level="workload-low"} 8)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_apf_requests_total{client="alice",flow_schema="service-accounts",priority_level="workload-high"} 1)")) << m;
}

// CountRequest finds a label set's series once per client and keeps them: they must end with
// the client's series (a kept pointer to a removed counter would count into nothing, or crash),
// and a folded client must still count in "other" and in every family's folded counter.
TEST(PrometheusExporterTest, ARequestsCachedSeriesEndWithItsClientAndFoldedOnesCountAsOther) {
  PrometheusExporter e(ClientSeriesLimits{.max_clients = 2, .idle_s = 600});
  // The observations hold views: their strings outlive them.
  const std::string kAlice = "alice", kCarol = "carol", k200 = "200";
  RequestObservation alice{Get(kAlice, k200), 100, true, "workload-low", "service-accounts", 0.01};
  e.CountRequest(alice);
  e.CountRequest(alice);
  e.CountRequest(Get("bob"), 0);
  RequestObservation carol{Get(kCarol, k200), 5, true, "workload-low", "service-accounts", 0.3};
  e.CountRequest(carol);  // alice and bob hold the slots
  RequestObservation watch{Get(kAlice, k200), 0, false, "", "", -1};
  e.CountRequest(watch);
  std::string m = Metrics(e);
  const std::string pods = R"(code="200",group="",resource="pods",scope="namespace",subresource="",verb="GET",version="v1")";
  EXPECT_TRUE(Has(m, R"(stormwatch_requests_total{client="alice",)" + pods + "} 3")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_response_bytes_total{client="alice",)" + pods + "} 200")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_apf_requests_total{client="alice",flow_schema="service-accounts",priority_level="workload-low"} 2)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_requests_total{client="other",)" + pods + "} 1")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_response_bytes_total{client="other",)" + pods + "} 5")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_apf_requests_total{client="other",flow_schema="service-accounts",priority_level="workload-low"} 1)")) << m;
  for (const char* family : {"requests_total", "response_bytes_total", "apf_requests_total"}) {
    EXPECT_TRUE(Has(m, std::string(R"(stormwatch_series_folded_total{metric="stormwatch_)") + family + R"("} 1)")) << m;
  }
  EXPECT_TRUE(Has(m, R"(stormwatch_request_duration_seconds_count{group="",resource="pods",verb="GET"} 3)")) << m;  // not the WATCH
  EXPECT_TRUE(Has(m, R"(stormwatch_request_duration_seconds_bucket{group="",resource="pods",verb="GET",le="0.025"} 2)")) << m;

  e.Compact(60 * kSec);
  e.Compact(700 * kSec);  // alice idle for 640 s: her series end
  EXPECT_EQ(Metrics(e).find(R"(client="alice")"), std::string::npos);
  e.CountRequest(alice);
  m = Metrics(e);
  EXPECT_TRUE(Has(m, R"(stormwatch_requests_total{client="alice",)" + pods + "} 1")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_response_bytes_total{client="alice",)" + pods + "} 100")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_apf_requests_total{client="alice",flow_schema="service-accounts",priority_level="workload-low"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_request_duration_seconds_count{group="",resource="pods",verb="GET"} 4)")) << m;
}

// The request families are counted by the exporter itself (interned label sets, plain counts
// per client): one requests series per label set whatever the APF pair, one APF series per
// pair whatever the other labels, a family's series only once something counted in it, and
// stormwatch_client_series per family exact as clients come and go.
TEST(PrometheusExporterTest, RequestFamiliesKeepTheirOwnLabelSetsPerClient) {
  PrometheusExporter e(ClientSeriesLimits{.max_clients = 2, .idle_s = 600});
  const std::string kAlice = "alice", kBob = "bob", k200 = "200", k404 = "404";
  e.CountRequest({Get(kAlice, k200), 10, true, "workload-low", "service-accounts", 0.01});
  e.CountRequest({Get(kAlice, k200), 20, true, "global-default", "global-default", 0.01});
  e.CountRequest({Get(kAlice, k404), 30, true, "workload-low", "service-accounts", 0.01});
  e.CountRequest({Get(kBob, k200), 0, false, "", "", 0.01});  // no bytes, no APF pair
  // Names not known and names "unknown" are one series, as exposed.
  e.CountRequest({Get(kBob, k200), 0, true, "", "unknown", 0.01});
  e.CountRequest({Get(kBob, k200), 0, true, "unknown", "", 0.01});
  std::string m = Metrics(e);
  const std::string pods = R"(group="",resource="pods",scope="namespace",subresource="",verb="GET",version="v1")";
  EXPECT_TRUE(Has(m, R"(stormwatch_requests_total{client="alice",code="200",)" + pods + "} 2")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_requests_total{client="alice",code="404",)" + pods + "} 1")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_requests_total{client="bob",code="200",)" + pods + "} 3")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_response_bytes_total{client="alice",code="200",)" + pods + "} 30")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_response_bytes_total{client="alice",code="404",)" + pods + "} 30")) << m;
  EXPECT_EQ(m.find(R"(stormwatch_response_bytes_total{client="bob")"), std::string::npos) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_apf_requests_total{client="alice",flow_schema="service-accounts",priority_level="workload-low"} 2)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_apf_requests_total{client="alice",flow_schema="global-default",priority_level="global-default"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_apf_requests_total{client="bob",flow_schema="unknown",priority_level="unknown"} 2)")) << m;
  EXPECT_EQ(Count(m, "\nstormwatch_apf_requests_total{"), 3u) << m;
  // Two series of alice's, one of bob's: no line per APF pair.
  EXPECT_EQ(Count(m, "\nstormwatch_requests_total{"), 3u) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_client_series{metric="stormwatch_requests_total"} 2)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_client_series{metric="stormwatch_response_bytes_total"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_client_series{metric="stormwatch_apf_requests_total"} 2)")) << m;
  EXPECT_TRUE(Has(m, "# TYPE stormwatch_requests_total counter")) << m;
  // The duration histogram is the exporter's too: every request of (GET, pods) in it, in the
  // 0.025 s bucket (le: less or equal) and all the ones above, +Inf last.
  EXPECT_TRUE(Has(m, R"(stormwatch_request_duration_seconds_bucket{group="",resource="pods",verb="GET",le="0.005"} 0)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_request_duration_seconds_bucket{group="",resource="pods",verb="GET",le="0.025"} 6)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_request_duration_seconds_bucket{group="",resource="pods",verb="GET",le="+Inf"} 6)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_request_duration_seconds_count{group="",resource="pods",verb="GET"} 6)")) << m;
  EXPECT_TRUE(Has(m, "# TYPE stormwatch_request_duration_seconds histogram")) << m;

  e.Compact(60 * kSec);
  e.CountRequest({Get(kBob, k200), 0, false, "", "", 0.01});
  e.Compact(700 * kSec);  // alice idle for 640 s: her series end, bob's stay
  m = Metrics(e);
  EXPECT_EQ(m.find(R"(client="alice")"), std::string::npos) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_requests_total{client="bob",code="200",)" + pods + "} 4")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_client_series{metric="stormwatch_requests_total"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_client_series{metric="stormwatch_response_bytes_total"} 0)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_client_series{metric="stormwatch_apf_requests_total"} 1)")) << m;
  EXPECT_EQ(Count(m, "\nstormwatch_apf_requests_total{"), 1u) << m;
  // Families without series are left out, as prometheus-cpp's are.
  EXPECT_EQ(m.find("stormwatch_response_bytes_total{"), std::string::npos) << m;
  EXPECT_EQ(m.find("# TYPE stormwatch_response_bytes_total"), std::string::npos) << m;
}

// Every client family is the exporter's own: a client's series in each of them, one label set
// per distinct labels, counted exactly, all ended with the client, and each family's
// stormwatch_client_series back to what the remaining clients hold.
TEST(PrometheusExporterTest, EveryClientFamilyCountsAndEndsWithItsClient) {
  PrometheusExporter e(ClientSeriesLimits{.max_clients = 2, .idle_s = 600});
  const ClientName op("operator"), etcd("kube-apiserver-etcd-client");
  for (int i = 0; i < 3; ++i) e.CountList(op, "apps", "deployments", "cluster", "consistent", false);
  e.CountList(op, "apps", "deployments", "cluster", "consistent", true);
  e.CountThrottled(op, "workload-low", 1);
  e.CountThrottled(op, "", -1);
  e.CountThrottled(op, "unknown", -1);  // as exposed, one series with the one not known
  e.CountWatch(op, "apps", "deployments", 30, false);
  e.CountEtcdRequest("/etcdserverpb.KV/Range", "deployments", etcd, "OK");
  e.CountEtcdRange("deployments", etcd, 0, 0);  // an empty Range: its series, at 0
  e.CountEtcdRange("deployments", etcd, 5, 700);
  e.CountEtcdStreamMessage("/etcdserverpb.Watch/Watch", "watch_create", "pods", etcd);
  std::string m = Metrics(e);
  const std::string list = R"(stormwatch_list_requests_total{client="operator",consistency="consistent",group="apps",)";
  EXPECT_TRUE(Has(m, list + R"(paginated="false",resource="deployments",scope="cluster"} 3)")) << m;
  EXPECT_TRUE(Has(m, list + R"(paginated="true",resource="deployments",scope="cluster"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_throttled_requests_total{client="operator",priority_level="workload-low"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_throttled_requests_total{client="operator",priority_level="unknown"} 2)")) << m;
  EXPECT_EQ(Count(m, "\nstormwatch_throttled_requests_total{"), 2u) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_watches_total{client="operator",group="apps",resource="deployments",send_initial_events="false"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_etcd_requests_total{client="kube-apiserver-etcd-client",code="OK",method="/etcdserverpb.KV/Range",resource="deployments"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_etcd_range_keys_total{client="kube-apiserver-etcd-client",resource="deployments"} 5)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_etcd_range_bytes_total{client="kube-apiserver-etcd-client",resource="deployments"} 700)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_etcd_stream_messages_total{client="kube-apiserver-etcd-client",message="watch_create",method="/etcdserverpb.Watch/Watch",resource="pods"} 1)")) << m;
  EXPECT_TRUE(Has(m, "# TYPE stormwatch_etcd_range_bytes_total counter")) << m;
  for (const char* family : {"list_requests_total", "throttled_requests_total", "watches_total",
                             "etcd_requests_total", "etcd_range_keys_total",
                             "etcd_range_bytes_total", "etcd_stream_messages_total"}) {
    EXPECT_TRUE(Has(m, std::string(R"(stormwatch_client_series{metric="stormwatch_)") + family + R"("} 1)")) << m;
  }

  // The operator stays active, etcd's client goes idle: its series end, the operator's stay.
  e.Compact(60 * kSec);
  e.CountList(op, "apps", "deployments", "cluster", "consistent", false);
  e.Compact(700 * kSec);
  m = Metrics(e);
  EXPECT_EQ(m.find("kube-apiserver-etcd-client"), std::string::npos) << m;
  EXPECT_EQ(m.find("stormwatch_etcd_range_keys_total{"), std::string::npos) << m;
  EXPECT_TRUE(Has(m, list + R"(paginated="false",resource="deployments",scope="cluster"} 4)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_client_series{metric="stormwatch_list_requests_total"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_client_series{metric="stormwatch_etcd_requests_total"} 0)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_client_series{metric="stormwatch_etcd_stream_messages_total"} 0)")) << m;
}

TEST(PrometheusExporterTest, CompactEndsIdleClientsAndAHeavyFoldedClientTakesTheSlot) {
  PrometheusExporter e(ClientSeriesLimits{.max_clients = 1, .idle_s = 600});
  e.CountRequest(Get("early"), 0);
  // Too few requests a minute to displace "early": its slot frees only once it is idle.
  for (int64_t t = 60; t <= 660; t += 60) {
    for (int i = 0; i < 20; ++i) e.CountRequest(Get("operator"), 0);
    e.Compact(t * kSec);
  }
  std::string m = Metrics(e);
  EXPECT_EQ(m.find(R"(client="early")"), std::string::npos) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_client_series{metric="stormwatch_requests_total"} 1)")) << m;

  e.CountRequest(Get("operator"), 0);
  e.CountRequest(Get("someone-else"), 0);
  m = Metrics(e);
  EXPECT_TRUE(Has(m, R"(stormwatch_requests_total{client="operator",code="200",group="",resource="pods",scope="namespace",subresource="",verb="GET",version="v1"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_requests_total{client="other",code="200",group="",resource="pods",scope="namespace",subresource="",verb="GET",version="v1"} 221)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_client_series{metric="stormwatch_requests_total"} 2)")) << m;
}

TEST(PrometheusExporterTest, StormGaugesNameEveryClientAndEndAfterResolving) {
  PrometheusExporter e(ClientSeriesLimits{.max_clients = 1, .idle_s = 600});
  e.CountRequest(Get("alice"), 0);
  for (std::string client : {"alice", "bob", "carol"}) {
    e.SetStormActive({{"storm", "list_storm"}, {"client", client}, {"group", ""},
                      {"resource", "pods"}}, true);
  }
  e.SetStormActive({{"storm", "list_storm"}, {"client", "bob"}, {"group", ""},
                    {"resource", "pods"}}, false);
  e.Compact(60 * kSec);  // bob resolved as of 60 s
  std::string m = Metrics(e);
  EXPECT_TRUE(Has(m, R"(stormwatch_storm_active{client="bob",group="",resource="pods",storm="list_storm"} 0)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_storm_active{client="carol",group="",resource="pods",storm="list_storm"} 1)")) << m;
  e.Compact(659 * kSec);
  EXPECT_TRUE(Has(Metrics(e), R"(stormwatch_storm_active{client="bob",group="",resource="pods",storm="list_storm"} 0)"));
  e.Compact(660 * kSec);
  m = Metrics(e);
  EXPECT_EQ(m.find(R"(client="bob")"), std::string::npos) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_storm_active{client="carol",group="",resource="pods",storm="list_storm"} 1)")) << m;
}

// A request whose response named its APF level (and nothing else to count).
RequestObservation Apf(const RequestLabels& labels, std::string_view priority_level,
                       std::string_view flow_schema) {
  RequestObservation o;
  o.labels = labels;
  o.apf = true;
  o.priority_level = priority_level;
  o.flow_schema = flow_schema;
  return o;
}

TEST(PrometheusExporterTest, ApfThrottlingAndWatches) {
  PrometheusExporter e;
  e.CountRequest(Apf(Get("alice"), "workload-low", "service-accounts"));
  e.CountRequest(Apf(Get("alice"), "workload-low", "service-accounts"));
  e.CountRequest(Apf(Get("bob"), "", ""));
  e.CountThrottled("alice", "workload-low", 1);
  e.CountThrottled("alice", "workload-low", 7);
  e.CountThrottled("bob", "", -1);
  e.CountWatch("alice", "apps", "deployments", 42.5, false);
  e.CountWatch("alice", "apps", "deployments", 1800, true);

  std::string m = Metrics(e);
  EXPECT_TRUE(Has(m, R"(stormwatch_apf_requests_total{client="alice",flow_schema="service-accounts",priority_level="workload-low"} 2)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_apf_requests_total{client="bob",flow_schema="unknown",priority_level="unknown"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_throttled_requests_total{client="alice",priority_level="workload-low"} 2)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_throttled_requests_total{client="bob",priority_level="unknown"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_retry_after_seconds_bucket{priority_level="workload-low",le="1"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_retry_after_seconds_bucket{priority_level="workload-low",le="5"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_retry_after_seconds_bucket{priority_level="workload-low",le="10"} 2)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_retry_after_seconds_sum{priority_level="workload-low"} 8)")) << m;
  // A 429 without Retry-After counts, but is no observation of it.
  EXPECT_EQ(m.find(R"(stormwatch_retry_after_seconds_count{priority_level="unknown"})"), std::string::npos) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_watches_total{client="alice",group="apps",resource="deployments",send_initial_events="false"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_watches_total{client="alice",group="apps",resource="deployments",send_initial_events="true"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_watch_duration_seconds_bucket{group="apps",resource="deployments",le="30"} 0)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_watch_duration_seconds_bucket{group="apps",resource="deployments",le="60"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_watch_duration_seconds_bucket{group="apps",resource="deployments",le="1200"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_watch_duration_seconds_bucket{group="apps",resource="deployments",le="1800"} 2)")) << m;
}

TEST(PrometheusExporterTest, ExemptClientRequestsAreCountersCappedAndEndWhenIdle) {
  PrometheusExporter e(ClientSeriesLimits{.max_clients = 2, .idle_s = 600});
  // Second 1: the detector's cumulative counts since each client was first seen (at 0).
  e.CountExemptClientRequests("python-agent", "system_masters", 60, 0, 1 * kSec);
  e.CountExemptClientRequests("python-agent", "priority_level_exempt", 40, 0, 1 * kSec);
  e.CountExemptClientRequests("ci-bot", "priority_level_exempt", 3, 0, 1 * kSec);
  e.CountExemptClientRequests("third", "system_masters", 2, 0, 1 * kSec);  // past the cap
  e.CountExemptClientRequests("fourth", "system_masters", 1, 0, 1 * kSec);
  std::string m = Metrics(e);
  EXPECT_TRUE(Has(m, "# TYPE stormwatch_exempt_client_requests_total counter")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_exempt_client_requests_total{client="python-agent",reason="system_masters"} 60)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_exempt_client_requests_total{client="python-agent",reason="priority_level_exempt"} 40)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_exempt_client_requests_total{client="ci-bot",reason="priority_level_exempt"} 3)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_exempt_client_requests_total{client="other",reason="system_masters"} 3)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_client_series{metric="stormwatch_exempt_client_requests_total"} 3)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_series_folded_total{metric="stormwatch_exempt_client_requests_total"} 3)")) << m;

  // Second 2: counts grow by the difference; the same totals published again add nothing.
  e.CountExemptClientRequests("python-agent", "system_masters", 115, 0, 2 * kSec);
  e.CountExemptClientRequests("ci-bot", "priority_level_exempt", 3, 0, 1 * kSec);
  e.CountExemptClientRequests("third", "system_masters", 7, 0, 2 * kSec);
  m = Metrics(e);
  EXPECT_TRUE(Has(m, R"(stormwatch_exempt_client_requests_total{client="python-agent",reason="system_masters"} 115)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_exempt_client_requests_total{client="ci-bot",reason="priority_level_exempt"} 3)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_exempt_client_requests_total{client="other",reason="system_masters"} 8)")) << m;

  // The detector forgot ci-bot and counts it afresh from second 100: 4 new requests, not 1.
  e.CountExemptClientRequests("ci-bot", "priority_level_exempt", 4, 100 * kSec, 100 * kSec);
  m = Metrics(e);
  EXPECT_TRUE(Has(m, R"(stormwatch_exempt_client_requests_total{client="ci-bot",reason="priority_level_exempt"} 7)")) << m;

  // 600 s after python-agent was last seen its series end; ci-bot (seen at 100) stays.
  e.Compact(602 * kSec);
  m = Metrics(e);
  EXPECT_EQ(m.find(R"(stormwatch_exempt_client_requests_total{client="python-agent")"), std::string::npos) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_exempt_client_requests_total{client="ci-bot",reason="priority_level_exempt"} 7)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_client_series{metric="stormwatch_exempt_client_requests_total"} 2)")) << m;
  // A slot is free again: a new client gets a series of its own.
  e.CountExemptClientRequests("fifth", "system_masters", 5, 600 * kSec, 603 * kSec);
  m = Metrics(e);
  EXPECT_TRUE(Has(m, R"(stormwatch_exempt_client_requests_total{client="fifth",reason="system_masters"} 5)")) << m;
}

TEST(PrometheusExporterTest, CumulativeCountsBecomeCounters) {
  PrometheusExporter e;
  e.SetDetectorState("list_storm", 17, 5, 40);
  e.SetDetectorState("list_storm", 12, 9, 41);
  e.SetAlertmanagerStats(3, 1, 0);
  e.SetAlertmanagerStats(7, 1, 2);
  std::string m = Metrics(e);
  EXPECT_TRUE(Has(m, R"(stormwatch_detector_tracked_keys{storm="list_storm"} 12)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_detector_evictions_total{storm="list_storm"} 9)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_detector_refusals_total{storm="list_storm"} 41)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_alertmanager_notifications_total{result="sent"} 7)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_alertmanager_notifications_total{result="failed"} 1)")) << m;
  EXPECT_TRUE(Has(m, R"(stormwatch_alertmanager_notifications_total{result="dropped"} 2)")) << m;
}

// `promtool check metrics` on `text`: its output (problems and lint warnings) and exit status.
std::pair<std::string, int> PromtoolCheck(const char* promtool, const std::string& text) {
  std::filesystem::path file = std::filesystem::temp_directory_path() /
                               ("stormwatch-metrics-" + std::to_string(getpid()) + ".txt");
  std::ofstream(file) << text;
  std::string command = std::string(promtool) + " check metrics < " + file.string() + " 2>&1";
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return {"popen failed", -1};
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  int status = pclose(pipe);
  std::filesystem::remove(file);
  return {output, status};
}

// Every family populated, then the real `promtool check metrics`: no problem, no warning.
TEST(PrometheusExporterTest, PromtoolFindsNothingToLint) {
  const char* promtool = "/usr/bin/promtool";
  if (access(promtool, X_OK) != 0) {
    if (std::getenv("CI")) FAIL() << promtool << " is missing (scripts/setup.sh installs it)";
    GTEST_SKIP() << promtool << " is missing";
  }
  PrometheusExporter e(ClientSeriesLimits{.max_clients = 1, .idle_s = 600});
  e.CountRequest(Get("alice"), 512);
  e.CountRequest(Get("bob", "409"), 64);
  e.CountEtcdRequest("/etcdserverpb.KV/Range", "pods", "kube-apiserver-etcd-client", "OK");
  e.CountEtcdRange("pods", "kube-apiserver-etcd-client", 10, 4096);
  e.ObserveEtcdDuration("/etcdserverpb.KV/Range", "pods", 0.002);
  e.CountList("alice", "", "pods", "cluster", "consistent", false);
  const std::string alice = "alice", ok = "200";  // outlive the observation's views
  RequestObservation timed;
  timed.labels = Get(alice, ok);
  timed.duration_s = 0.003;
  e.CountRequest(timed);
  e.SetStormActive({{"storm", "update_loop"}, {"client", "alice"}, {"group", ""},
                    {"resource", "pods"}}, true);
  e.CountStormStarted("update_loop");
  e.SetCaptureLoss("ring_buffer_full", 3);
  e.SetProbeHits("processHeaders", 10);
  e.SetTargetsAttached(1);
  e.SetTargetInfo({{"pid", "1"}, {"target", "kube-apiserver"}, {"go_version", "go1.21.7"},
                   {"xnet_version", "v0.19.0"}, {"stack", "xnet"}, {"status", "attached"}}, true);
  e.CountAttachFailure("etcd", "unproven_version");
  e.ObserveTargetPlanning("kube-apiserver", 0.3);
  e.CountRequest(Apf(Get("alice"), "exempt", "exempt"));
  e.CountThrottled("bob", "workload-low", 1);
  e.CountExemptClientRequests("alice", "system_masters", 12, 0, 60 * kSec);
  e.SetBuildInfo({{"version", "0.1.0"}, {"commit", "abc"}, {"libbpf", "1.4"}, {"kernel", "6.1.0"}});
  e.SetDetectorState("update_loop", 4, 0, 0);
  e.SetAlertmanagerStats(1, 0, 0);
  e.CountWatch("alice", "", "pods", 300, true);
  e.Compact(60 * kSec);

  std::string text = e.Scrape();  // with process_*: linted too
  auto [output, status] = PromtoolCheck(promtool, text);
  EXPECT_EQ(output, "") << text;
  EXPECT_EQ(status, 0) << output;
  // The check is live: a counter without _total is reported.
  auto [lint, lint_status] =
      PromtoolCheck(promtool, "# HELP stormwatch_bytes b\n# TYPE stormwatch_bytes counter\n"
                              "stormwatch_bytes 1\n");
  EXPECT_NE(lint.find(R"(counter metrics should have "_total" suffix)"), std::string::npos)
      << lint;
  EXPECT_NE(lint_status, 0);
  for (const char* family :
       {"stormwatch_requests_total", "stormwatch_response_bytes_total",
        "stormwatch_etcd_requests_total", "stormwatch_list_requests_total",
        "stormwatch_request_duration_seconds", "stormwatch_storm_active",
        "stormwatch_storms_total", "stormwatch_capture_lost_total", "stormwatch_probe_hits_total",
        "stormwatch_targets_attached", "stormwatch_target_info",
        "stormwatch_target_attach_failures_total", "stormwatch_target_planning_seconds",
        "stormwatch_apf_requests_total",
        "stormwatch_throttled_requests_total", "stormwatch_retry_after_seconds",
        "stormwatch_exempt_client_requests_total", "stormwatch_detector_tracked_keys",
        "stormwatch_build_info",
        "stormwatch_detector_evictions_total", "stormwatch_alertmanager_notifications_total",
        "stormwatch_watches_total", "stormwatch_watch_duration_seconds",
        "stormwatch_client_series", "stormwatch_series_folded_total"}) {
    EXPECT_NE(text.find(std::string("\n") + family), std::string::npos) << family;
  }
}

}  // namespace
}  // namespace stormwatch
