// HTTP/2 event decoding and the request/response join, on hand-built events.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <span>
#include <vector>

#include "agent/protocol/h2_events.h"
#include "agent/protocol/request_assembler.h"
#include "agent/core/tcp_endpoint.h"
#include "bpf/events.h"
#include "tests/unit/allocation_count.h"
#include "tests/unit/event_bytes.h"

namespace stormwatch {
namespace {

std::vector<uint8_t> RequestBytes(uint32_t tgid, uint64_t conn, uint32_t stream, uint64_t ts,
                                  const std::vector<std::pair<std::string, std::string>>& fields,
                                  uint16_t field_count_override = 0) {
  std::vector<uint8_t> data;
  for (const auto& [n, v] : fields) {
    uint16_t lens[2] = {static_cast<uint16_t>(n.size()), static_cast<uint16_t>(v.size())};
    data.insert(data.end(), reinterpret_cast<uint8_t*>(lens), reinterpret_cast<uint8_t*>(lens) + 4);
    data.insert(data.end(), n.begin(), n.end());
    data.insert(data.end(), v.begin(), v.end());
  }
  sw_h2_request fixed{};
  fixed.hdr = {SW_EV_H2_REQUEST, tgid, ts, conn, stream, 0};
  fixed.field_count = field_count_override ? field_count_override : fields.size();
  fixed.fields_kept = fields.size();
  fixed.data_len = data.size();
  return EventBytes(fixed, offsetof(sw_h2_request, data), data);
}

std::vector<uint8_t> ResponseBytes(uint32_t tgid, uint64_t conn, uint32_t stream, uint64_t ts,
                                   int64_t status, int64_t bytes) {
  sw_h2_response r{};
  r.hdr = {SW_EV_H2_RESPONSE, tgid, ts, conn, stream, 0};
  r.status = status;
  r.wrote_bytes = bytes;
  std::vector<uint8_t> out(sizeof(r));
  std::memcpy(out.data(), &r, sizeof(r));
  return out;
}

TEST(H2Events, DecodesRequestFields) {
  auto bytes = RequestBytes(7, 0xc000100000, 3, 1000,
                            {{":method", "PUT"}, {":path", "/api/v1/pods"}, {"user-agent", "x"}});
  auto ev = DecodeCaptureEvent(bytes);
  ASSERT_TRUE(ev.ok()) << ev.error().message;
  const auto& req = std::get<H2RequestEvent>(*ev);
  EXPECT_EQ(req.tgid, 7u);
  EXPECT_EQ(req.conn, 0xc000100000u);
  EXPECT_EQ(req.stream_id, 3u);
  ASSERT_EQ(req.fields.size(), 3u);
  EXPECT_EQ(req.fields[1].name, ":path");
  EXPECT_EQ(req.fields[1].value, "/api/v1/pods");
  EXPECT_FALSE(req.truncated());
}

TEST(H2Events, ConnectionAddressesReachTheRecord) {
  auto bytes = RequestBytes(7, 0xc000100000, 3, 1000, {{":method", "GET"}, {":path", "/api/v1/pods"}});
  sw_h2_request fixed;
  std::memcpy(&fixed, bytes.data(), offsetof(sw_h2_request, data));
  // A dual-stack listener's IPv4 peer (::ffff:10.244.1.7) and an IPv6 local end.
  const uint8_t peer[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 244, 1, 7};
  const uint8_t local[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  fixed.peer.ip_len = 16;
  fixed.peer.port = 51234;
  std::memcpy(fixed.peer.ip, peer, 16);
  fixed.local.ip_len = 16;
  fixed.local.port = 6443;
  std::memcpy(fixed.local.ip, local, 16);
  std::memcpy(bytes.data(), &fixed, offsetof(sw_h2_request, data));
  auto ev = DecodeCaptureEvent(bytes);
  ASSERT_TRUE(ev.ok()) << ev.error().message;
  const auto& req = std::get<H2RequestEvent>(*ev);
  EXPECT_EQ(FormatTcpEndpoint(req.peer_address), "10.244.1.7:51234");
  EXPECT_EQ(FormatTcpEndpoint(req.local_address), "[fd00::1]:6443");

  // The resolver gets the connection, with where BPF found its client certificate.
  fixed.client_cert_der = 0x7f0000001000;
  fixed.client_cert_der_len = 812;
  std::memcpy(bytes.data(), &fixed, offsetof(sw_h2_request, data));
  RequestConnection seen;
  RequestAssembler assembler([&](const RequestConnection& c, std::string_view, std::string_view) {
    seen = c;
    return IdentityRef::Make(Identity());
  });
  assembler.OnRequest(std::get<H2RequestEvent>(*DecodeCaptureEvent(bytes)));
  EXPECT_EQ(seen.pid, 7u);
  EXPECT_EQ(seen.conn, 0xc000100000u);
  EXPECT_FALSE(seen.http1);
  EXPECT_EQ(seen.client_cert_der, 0x7f0000001000u);
  EXPECT_EQ(seen.client_cert_der_len, 812u);
  auto record = assembler.OnResponse(std::get<H2ResponseEvent>(
      *DecodeCaptureEvent(ResponseBytes(7, 0xc000100000, 3, 2000, 200, 10))));
  ASSERT_TRUE(record);
  EXPECT_EQ(FormatTcpEndpoint(record->peer_address), "10.244.1.7:51234");
  EXPECT_EQ(FormatTcpEndpoint(record->local_address), "[fd00::1]:6443");

  // Not a TCP connection (or unreadable): no address rather than a wrong one.
  fixed.peer.ip_len = 5;
  fixed.local.ip_len = 0;
  std::memcpy(bytes.data(), &fixed, offsetof(sw_h2_request, data));
  const auto decoded = DecodeCaptureEvent(bytes);  // the event outlives the checks below
  const auto& unknown = std::get<H2RequestEvent>(*decoded);
  EXPECT_EQ(unknown.peer_address, std::nullopt);
  EXPECT_EQ(unknown.local_address, std::nullopt);
}

TEST(TcpEndpoint, FormatsLikeGoAndStripsTheV4MappedPrefix) {
  const uint8_t v4[4] = {127, 0, 0, 1};
  const uint8_t v6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x42};
  EXPECT_EQ(FormatTcpEndpoint(v4, 443), "127.0.0.1:443");
  EXPECT_EQ(FormatTcpEndpoint(v6, 6443), "[2001:db8::42]:6443");
  EXPECT_EQ(FormatTcpEndpoint(std::span<const uint8_t>(v4, 3), 1), "");
}

TEST(TcpEndpoint, ReadsBackWhatItWritesAndNothingElse) {
  for (const char* text : {"127.0.0.1:443", "10.244.3.17:40000", "[2001:db8::42]:6443",
                           "[::1]:0", "0.0.0.0:65535"}) {
    const std::optional<TcpEndpoint> e = ParseTcpEndpoint(text);
    ASSERT_TRUE(e) << text;
    EXPECT_EQ(FormatTcpEndpoint(*e), text);
  }
  // IPv4 is kept as Go keeps it, ::ffff:a.b.c.d, so both spellings are one endpoint.
  const std::optional<TcpEndpoint> v4 = ParseTcpEndpoint("10.0.0.7:443");
  ASSERT_TRUE(v4);
  EXPECT_EQ(v4->ip, (std::array<uint8_t, 16>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 7}));
  EXPECT_EQ(v4->port, 443);
  EXPECT_EQ(ParseTcpEndpoint("[::ffff:10.0.0.7]:443"), v4);
  EXPECT_EQ(FormatIp(v4->ip), "10.0.0.7");
  EXPECT_EQ(FormatIp(ParseTcpEndpoint("[fd00::7]:1")->ip), "fd00::7");
  for (const char* bad : {"", "10.0.0.7", "10.0.0.7:", "10.0.0.7:65536", "10.0.0.7:-1",
                          "10.0.0.7:44x", "10.0.0:1", "fd00::7:1", "[fd00::7:1", "[10.0.0.7]:1",
                          "host.example:443", "[fd00::1%eth0]:1",
                          "[1111:2222:3333:4444:5555:6666:7777:8888:9999:aaaa:bbbb]:1"}) {
    EXPECT_FALSE(ParseTcpEndpoint(bad)) << bad;
  }
}

TEST(H2Events, RejectsMalformedEvents) {
  auto bytes = RequestBytes(7, 1, 3, 1000, {{":method", "GET"}});
  // Every truncation is an error, never a read past the buffer.
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto ev = DecodeCaptureEvent(std::span(bytes.data(), n));
    EXPECT_FALSE(ev.ok()) << "prefix of " << n << " bytes";
  }
  // A field length that points past data_len.
  auto lying = bytes;
  uint16_t huge = 60000;
  std::memcpy(lying.data() + offsetof(sw_h2_request, data), &huge, 2);
  EXPECT_FALSE(DecodeCaptureEvent(lying).ok());
  std::vector<uint8_t> unknown(sizeof(sw_event_header), 0);
  unknown[0] = 99;
  EXPECT_FALSE(DecodeCaptureEvent(unknown).ok());
}

// The fields are read in place up to the count the event claims: a count beyond its data (a
// corrupt or hostile event) ends in an error at the first field that is not there, whatever
// the count, with the whole fields before it kept and nothing read or written past them.
TEST(H2Events, AFieldCountBeyondTheDataIsAnErrorAtTheFirstMissingField) {
  const auto bytes = RequestBytes(7, 1, 3, 1000, {{":method", "GET"}, {":path", "/a"}});
  for (const uint16_t claimed : {uint16_t{3}, uint16_t{6}, uint16_t{7}, uint16_t{65535}}) {
    std::vector<uint8_t> lying = bytes;
    std::memcpy(lying.data() + offsetof(sw_h2_request, fields_kept), &claimed, sizeof(claimed));
    H2RequestEvent request;
    H2ResponseEvent answer;
    const Result<H2EventKind> result = DecodeH2EventInto(lying, request, answer);
    ASSERT_FALSE(result.ok()) << claimed;
    EXPECT_EQ(result.error().message, "h2 request field header past the data") << claimed;
    ASSERT_EQ(request.fields.size(), 2u) << claimed;
    EXPECT_EQ(request.fields[1].value, "/a");
  }
  // A field whose lengths run past the data.
  std::vector<uint8_t> cut = bytes;
  const uint16_t long_value = 100;
  std::memcpy(cut.data() + offsetof(sw_h2_request, data) + 4 + 7 + 3 + 2, &long_value,
              sizeof(long_value));
  H2RequestEvent request;
  H2ResponseEvent answer;
  const Result<H2EventKind> result = DecodeH2EventInto(cut, request, answer);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error().message, "h2 request field past the data");
  ASSERT_EQ(request.fields.size(), 1u);
  EXPECT_EQ(request.fields[0].value, "GET");
}

// The drain decodes each event into one reused event of its kind: nothing of an earlier event
// may show in a later one, whichever kinds alternate.
TEST(H2Events, DecodingIntoAReusedEventLeavesNothingOfTheLastOne) {
  const auto big = RequestBytes(7, 1, 3, 1000, {{":method", "GET"}, {":path", "/a"}, {"x-one", "1"}});
  const auto small = RequestBytes(8, 2, 5, 2000, {{":method", "PUT"}});
  const auto response = ResponseBytes(7, 1, 3, 1500, 409, 321);
  H2RequestEvent request;
  H2ResponseEvent answer;
  ASSERT_EQ(*DecodeH2EventInto(big, request, answer), H2EventKind::kRequest);
  ASSERT_EQ(request.fields.size(), 3u);
  ASSERT_EQ(*DecodeH2EventInto(small, request, answer), H2EventKind::kRequest);
  ASSERT_EQ(request.fields.size(), 1u);
  EXPECT_EQ(request.fields[0].value, "PUT");
  EXPECT_EQ(request.tgid, 8u);
  EXPECT_EQ(request.stream_id, 5u);
  EXPECT_EQ(request.field_count, 1u);
  ASSERT_EQ(*DecodeH2EventInto(response, request, answer), H2EventKind::kResponse);
  EXPECT_EQ(answer.status, 409);
  EXPECT_EQ(request.stream_id, 5u);  // the request event is left as it was
  ASSERT_EQ(*DecodeH2EventInto(big, request, answer), H2EventKind::kRequest);
  EXPECT_EQ(request.fields.size(), 3u);
  EXPECT_EQ(request.fields[2].name, "x-one");
  EXPECT_EQ(answer.status, 409);  // and the response event
  // An error is reported (and the events are not to be read).
  std::vector<uint8_t> unknown(sizeof(sw_event_header), 0);
  unknown[0] = 99;
  const Result<H2EventKind> error = DecodeH2EventInto(unknown, request, answer);
  ASSERT_FALSE(error.ok());
  EXPECT_EQ(error.error().message, "unknown event type");
}

IdentityRef FakeResolver(const RequestConnection&, std::string_view authorization,
                         std::string_view user_agent) {
  Identity id;
  id.user = authorization.empty() ? "system:anonymous" : "user-of-" + std::string(authorization.substr(7, 3));
  id.user_agent = user_agent;
  return IdentityRef::Make(std::move(id));
}

// `bytes` kept for the rest of the test program: decoded events view the bytes they came from.
std::span<const uint8_t> Kept(std::vector<uint8_t> bytes) {
  static std::deque<std::vector<uint8_t>> kept;
  return kept.emplace_back(std::move(bytes));
}

H2RequestEvent Req(uint32_t tgid, uint64_t conn, uint32_t stream, uint64_t ts,
                   std::string method, std::string path) {
  auto ev = DecodeCaptureEvent(Kept(RequestBytes(
      tgid, conn, stream, ts,
      {{":method", method}, {":path", path}, {"authorization", "Bearer abcdef"}, {"user-agent", "ua/1"}})));
  return std::get<H2RequestEvent>(*ev);
}

H2ResponseEvent Resp(uint32_t tgid, uint64_t conn, uint32_t stream, uint64_t ts, int64_t status,
                     int64_t bytes) {
  return std::get<H2ResponseEvent>(
      *DecodeCaptureEvent(Kept(ResponseBytes(tgid, conn, stream, ts, status, bytes))));
}

TEST(RequestAssembler, JoinsByProcessConnectionAndStream) {
  RequestAssembler a(FakeResolver);
  a.OnRequest(Req(1, 100, 1, 10, "GET", "/api/v1/pods"));
  a.OnRequest(Req(1, 200, 1, 11, "PUT", "/api/v1/namespaces/a/pods/p"));  // other connection
  a.OnRequest(Req(2, 100, 1, 12, "DELETE", "/x"));                        // other process
  EXPECT_EQ(a.pending(), 3u);

  auto r = a.OnResponse(Resp(1, 200, 1, 50, 409, 321));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->method, "PUT");
  EXPECT_EQ(r->path, "/api/v1/namespaces/a/pods/p");
  EXPECT_EQ(r->status, 409);
  EXPECT_EQ(r->response_bytes, 321u);
  EXPECT_EQ(r->start_ns, 11u);
  EXPECT_EQ(r->end_ns, 50u);
  EXPECT_EQ(r->identity->user, "user-of-abc");
  EXPECT_EQ(r->identity->user_agent, "ua/1");

  // status 0: the handler wrote no header, net/http sends 200.
  auto implicit = a.OnResponse(Resp(1, 100, 1, 60, 0, 0));
  ASSERT_TRUE(implicit);
  EXPECT_EQ(implicit->status, 200);
  EXPECT_EQ(a.pending(), 1u);
  EXPECT_FALSE(a.OnResponse(Resp(1, 100, 1, 70, 200, 0)));  // already answered
  EXPECT_EQ(a.stats().responses_without_request, 1u);
}

TEST(RequestAssembler, TrailersAreNotRequests) {
  RequestAssembler a(FakeResolver);
  auto ev = std::get<H2RequestEvent>(*DecodeCaptureEvent(Kept(RequestBytes(1, 1, 1, 1, {{"grpc-status", "0"}}))));
  a.OnRequest(ev);
  EXPECT_EQ(a.pending(), 0u);
  EXPECT_EQ(a.stats().trailers_ignored, 1u);
}

TEST(RequestAssembler, BoundedAndExpiring) {
  RequestAssembler a(FakeResolver, AssemblerLimits{.max_pending = 3, .max_age_ns = 100});
  for (uint32_t s = 1; s <= 5; ++s) a.OnRequest(Req(1, 1, s, s, "GET", "/api"));
  EXPECT_EQ(a.pending(), 3u);
  EXPECT_EQ(a.stats().requests_without_response, 2u);
  EXPECT_FALSE(a.OnResponse(Resp(1, 1, 1, 9, 200, 0)));  // evicted oldest
  EXPECT_TRUE(a.OnResponse(Resp(1, 1, 5, 9, 200, 0)));
  a.Expire(50);   // nothing old enough
  EXPECT_EQ(a.pending(), 2u);
  a.Expire(104);  // streams 3 and 4 are 101 and 100 old: at or past max_age
  EXPECT_EQ(a.pending(), 0u);
  EXPECT_EQ(a.stats().requests_without_response, 4u);
  a.OnRequest(Req(9, 1, 1, 200, "GET", "/api"));
  a.OnRequest(Req(8, 1, 1, 200, "GET", "/api"));
  a.ForgetProcess(9);
  EXPECT_EQ(a.pending(), 1u);
}

TEST(RequestAssembler, TruncatedHeadersAreCounted) {
  RequestAssembler a(FakeResolver);
  auto ev = std::get<H2RequestEvent>(*DecodeCaptureEvent(
      Kept(RequestBytes(1, 1, 1, 1, {{":method", "GET"}, {":path", "/api"}}, /*field_count=*/60))));
  a.OnRequest(ev);
  EXPECT_EQ(a.stats().truncated_headers, 1u);
}

// A slot a finished request left is taken by the next request: its record shows nothing of the
// one before (whatever the pipeline wrote into it), and once the slots and their buffers have
// grown, joining a request allocates nothing.
TEST(RequestAssembler, AReusedSlotStartsFromNothingAndJoiningAllocatesNothing) {
  const IdentityRef someone = IdentityRef::Make(Identity());
  RequestAssembler a([&](const RequestConnection&, std::string_view, std::string_view) { return someone; });
  const std::string path = "/apis/batch.company.com/v1/namespaces/etl/datajobs/nightly/status";
  a.OnRequest(std::get<H2RequestEvent>(*DecodeCaptureEvent(Kept(RequestBytes(
      1, 1, 1, 10,
      {{":method", "PATCH"}, {":path", path}, {"content-type", "application/merge-patch+json"}})))));
  sw_h2_response conflict{};
  conflict.hdr = {SW_EV_H2_RESPONSE, 1, 20, 1, 1, 0};
  conflict.status = 409;
  const std::string level_uid = "3f6c1d2e-8a9b-4c0d-9e1f-2a3b4c5d6e7f";
  conflict.priority_level_uid_len = level_uid.size();
  std::memcpy(conflict.priority_level_uid, level_uid.data(), level_uid.size());
  conflict.flow_schema_uid_len = level_uid.size();
  std::memcpy(conflict.flow_schema_uid, level_uid.data(), level_uid.size());
  const std::string body = R"({"kind":"Status","code":409})";
  conflict.body_len = body.size();
  RequestRecord* r = a.OnResponse(std::get<H2ResponseEvent>(
      *DecodeCaptureEvent(Kept(EventBytes(conflict, offsetof(sw_h2_response, body), body)))));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->path, path);
  EXPECT_EQ(r->content_type, "application/merge-patch+json");
  EXPECT_EQ(r->response.priority_level_uid, level_uid);
  EXPECT_EQ(r->response_body_prefix, body);
  // What the pipeline learns and writes into the record.
  r->info.resource = "datajobs";
  r->info.is_resource_request = true;
  r->response.object_seen = true;
  r->response.generation = 7;
  r->response.priority_level = "workload-low";
  r->body_read = BodyFacts{};
  r->keys.set = true;

  // The next request, on another connection, takes the freed slot.
  const H2RequestEvent get = Req(1, 2, 1, 30, "GET", "/api/v1/pods");
  const H2ResponseEvent ok = Resp(1, 2, 1, 40, 200, 5);
  RequestRecord* next = nullptr;
  EXPECT_EQ(stormwatch::testing::AllocationsDuring([&] {
              a.OnRequest(get);
              next = a.OnResponse(ok);
            }),
            0u);
  ASSERT_EQ(next, r);  // the same slot
  EXPECT_EQ(next->method, "GET");
  EXPECT_EQ(next->path, "/api/v1/pods");
  EXPECT_EQ(next->conn_id, 2u);
  EXPECT_EQ(next->start_ns, 30u);
  EXPECT_EQ(next->end_ns, 40u);
  EXPECT_EQ(next->status, 200);
  EXPECT_EQ(next->response_bytes, 5u);
  EXPECT_EQ(next->identity, someone);
  EXPECT_EQ(next->content_type, "");
  EXPECT_EQ(next->response_body_prefix, "");
  EXPECT_EQ(next->info, RequestInfo{});
  EXPECT_EQ(next->response.priority_level_uid, "");
  EXPECT_EQ(next->response.priority_level, "");
  EXPECT_FALSE(next->response.object_seen);
  EXPECT_EQ(next->response.generation, -1);
  EXPECT_FALSE(next->body_read);
  EXPECT_FALSE(next->keys.set);
  EXPECT_EQ(a.pending(), 0u);
}

// Eviction and expiry go oldest first through requests answered out of order.
TEST(RequestAssembler, OldestFirstAcrossAnswersOutOfOrder) {
  RequestAssembler a(FakeResolver, AssemblerLimits{.max_pending = 3, .max_age_ns = 1000});
  for (uint32_t s = 1; s <= 3; ++s) a.OnRequest(Req(1, 1, s, s, "GET", "/api"));
  ASSERT_TRUE(a.OnResponse(Resp(1, 1, 2, 9, 200, 0)));  // the middle one answered
  a.OnRequest(Req(1, 1, 4, 4, "GET", "/api"));
  a.OnRequest(Req(1, 1, 5, 5, "GET", "/api"));           // full: stream 1 goes
  EXPECT_EQ(a.stats().requests_without_response, 1u);
  EXPECT_FALSE(a.OnResponse(Resp(1, 1, 1, 9, 200, 0)));
  a.Expire(1003);  // streams 3 (at 3) is 1000 old; 4 and 5 are not
  EXPECT_EQ(a.pending(), 2u);
  EXPECT_FALSE(a.OnResponse(Resp(1, 1, 3, 9, 200, 0)));
  EXPECT_TRUE(a.OnResponse(Resp(1, 1, 4, 9, 200, 0)));
  EXPECT_TRUE(a.OnResponse(Resp(1, 1, 5, 9, 200, 0)));
  EXPECT_EQ(a.pending(), 0u);
}

// The assembler's slots reuse records: Clear() must leave nothing of the request before.
TEST(RequestRecord, ClearIsANewRecordWithItsBuffersKept) {
  // A field added to RequestRecord changes its size: clear it in RequestRecord::Clear(), set it
  // below, then update this size.
  // (ResponseFacts::spare_finalizers is kept by Clear() on purpose: buffers, not facts.)
  static_assert(sizeof(RequestRecord) == 1008, "RequestRecord changed: see the comment above");
  RequestRecord r;
  r.pid = 1;
  r.conn_id = 2;
  r.stream_id = 3;
  r.start_ns = 4;
  r.end_ns = 5;
  r.protocol = "HTTP/1.1";
  r.peer_address = ParseTcpEndpoint("10.0.0.7:40000");
  r.local_address = ParseTcpEndpoint("10.0.0.2:6443");
  r.method = "PATCH";
  r.path = "/apis/batch.company.com/v1/namespaces/etl/datajobs/nightly/status";
  r.content_type = "application/merge-patch+json";
  r.status = 409;
  r.response_bytes = 6;
  r.response.priority_level_uid = "3f6c1d2e-8a9b-4c0d-9e1f-2a3b4c5d6e7f";
  r.response.flow_schema_uid = "7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d";
  r.response.priority_level = "workload-low";
  r.response.flow_schema = "service-accounts";
  r.response.retry_after_s = 1;
  r.response.object_seen = true;
  r.response.generation = 7;
  r.response.deletion_timestamp = true;
  r.response.finalizers = {"example.com/cleanup"};
  r.response.finalizers_seen = true;
  r.response.resource_version = "48213377";
  r.response_body_prefix = "{}";
  r.body_read = BodyFacts{BodyEncoding::kJson, BodyFactsResult::kObject};
  r.info.is_resource_request = true;
  r.info.path = "/apis/batch.company.com/v1/namespaces/etl/datajobs/nightly/status";
  r.info.verb = "patch";
  r.info.verb_kind = KubeVerb::kPatch;
  r.info.api_prefix = "apis";
  r.info.api_group = "batch.company.com";
  r.info.api_version = "v1";
  r.info.namespace_ = "etl";
  r.info.resource = "datajobs";
  r.info.subresource = "status";
  r.info.name = "nightly";
  r.info.parts_count = 3;
  r.info.verb_via_path_prefix = true;
  r.info.field_selector = "metadata.name=nightly";
  r.info.label_selector = "app=etl";
  r.shape.consistency = QueryShape::Consistency::kConsistent;
  r.shape.paginated = r.shape.continued = r.shape.label_selector = r.shape.field_selector = true;
  r.shape.send_initial_events = r.shape.watch_param = true;
  r.shape.limit = 500;
  r.shape.timeout_seconds = 300;
  r.identity = IdentityRef::Make(Identity());
  r.credential_fingerprint = 0x5eed;
  r.keys = {1, 2, 3, 4, true};
  r.etcd = {1, 500, 1'000'000, 0};
  const char* path_buffer = r.path.data();

  r.Clear();
  EXPECT_TRUE(r == RequestRecord());
  EXPECT_EQ(r.path.data(), path_buffer);  // the buffer kept
  EXPECT_EQ(r.identity, NoIdentity());
}

}  // namespace
}  // namespace stormwatch
