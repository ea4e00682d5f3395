// The pipeline from ring-buffer bytes to metrics and alert transitions, with synthetic events
// and an injected clock: what the agent does with what BPF hands it.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "agent/metered_pipeline.h"
#include "agent/pipeline/request_pipeline.h"
#include "bpf/events.h"
#include "exporters/alert_log.h"
#include "exporters/request_metrics.h"
#include "tests/unit/event_bytes.h"
#include "tests/unit/base64url.h"

namespace stormwatch {
namespace {

constexpr int64_t kSec = 1000000000;

std::string ServiceAccountToken(const std::string& ns, const std::string& sa, const std::string& pod) {
  nlohmann::json claims = {
      {"iss", "https://kubernetes.default.svc.cluster.local"},
      {"sub", "system:serviceaccount:" + ns + ":" + sa},
      {"kubernetes.io",
       {{"namespace", ns}, {"pod", {{"name", pod}, {"uid", "p-1"}}},
        {"serviceaccount", {{"name", sa}, {"uid", "s-1"}}}}}};
  return Base64UrlEncode(R"({"alg":"RS256","kid":"k"})") + "." + Base64UrlEncode(claims.dump()) + ".c2lnbmF0dXJl";
}

// An IPv4 end of a connection as the BPF program reports it.
sw_sock_addr V4(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint16_t port) {
  sw_sock_addr out{};
  out.ip_len = 4;
  out.port = port;
  out.ip[0] = a, out.ip[1] = b, out.ip[2] = c, out.ip[3] = d;
  return out;
}

std::vector<uint8_t> RequestEvent(uint64_t conn, uint32_t stream, int64_t ts,
                                  std::vector<std::pair<std::string_view, std::string_view>> fields,
                                  sw_sock_addr peer = {}, sw_sock_addr local = {}) {
  return H2RequestEventBytes({SW_EV_H2_REQUEST, 42, uint64_t(ts), conn, stream, 0}, fields, peer,
                             local);
}

std::vector<uint8_t> ResponseEvent(uint64_t conn, uint32_t stream, int64_t ts, int64_t status) {
  sw_h2_response r{};
  r.hdr = {SW_EV_H2_RESPONSE, 42, uint64_t(ts), conn, stream, 0};
  r.status = status;
  r.wrote_bytes = 512;
  std::vector<uint8_t> out(sizeof(r));
  std::memcpy(out.data(), &r, sizeof(r));
  return out;
}

std::string Metrics(const PrometheusExporter& e) {
  return prometheus::TextSerializer().Serialize(e.Collect());
}

class PipelineTest : public ::testing::Test {
 protected:
  PrometheusExporter exporter_;
  std::vector<StormTransition> transitions_;
  MeteredPipeline pipeline_{&exporter_, DetectorsConfig{},
                            [this](const StormTransition& t) { transitions_.push_back(t); }};
  uint32_t stream_ = 1;
  sw_sock_addr local_ = V4(10, 0, 0, 2, 6443);

  void Request(const std::string& token, const std::string& method, const std::string& path,
               int64_t ts, int64_t status, const std::string& ua, sw_sock_addr peer = {}) {
    uint32_t s = stream_;
    stream_ += 2;
    pipeline_.OnEvent(RequestEvent(0xc0001, s, ts,
                                   {{":method", method}, {":scheme", "https"}, {":path", path},
                                    {"authorization", "Bearer " + token}, {"user-agent", ua}},
                                   peer, local_));
    pipeline_.OnEvent(ResponseEvent(0xc0001, s, ts + 1000000, status));
  }
};

TEST_F(PipelineTest, CountsWithApiserverLabelsAndNamesTheLoop) {
  std::string operator_token = ServiceAccountToken("datajobs-system", "datajob-operator", "op-7d9f");
  std::string human_token = ServiceAccountToken("default", "ops-engineer", "");
  const std::string obj = "/apis/batch.company.com/v1/namespaces/etl/datajobs/nightly";
  // 200 writes/s (plus a GET each) for 5 s from the operator, whose GETs come from a second
  // pod at the end; a person lists now and then.
  int64_t t0 = 100 * kSec;
  for (int i = 0; i < 1000; ++i) {
    int64_t ts = t0 + i * (kSec / 200);
    sw_sock_addr operator_pod = i < 900 ? V4(10, 244, 1, 7, 40001) : V4(10, 244, 2, 9, 40002);
    Request(operator_token, "GET", obj, ts, 200, "datajob-operator/v1.4.2", operator_pod);
    Request(operator_token, "PUT", obj, ts + 100, i % 10 == 0 ? 409 : 200, "datajob-operator/v1.4.2",
            V4(10, 244, 1, 7, 40001 + i % 2));
    if (i % 100 == 0) {
      Request(human_token, "GET", "/apis/batch.company.com/v1/namespaces/etl/datajobs?limit=500",
              ts, 200, "kubectl/v1.32.4", V4(192, 168, 5, 1, 55000));
    }
    if (i % 200 == 199) pipeline_.Tick(ts);
  }
  pipeline_.Tick(t0 + 5 * kSec + kSec / 2);

  std::string m = Metrics(exporter_);
  EXPECT_NE(m.find(R"(stormwatch_requests_total{client="system:serviceaccount:datajobs-system:datajob-operator",code="200",group="batch.company.com",resource="datajobs",scope="resource",subresource="",verb="PUT",version="v1"} 900)"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(stormwatch_requests_total{client="system:serviceaccount:datajobs-system:datajob-operator",code="409",group="batch.company.com",resource="datajobs",scope="resource",subresource="",verb="PUT",version="v1"} 100)"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(stormwatch_requests_total{client="system:serviceaccount:datajobs-system:datajob-operator",code="200",group="batch.company.com",resource="datajobs",scope="resource",subresource="",verb="GET",version="v1"} 1000)"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(stormwatch_requests_total{client="system:serviceaccount:default:ops-engineer",code="200",group="batch.company.com",resource="datajobs",scope="namespace",subresource="",verb="LIST",version="v1"} 10)"), std::string::npos) << m;
  // The person's LISTs by cost shape; latency per verb and resource (1 ms each here).
  EXPECT_NE(m.find(R"(stormwatch_list_requests_total{client="system:serviceaccount:default:ops-engineer",consistency="consistent",group="batch.company.com",paginated="true",resource="datajobs",scope="namespace"} 10)"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(stormwatch_request_duration_seconds_count{group="batch.company.com",resource="datajobs",verb="PUT"} 1000)"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(stormwatch_request_duration_seconds_bucket{group="batch.company.com",resource="datajobs",verb="PUT",le="0.005"} 1000)"), std::string::npos) << m;
  // No token, no claim payload anywhere in what is exported.
  EXPECT_EQ(m.find(operator_token.substr(0, 20)), std::string::npos);

  ASSERT_EQ(transitions_.size(), 1u);
  const StormTransition& t = transitions_[0];
  EXPECT_EQ(t.state, StormState::kFiring);
  EXPECT_EQ(t.evidence.identity.user, "system:serviceaccount:datajobs-system:datajob-operator");
  EXPECT_EQ(t.evidence.identity.pod_name, "op-7d9f");
  EXPECT_EQ(t.evidence.resource, "datajobs");
  ASSERT_FALSE(t.evidence.details["top_objects"].empty());
  EXPECT_EQ(t.evidence.details["top_objects"][0]["name"], "nightly");
  // Where the operator's requests came from, as of the alert (after 4 s of 5: 800 GETs + 800
  // PUTs from the first pod, its last request on port 40002), never the person's address.
  EXPECT_EQ(t.evidence.details["peers"], nlohmann::json::parse(R"([
      {"ip": "10.244.1.7", "requests": 1600, "last_peer": "10.244.1.7:40002", "last_local": "10.0.0.2:6443"}])"))
      << t.evidence.details.dump();
  nlohmann::json clients = pipeline_.ClientsSnapshot(t0 + 6 * kSec);
  ASSERT_EQ(clients.size(), 2u) << clients.dump();
  EXPECT_EQ(clients[0]["client"], "system:serviceaccount:datajobs-system:datajob-operator");
  EXPECT_EQ(clients[0]["requests"], 2000);
  EXPECT_EQ(clients[0]["peers"], nlohmann::json::parse(R"([
      {"ip": "10.244.1.7", "requests": 1900, "last_peer": "10.244.1.7:40002", "last_local": "10.0.0.2:6443"},
      {"ip": "10.244.2.9", "requests": 100, "last_peer": "10.244.2.9:40002", "last_local": "10.0.0.2:6443"}])"));
  EXPECT_EQ(clients[1]["client"], "system:serviceaccount:default:ops-engineer");
  EXPECT_EQ(clients[1]["peers"][0]["last_peer"], "192.168.5.1:55000");
  EXPECT_EQ(clients[1]["requests"], 10);
  EXPECT_NE(m.find(R"(stormwatch_storm_active{client="system:serviceaccount:datajobs-system:datajob-operator",group="batch.company.com",object_namespace="etl",resource="datajobs",severity="critical",storm="update_loop"} 1)"), std::string::npos) << m;
  // /debug/top: the same clients' cumulative counters, their storms, every client's total.
  nlohmann::json top = pipeline_.TopSnapshot(t0 + 6 * kSec);
  EXPECT_DOUBLE_EQ(top["monotonic_s"].get<double>(), 106.0);
  EXPECT_EQ(top["requests"], 2010);
  ASSERT_EQ(top["clients"].size(), 2u) << top.dump();
  nlohmann::json op = top["clients"][0], person = top["clients"][1];
  op.erase("seconds_since_last");
  person.erase("seconds_since_last");
  EXPECT_EQ(op, nlohmann::json::parse(R"({"client": "system:serviceaccount:datajobs-system:datajob-operator",
      "requests": 2000, "lists": 0, "list_bytes": 0, "conflicts": 100, "throttled": 0,
      "priority_level": "", "storms": ["update_loop datajobs.batch.company.com"]})"));
  // 10 LISTs of 512 bytes each.
  EXPECT_EQ(person, nlohmann::json::parse(R"({"client": "system:serviceaccount:default:ops-engineer",
      "requests": 10, "lists": 10, "list_bytes": 5120, "conflicts": 0, "throttled": 0,
      "priority_level": "", "storms": []})"));
  EXPECT_EQ(top["active_storms"], nlohmann::json::parse(R"({
      "system:serviceaccount:datajobs-system:datajob-operator": ["update_loop datajobs.batch.company.com"]})"));

  // The alert line carries identity, evidence and fix, and no credential.
  auto doc = nlohmann::json::parse(FormatAlertJson(t, 0));
  EXPECT_EQ(doc["storm"], "update_loop");
  EXPECT_EQ(doc["state"], "firing");
  EXPECT_EQ(doc["identity"]["service_account"]["name"], "datajob-operator");
  EXPECT_EQ(doc["identity"]["pod"], "op-7d9f");
  EXPECT_EQ(doc["identity"]["user_agent"], "datajob-operator/v1.4.2");
  EXPECT_EQ(doc["identity"]["component"], "datajob-operator");
  EXPECT_EQ(doc["identity"]["component_version"], "v1.4.2");
  EXPECT_EQ(doc["evidence"]["top_objects"][0]["name"], "nightly");
  EXPECT_EQ(doc["evidence"]["top_objects"][0]["namespace"], "etl");
  EXPECT_GE(doc["evidence"]["resource_writes_per_second"].get<double>(), 150.0);
  EXPECT_NE(doc["fix"].get<std::string>().find("GenerationChangedPredicate"), std::string::npos);
  EXPECT_EQ(doc.dump().find(operator_token.substr(0, 20)), std::string::npos);

  // Quiet again: resolves after the resolve window, not before.
  int64_t end = t0 + 5 * kSec;
  pipeline_.Tick(end + 5 * kSec);
  EXPECT_EQ(transitions_.size(), 1u);
  pipeline_.Tick(end + 12 * kSec);
  ASSERT_EQ(transitions_.size(), 2u);
  EXPECT_EQ(transitions_[1].state, StormState::kResolved);
  EXPECT_NE(Metrics(exporter_).find(R"(storm="update_loop"} 0)"), std::string::npos);
}

TEST_F(PipelineTest, EtcdTrafficIsNotApiserverTraffic) {
  pipeline_.SetTargetRole(42, TargetRole::kEtcd);
  pipeline_.OnEvent(RequestEvent(7, 1, 10, {{":method", "POST"}, {":path", "/etcdserverpb.KV/Range"},
                                             {"content-type", "application/grpc"}}));
  pipeline_.OnEvent(ResponseEvent(7, 1, 20, 200));
  pipeline_.OnEvent(RequestEvent(7, 3, 30, {{":method", "POST"}, {":path", "/weird/a/b?x"}}));
  pipeline_.OnEvent(ResponseEvent(7, 3, 40, 200));
  std::string m = Metrics(exporter_);
  // Seen at the HTTP/2 server (no interceptor probes): method and HTTP status only.
  EXPECT_NE(m.find(R"(stormwatch_etcd_requests_total{client="system:anonymous",code="200",method="/etcdserverpb.KV/Range",resource="other"} 1)"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(stormwatch_etcd_requests_total{client="system:anonymous",code="200",method="other",resource="other"} 1)"), std::string::npos) << m;
  EXPECT_EQ(m.find("stormwatch_requests_total{"), std::string::npos) << m;
  // The process goes away; a new one with the same PID is an apiserver until told otherwise.
  pipeline_.ForgetProcess(42);
  Request("", "GET", "/api/v1/namespaces/a/pods/p", 50, 200, "kubectl/v1.32.4");
  EXPECT_NE(Metrics(exporter_).find("stormwatch_requests_total{"), std::string::npos);
}

// The BPF program looks for a certificate only on requests without a token, so a token names
// its request.
// Live requests carry the identity cache's shared Identity: the same object for every request
// with one token and user agent (nothing copied for detectors), a new one for another token.
TEST(PipelineIdentity, LiveRequestsShareTheCachedIdentity) {
  PrometheusExporter exporter;
  MeteredPipeline pipeline(&exporter, DetectorsConfig{}, [](const StormTransition&) {});
  std::vector<IdentityRef> seen;
  pipeline.SetRecorder({.request = [&](const RequestRecord& r) { seen.push_back(r.identity); }});
  auto get = [&](uint32_t stream, const std::string& token) {
    pipeline.OnEvent(RequestEvent(0xc000100000, stream, 1000,
                                  {{":method", "GET"},
                                   {":path", "/api/v1/namespaces/default/configmaps/a"},
                                   {"authorization", "Bearer " + token},
                                   {"user-agent", "op/v1"}}));
    pipeline.OnEvent(ResponseEvent(0xc000100000, stream, 2000, 200));
  };
  get(1, "opaque-token-one");
  get(3, "opaque-token-one");
  get(5, "opaque-token-two");
  ASSERT_EQ(seen.size(), 3u);
  ASSERT_TRUE(seen[0]);
  EXPECT_EQ(seen[0], seen[1]);
  EXPECT_NE(seen[1], seen[2]);
  EXPECT_NE(seen[1]->user, seen[2]->user);  // opaque tokens: a keyed hash each
  EXPECT_EQ(seen[0]->user_agent, "op/v1");
}

// limits.max_identities bounds the decoded identities; every lookup is counted, by result.
TEST(PipelineIdentity, CacheHoldsMaxIdentitiesAndCountsLookups) {
  PrometheusExporter exporter;
  MeteredPipeline pipeline(&exporter, DetectorsConfig{}, [](const StormTransition&) {},
                           AssemblerLimits{.max_identities = 2});
  uint32_t stream = 1;
  for (const char* token : {"token-a", "token-b", "token-a", "token-c", "token-b", "token-a"}) {
    pipeline.OnEvent(RequestEvent(0xc000100000, stream, 1000,
                                  {{":method", "GET"},
                                   {":path", "/api/v1/namespaces/default/configmaps/a"},
                                   {"authorization", std::string("Bearer ") + token},
                                   {"user-agent", "op/v1"}}));
    pipeline.OnEvent(ResponseEvent(0xc000100000, stream, 2000, 200));
    stream += 2;
  }
  // a miss, b miss, a hit, c miss (b out), b miss (a out), a miss.
  pipeline.Tick(3'000'000'000);
  const std::string text = exporter.Scrape();
  EXPECT_NE(text.find("stormwatch_identity_cache_lookups_total{result=\"hit\"} 1"), std::string::npos);
  EXPECT_NE(text.find("stormwatch_identity_cache_lookups_total{result=\"miss\"} 5"), std::string::npos);
}

// A bound service-account token with an RS256-sized signature of `signature_byte`s: a
// connection remembers it by its last 32 bytes (CredentialFingerprint).
std::string SignedToken(const std::string& sa, char signature_byte) {
  nlohmann::json claims = {
      {"iss", "https://kubernetes.default.svc.cluster.local"},
      {"sub", "system:serviceaccount:ops:" + sa},
      {"kubernetes.io",
       {{"namespace", "ops"}, {"pod", {{"name", sa + "-1"}, {"uid", "p-1"}}},
        {"serviceaccount", {{"name", sa}, {"uid", "s-1"}}}}}};
  return Base64UrlEncode(R"({"alg":"RS256","kid":"k"})") + "." + Base64UrlEncode(claims.dump()) +
         "." + Base64UrlEncode(std::string(256, signature_byte));
}

// Requests on connections, each answered with a status (and APF's UIDs when `through_apf`); the
// user each was named after, in order.
struct ConnectionRequests {
  PrometheusExporter exporter;
  MeteredPipeline pipeline{&exporter, DetectorsConfig{}, [](const StormTransition&) {}};
  std::vector<std::string> users;
  uint32_t stream = 1;
  ConnectionRequests() {
    pipeline.SetRecorder({.request = [this](const RequestRecord& r) { users.push_back(r.identity->user); }});
  }
  void Send(uint64_t conn, const std::string& token, int64_t status, bool through_apf = false) {
    pipeline.OnEvent(RequestEvent(conn, stream, 1000,
                                  {{":method", "GET"},
                                   {":path", "/api/v1/namespaces/ops/configmaps/a"},
                                   {"authorization", "Bearer " + token},
                                   {"user-agent", "operator/v1"}}));
    std::vector<uint8_t> response = ResponseEvent(conn, stream, 2000, status);
    if (through_apf) {
      sw_h2_response r;
      std::memcpy(&r, response.data(), sizeof(r));
      r.priority_level_uid_len = 3;
      std::memcpy(r.priority_level_uid, "plu", 3);
      std::memcpy(response.data(), &r, sizeof(r));
    }
    pipeline.OnEvent(response);
    stream += 2;
  }
};

// A connection's authenticated token names its later requests without its whole token being
// hashed; they are counted apart from the identity cache's hits.
TEST(PipelineIdentity, AConnectionsAuthenticatedTokenNamesItsLaterRequests) {
  ConnectionRequests c;
  const std::string token = SignedToken("operator", '\x11');
  c.Send(0xc000100000, token, 200);
  c.Send(0xc000100000, token, 200);
  c.Send(0xc000100000, token, 409);  // not authenticated, as far as the record shows: kept
  EXPECT_EQ(c.pipeline.credential_hits(), 2u);
  EXPECT_EQ(c.pipeline.credentials().size(), 1u);
  // Another connection with the same token: found in the identity cache, then remembered.
  c.Send(0xc000200000, token, 200);
  c.Send(0xc000200000, token, 200);
  EXPECT_EQ(c.pipeline.credential_hits(), 3u);
  EXPECT_EQ(c.pipeline.credentials().size(), 2u);
  EXPECT_EQ(c.users, std::vector<std::string>(5, "system:serviceaccount:ops:operator"));
  c.pipeline.Tick(3'000'000'000);
  const std::string text = c.exporter.Scrape();
  EXPECT_NE(text.find("stormwatch_identity_cache_lookups_total{result=\"connection\"} 3"), std::string::npos) << text;
  EXPECT_NE(text.find("stormwatch_identity_cache_lookups_total{result=\"hit\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("stormwatch_identity_cache_lookups_total{result=\"miss\"} 1"), std::string::npos) << text;
}

// Whoever holds a valid token can write another client's claims above its signature: the
// server refuses it (401), and such a token is never remembered, so the sender's own later
// requests are named after the sender. On the connection that sent both, a refused token
// ending as the accepted one is named after the accepted one; on another connection, after its
// own claims (decoded, never verified, as every token is).
TEST(PipelineIdentity, ARefusedTokenIsNeverRememberedForItsConnection) {
  ConnectionRequests c;
  const std::string own = SignedToken("attacker", '\x22');
  const std::string forged = SignedToken("victim01", '\x22');
  ASSERT_EQ(own.size(), forged.size());
  c.Send(0xc000100000, forged, 401);
  c.Send(0xc000100000, own, 200);
  c.Send(0xc000100000, forged, 401);
  c.Send(0xc000100000, own, 200);
  c.Send(0xc000200000, forged, 401);
  EXPECT_EQ(c.users, (std::vector<std::string>{
                         "system:serviceaccount:ops:victim01", "system:serviceaccount:ops:attacker",
                         "system:serviceaccount:ops:attacker", "system:serviceaccount:ops:attacker",
                         "system:serviceaccount:ops:victim01"}));
  EXPECT_EQ(c.pipeline.credential_hits(), 2u);
  EXPECT_EQ(c.pipeline.credentials().size(), 1u);
}

// A token rotated on a connection (kubelet refreshes a bound token hourly; client-go rereads its
// file) names its requests from its own claims; APF's response headers count as authenticated.
TEST(PipelineIdentity, ARotatedTokenOnTheSameConnectionIsNamedAfresh) {
  ConnectionRequests c;
  const std::string first = SignedToken("operator", '\x11');
  const std::string rotated = SignedToken("operator-v2", '\x33');
  c.Send(0xc000100000, first, 403, /*through_apf=*/true);
  c.Send(0xc000100000, first, 200);
  c.Send(0xc000100000, rotated, 200);
  c.Send(0xc000100000, rotated, 200);
  c.Send(0xc000100000, first, 403);  // its place was taken by the rotated token's
  c.Send(0xc000100000, first, 403);  // not through APF: not remembered again
  EXPECT_EQ(c.users, (std::vector<std::string>{
                         "system:serviceaccount:ops:operator", "system:serviceaccount:ops:operator",
                         "system:serviceaccount:ops:operator-v2", "system:serviceaccount:ops:operator-v2",
                         "system:serviceaccount:ops:operator", "system:serviceaccount:ops:operator"}));
  EXPECT_EQ(c.pipeline.credential_hits(), 2u);
}

TEST(PipelineIdentity, CertificateNamesTokenlessRequestsOnly) {
  PrometheusExporter exporter;
  auto cert_identity = [](const RequestConnection&) -> std::optional<Identity> {
    Identity id;
    id.kind = Identity::Kind::kUser;
    id.user = "kubernetes-admin";
    id.groups = {"system:masters"};
    id.system_masters = true;
    return id;
  };
  MeteredPipeline pipeline(&exporter, DetectorsConfig{}, [](const StormTransition&) {},
                           AssemblerLimits{}, ConnectionLookups{.identity = cert_identity});
  std::string token = ServiceAccountToken("ci", "deployer", "deployer-1");
  pipeline.OnEvent(RequestEvent(7, 1, 10, {{":method", "GET"}, {":path", "/api/v1/namespaces/a/pods/p"},
                                           {"authorization", "Bearer " + token}}));
  pipeline.OnEvent(ResponseEvent(7, 1, 20, 200));
  pipeline.OnEvent(RequestEvent(7, 3, 30, {{":method", "GET"}, {":path", "/api/v1/namespaces/a/pods/p"}}));
  pipeline.OnEvent(ResponseEvent(7, 3, 40, 200));
  std::string m = Metrics(exporter);
  EXPECT_NE(m.find(R"(stormwatch_requests_total{client="system:serviceaccount:ci:deployer",code="200",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 1)"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(stormwatch_requests_total{client="kubernetes-admin",code="200",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 1)"), std::string::npos) << m;
}

TEST_F(PipelineTest, UndecodableEventsAreCountedNotFatal) {
  std::vector<uint8_t> junk = {1, 2, 3};
  pipeline_.OnEvent(junk);
  std::vector<uint8_t> bad_type(sizeof(sw_event_header), 0xff);
  pipeline_.OnEvent(bad_type);
  pipeline_.OnEvent(ResponseEvent(9, 9, 1, 200));  // no request seen
  pipeline_.Tick(2 * kSec);
  std::string m = Metrics(exporter_);
  EXPECT_NE(m.find(R"(stormwatch_capture_lost_total{cause="undecodable_event"} 2)"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(stormwatch_capture_lost_total{cause="response_without_request"} 1)"), std::string::npos) << m;
}

// Every storm, update_loop included, can be switched off: the same runaway writes then fire
// nothing, while the requests are still counted.
TEST(PipelineDetectors, DisabledUpdateLoopIsNotRun) {
  PrometheusExporter exporter;
  std::vector<StormTransition> transitions;
  DetectorsConfig off;
  off.update_loop.enabled = false;
  MeteredPipeline pipeline(&exporter, off,
                           [&](const StormTransition& t) { transitions.push_back(t); });
  for (const auto& d : pipeline.detectors()) EXPECT_STRNE(d->storm(), "update_loop");
  EXPECT_EQ(pipeline.detectors().size(), 7u);  // the other seven storms, on by default

  std::string token = ServiceAccountToken("etl", "op", "op-1");
  const std::string obj = "/apis/batch.company.com/v1/namespaces/etl/datajobs/nightly";
  const int64_t t0 = 100 * kSec;
  uint32_t stream = 1;
  for (int i = 0; i < 1000; ++i) {  // 200 writes/s on one object for 5 s
    const int64_t ts = t0 + i * (kSec / 200);
    pipeline.OnEvent(RequestEvent(0xc0001, stream, ts,
                                  {{":method", "PUT"}, {":path", obj},
                                   {"authorization", "Bearer " + token}}));
    pipeline.OnEvent(ResponseEvent(0xc0001, stream, ts + 100, 200));
    stream += 2;
    if (i % 200 == 199) pipeline.Tick(ts);
  }
  pipeline.Tick(t0 + 6 * kSec);
  EXPECT_TRUE(transitions.empty());
  EXPECT_EQ(pipeline.stats().requests, 1000u);
  EXPECT_NE(Metrics(exporter).find(R"(verb="PUT",version="v1"} 1000)"), std::string::npos)
      << Metrics(exporter);
}

// A path names any resource its sender likes: the resource label stays bounded and valid.
// Junk that no route serves (404, or 401 before routing) gets 64 labels at most, so it cannot
// crowd out the API's resources; a segment that could not be a resource (not a lower-case DNS
// label, not even UTF-8, which Prometheus refuses in a label and fails the scrape for) is
// "other" at once.
TEST_F(PipelineTest, ResourceLabelsAreBoundedAndValid) {
  std::string token = ServiceAccountToken("default", "prober", "");
  int64_t ts = 100 * kSec;
  for (int i = 0; i < 300; ++i) {
    Request(token, "GET", "/api/v1/namespaces/x/junk" + std::to_string(i) + "/o", ts++, 404, "curl/8");
  }
  Request(token, "GET", "/api/v1/namespaces/x/r%FFz/o", ts++, 404, "curl/8");
  Request(token, "GET", "/api/v1/namespaces/x/Pods", ts++, 404, "curl/8");
  Request(token, "GET", "/apis/Bad_Group/v1/things", ts++, 404, "curl/8");
  // Served resources keep their labels after the flood. A real resource first seen with a 404
  // (a missing object) while the flood holds the unserved budget is "other" until it is served
  // once; from then on its 404s are its own.
  Request(token, "GET", "/apis/batch.company.com/v1/namespaces/etl/datajobs", ts++, 200, "curl/8");
  Request(token, "GET", "/api/v1/namespaces/x/configmaps/missing", ts++, 404, "curl/8");
  Request(token, "GET", "/api/v1/namespaces/x/configmaps", ts++, 200, "curl/8");
  Request(token, "GET", "/api/v1/namespaces/x/configmaps/missing", ts++, 404, "curl/8");
  // Served or not, a pair that could not name an API never gets a label (whatever answered).
  Request(token, "GET", "/apis/Bad_Group/v1/namespaces/x/things/o", ts++, 200, "curl/8");
  Request(token, "GET", "/api/v1/namespaces/x/Pods/o", ts++, 200, "curl/8");
  const std::string m = Metrics(exporter_);
  const std::string client = R"(client="system:serviceaccount:default:prober")";
  auto count_of = [&](const std::string& labels) {
    const std::string series = "stormwatch_requests_total{" + client + "," + labels + "} ";
    const size_t at = m.find(series);
    return at == std::string::npos ? -1 : std::stoll(m.substr(at + series.size()));
  };
  size_t own = 0;
  for (int i = 0; i < 300; ++i) {
    own += m.find("resource=\"junk" + std::to_string(i) + "\",") != std::string::npos;
  }
  EXPECT_EQ(own, ResourceLabels::kMaxUnservedResources);
  // Object GETs: 236 junk, the one not UTF-8, the configmap before its resource was served.
  EXPECT_EQ(count_of(R"(code="404",group="",resource="other",scope="resource",subresource="",verb="GET",version="")"), 238)
      << m.substr(0, 3000);
  // Collections: "Pods" (upper case) and "Bad_Group" could not be served APIs.
  EXPECT_EQ(count_of(R"(code="404",group="",resource="other",scope="namespace",subresource="",verb="LIST",version="")"), 1);
  EXPECT_EQ(count_of(R"(code="404",group="",resource="other",scope="cluster",subresource="",verb="LIST",version="")"), 1);
  EXPECT_EQ(count_of(R"(code="200",group="batch.company.com",resource="datajobs",scope="namespace",subresource="",verb="LIST",version="v1")"), 1);
  EXPECT_EQ(count_of(R"(code="404",group="",resource="configmaps",scope="resource",subresource="",verb="GET",version="v1")"), 1);
  EXPECT_EQ(count_of(R"(code="200",group="",resource="configmaps",scope="namespace",subresource="",verb="LIST",version="v1")"), 1);
  EXPECT_EQ(m.find("\xff"), std::string::npos);
  EXPECT_EQ(m.find("Pods"), std::string::npos);
  EXPECT_EQ(m.find("Bad_Group"), std::string::npos);
  EXPECT_EQ(count_of(R"(code="200",group="",resource="other",scope="resource",subresource="",verb="GET",version="")"), 2);
}

}  // namespace
}  // namespace stormwatch
