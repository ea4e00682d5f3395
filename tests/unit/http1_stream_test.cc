// HTTP/1.1 exchanges from tls.Conn calls: the same exchange however the bytes are cut,
// keep-alive, Go's 1-byte background read, partly captured calls (prefix + tail), what is
// ignored and why, losses counted per cause, bounded state.
#include "agent/protocol/http1_stream.h"
#include "agent/protocol/http1_parser.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bpf/events.h"
#include "tests/unit/allocation_count.h"

namespace stormwatch {
namespace {

constexpr uint32_t kTgid = 42;
constexpr uint64_t kConn = 0xc000123000;

// One tls.Conn call as the BPF side reports it: the first SW_TLS_CAPTURE bytes, and the last
// SW_TLS_TAIL when more went by.
TlsDataEvent Call(TlsDirection direction, std::string_view bytes, uint64_t ts,
                  uint64_t conn = kConn, uint32_t tgid = kTgid) {
  TlsDataEvent ev;
  ev.tgid = tgid;
  ev.conn = conn;
  ev.ts_ns = ts;
  ev.direction = direction;
  ev.total_len = bytes.size();
  ev.data = bytes.substr(0, SW_TLS_CAPTURE);
  if (bytes.size() > SW_TLS_CAPTURE) ev.tail = bytes.substr(bytes.size() - SW_TLS_TAIL);
  return ev;
}

// An exchange as the sink saw it, copied: Http1Exchange's strings are views for the call only.
struct Exchange {
  Exchange() = default;
  explicit Exchange(const Http1Exchange& x)
      : tgid(x.tgid), conn(x.conn), start_ns(x.start_ns), end_ns(x.end_ns), method(x.method),
        path(x.path), content_type(x.content_type), user_agent(x.user_agent),
        authorization(x.authorization), status(x.status), response_bytes(x.response_bytes),
        priority_level_uid(x.priority_level_uid), flow_schema_uid(x.flow_schema_uid),
        retry_after_s(x.retry_after_s), body_prefix(x.body_prefix), truncated(x.truncated) {}
  uint32_t tgid = 0;
  uint64_t conn = 0, start_ns = 0, end_ns = 0;
  std::string method, path, content_type, user_agent, authorization;
  int status = 0;
  uint64_t response_bytes = 0;
  std::string priority_level_uid, flow_schema_uid;
  int retry_after_s = -1;
  std::string body_prefix;
  bool truncated = false;
};

class Harness {
 public:
  explicit Harness(Http1Limits limits = {})
      : parser([this](const Http1Exchange& ex) { exchanges.emplace_back(ex); }, limits) {}
  void Read(std::string_view bytes, uint64_t ts, uint64_t conn = kConn, uint32_t tgid = kTgid) {
    parser.OnData(Call(TlsDirection::kRead, bytes, ts, conn, tgid));
  }
  void Write(std::string_view bytes, uint64_t ts, uint64_t conn = kConn, uint32_t tgid = kTgid) {
    parser.OnData(Call(TlsDirection::kWrite, bytes, ts, conn, tgid));
  }
  const Http1Stats& stats() const { return parser.stats(); }
  size_t ignored(Http1IgnoreReason reason) const {
    return stats().ignored_connections[static_cast<size_t>(reason)];
  }
  size_t ignored_events(Http1IgnoreReason reason) const {
    return stats().ignored_events[static_cast<size_t>(reason)];
  }

  std::vector<Exchange> exchanges;
  Http1Connections parser;
};

std::string Describe(const Exchange& e) {
  return std::to_string(e.tgid) + " " + std::to_string(e.conn) + " " + e.method + " " + e.path +
         " status=" + std::to_string(e.status) + " bytes=" + std::to_string(e.response_bytes) +
         " ua=" + e.user_agent + " ct=" + e.content_type + " auth=" + e.authorization +
         " pl=" + e.priority_level_uid + " fs=" + e.flow_schema_uid +
         " retry=" + std::to_string(e.retry_after_s) + " prefix=" + e.body_prefix +
         " truncated=" + std::to_string(e.truncated) + " start=" + std::to_string(e.start_ns) +
         " end=" + std::to_string(e.end_ns);
}

std::vector<std::string> DescribeAll(const std::vector<Exchange>& exchanges) {
  std::vector<std::string> out;
  for (const auto& e : exchanges) out.push_back(Describe(e));
  return out;
}

// The request the Python kubernetes client sends for list_pod_for_all_namespaces.
const std::string kPythonGet =
    "GET /api/v1/pods HTTP/1.1\r\n"
    "Host: 10.0.0.1:6443\r\n"
    "Accept-Encoding: identity\r\n"
    "Accept: application/json\r\n"
    "User-Agent: OpenAPI-Generator/29.0.0/python\r\n"
    "Authorization: Bearer eyJhbGciOi.payload.signature\r\n"
    "\r\n";

std::string Request(const std::string& method, const std::string& path,
                    const std::string& extra_headers = "", const std::string& body = "") {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: api\r\nUser-Agent: test/1.0\r\n" +
                  extra_headers;
  if (!body.empty()) r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

std::string Response(int status, const std::string& body, const std::string& extra_headers = "") {
  return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\n" +
         extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string Chunk(const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return size + data + "\r\n";
}

const std::string kChunkedHead =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";

std::string ChunkedResponse(const std::vector<std::string>& chunks) {
  std::string r = kChunkedHead;
  for (const auto& c : chunks) r += Chunk(c);
  return r + "0\r\n\r\n";
}

// The per-request path allocates nothing once a connection has seen a request: the request is
// queued in a spare kept from an earlier one (its strings' buffers grown), heads that arrive
// whole are parsed where they lie, and the exchange lends the request's and the response's
// buffers to the sink instead of copying them.
TEST(Http1Stream, AnExchangeAllocatesNothingOnceItsBuffersHaveGrown) {
  const std::string body = R"({"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"}})";
  const std::string response =
      "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
      "X-Kubernetes-Pf-Flowschema-Uid: 7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d\r\n"
      "X-Kubernetes-Pf-Prioritylevel-Uid: 3f6c1d2e-8a9b-4c0d-9e1f-2a3b4c5d6e7f\r\n"
      "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  const std::string request =
      Request("POST", "/api/v1/namespaces/default/pods",
              "Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6YTpiIn0.sig\r\n"
              "Content-Type: application/json\r\n",
              R"({"metadata":{"name":"p"}})");
  int matched = 0;
  Http1Connections parser([&](const Http1Exchange& ex) {
    // Compared, not copied: a copy would allocate.
    matched += ex.method == "POST" && ex.path == "/api/v1/namespaces/default/pods" &&
               ex.status == 201 && ex.authorization.starts_with("Bearer eyJ") &&
               ex.user_agent == "test/1.0" && ex.content_type == "application/json" &&
               ex.priority_level_uid == "3f6c1d2e-8a9b-4c0d-9e1f-2a3b4c5d6e7f" &&
               ex.flow_schema_uid == "7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d" &&
               ex.body_prefix == body;
  });
  parser.OnData(Call(TlsDirection::kRead, request, 100));
  parser.OnData(Call(TlsDirection::kWrite, response, 200));
  ASSERT_EQ(matched, 1);
  EXPECT_EQ(stormwatch::testing::AllocationsDuring([&] {
              for (uint64_t ts = 300; ts < 800; ts += 200) {
                parser.OnData(Call(TlsDirection::kRead, request, ts));
                parser.OnData(Call(TlsDirection::kWrite, response, ts + 100));
              }
            }),
            0u);
  EXPECT_EQ(matched, 4);
  EXPECT_EQ(parser.stats().exchanges, 4u);
}

// Header names are matched whatever their case, 8 bytes at a time (the last 8 overlapping the
// word before): a control byte where the name has '-' (bit 5 would turn '\r' into '-') does not
// match, nor does a name that differs only in its last bytes.
TEST(Http1Parser, HeaderNamesMatchInAnyCaseAndOnlyExactly) {
  const std::string request =
      "PUT /api/v1/namespaces/a/configmaps/c HTTP/1.1\r\nAUTHORIZATION: Bearer upper\r\n"
      "User-Agenx: wrong/0\r\nuser-agent: lower/1.0\r\nContent\rType: text/evil\r\nContent-Length: 2\r\n\r\n{}";
  size_t end = 0;
  std::optional<http1::RequestHead> r = http1::ParseRequestHead(request, &end);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->authorization, "Bearer upper");
  EXPECT_EQ(r->user_agent, "lower/1.0");
  EXPECT_EQ(r->content_type, "");  // "Content\rType" is not Content-Type
  EXPECT_EQ(r->framing.content_length, 2u);
  EXPECT_EQ(end, request.size() - 2);  // the head ends before the body's 2 bytes
  http1::ParseRequestHead(request.substr(0, request.size() - 4), &end);
  EXPECT_EQ(end, 0u);  // no blank line yet: not a head

  const std::string response =
      "HTTP/1.1 200 OK\r\nX-KUBERNETES-PF-PRIORITYLEVEL-UID: pl\r\n"
      "X-Kubernetes-Pf-Prioritylevel-Uix: evil\r\nX-Kubernetes-Pf-Flowschema\rUid: evil\r\n"
      "X-Kubernetes-Pf\rFlowschema-Uid: evil\r\nx-kubernetes-pf-flowschema-uid\x01: evil\r\n"
      "Retry-After: 3\r\nContent\x0dLength: 7\r\n\r\n";
  std::optional<http1::ResponseHead> h = http1::ParseResponseHead(response, &end);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->priority_level_uid, "pl");
  EXPECT_EQ(h->flow_schema_uid, "");
  EXPECT_EQ(h->retry_after_s, 3);
  EXPECT_FALSE(h->framing.content_length);
  EXPECT_EQ(end, response.size());
}

TEST(Http1Stream, PythonClientListWithApfHeaders) {
  Harness h;
  std::string body = R"({"kind":"PodList","apiVersion":"v1","items":[]})";
  h.Read(kPythonGet, 100);
  h.Write("HTTP/1.1 200 OK\r\n"
          "Audit-Id: 5d1c\r\n"
          "Cache-Control: no-cache, private\r\n"
          "Content-Type: application/json\r\n"
          "X-Kubernetes-Pf-Flowschema-Uid: fs-uid-1\r\n"
          "X-Kubernetes-Pf-Prioritylevel-Uid: pl-uid-1\r\n"
          "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body,
          250);
  ASSERT_EQ(h.exchanges.size(), 1u);
  const Exchange& e = h.exchanges[0];
  EXPECT_EQ(e.tgid, kTgid);
  EXPECT_EQ(e.conn, kConn);
  EXPECT_EQ(e.method, "GET");
  EXPECT_EQ(e.path, "/api/v1/pods");
  EXPECT_EQ(e.user_agent, "OpenAPI-Generator/29.0.0/python");
  EXPECT_EQ(e.authorization, "Bearer eyJhbGciOi.payload.signature");
  EXPECT_EQ(e.content_type, "");
  EXPECT_EQ(e.status, 200);
  EXPECT_EQ(e.response_bytes, body.size());
  // A read's body is not kept: only writes' are read (it may be a Secret's).
  EXPECT_EQ(e.body_prefix, "");
  EXPECT_EQ(e.priority_level_uid, "pl-uid-1");
  EXPECT_EQ(e.flow_schema_uid, "fs-uid-1");
  EXPECT_EQ(e.retry_after_s, -1);
  EXPECT_FALSE(e.truncated);
  EXPECT_EQ(e.start_ns, 100u);
  EXPECT_EQ(e.end_ns, 250u);
  EXPECT_EQ(h.stats().exchanges, 1u);
  EXPECT_EQ(h.stats().unparseable, 0u);
}

struct SplitCase {
  std::string name;
  std::string reads;   // the request stream
  std::string writes;  // the response stream
  std::vector<std::string> expected;  // Describe() of each exchange, reads at 100, writes at 200
};

std::string Expect(const std::string& method, const std::string& path, int status,
                   uint64_t bytes, const std::string& prefix) {
  Exchange e;
  e.tgid = kTgid;
  e.conn = kConn;
  e.method = method;
  e.path = path;
  e.status = status;
  e.response_bytes = bytes;
  e.user_agent = "test/1.0";
  e.body_prefix = prefix;
  e.start_ns = 100;
  e.end_ns = 200;
  return Describe(e);
}

std::vector<SplitCase> SplitCases() {
  std::vector<SplitCase> cases;
  std::string obj = R"({"kind":"Pod","metadata":{"name":"p","generation":3}})";
  cases.push_back({"content_length", Request("GET", "/api/v1/namespaces/a/pods/p?x=1"),
                   Response(200, obj), {Expect("GET", "/api/v1/namespaces/a/pods/p?x=1", 200,
                                               obj.size(), "")}});
  cases.push_back({"write_content_length", Request("PATCH", "/api/v1/namespaces/a/pods/p"),
                   Response(200, obj), {Expect("PATCH", "/api/v1/namespaces/a/pods/p", 200,
                                               obj.size(), obj)}});
  std::string chunked = ChunkedResponse({"{\"a\":", "1}"});
  cases.push_back({"chunked_response", Request("POST", "/api/v1/namespaces/a/pods"), chunked,
                   {Expect("POST", "/api/v1/namespaces/a/pods", 200,
                           chunked.size() - kChunkedHead.size(), "{\"a\":1}")}});
  std::string put_body = R"({"spec":{"replicas":2}})";
  cases.push_back(
      {"put_with_body_then_get",
       Request("PUT", "/apis/apps/v1/namespaces/a/deployments/d", "", put_body) +
           Request("GET", "/healthz"),
       Response(409, "{}") + Response(200, "ok"),
       {Expect("PUT", "/apis/apps/v1/namespaces/a/deployments/d", 409, 2, "{}"),
        Expect("GET", "/healthz", 200, 2, "")}});
  std::string chunked_upload = "POST /api/v1/namespaces/a/configmaps HTTP/1.1\r\nHost: api\r\n"
                               "User-Agent: test/1.0\r\nTransfer-Encoding: chunked\r\n\r\n" +
                               Chunk("{\"kind\":") + Chunk("\"ConfigMap\"}") + "0\r\n\r\n";
  cases.push_back({"chunked_request_body", chunked_upload + Request("HEAD", "/version"),
                   Response(201, "{}") + "HTTP/1.1 200 OK\r\nContent-Length: 120\r\n\r\n",
                   {Expect("POST", "/api/v1/namespaces/a/configmaps", 201, 2, "{}"),
                    Expect("HEAD", "/version", 200, 0, "")}});
  cases.push_back({"no_content_and_not_modified",
                   Request("DELETE", "/api/v1/namespaces/a/pods/p") + Request("GET", "/openapi/v2"),
                   "HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n",
                   {Expect("DELETE", "/api/v1/namespaces/a/pods/p", 204, 0, ""),
                    Expect("GET", "/openapi/v2", 304, 0, "")}});
  return cases;
}

std::vector<std::string> Feed(const std::vector<std::string>& reads,
                              const std::vector<std::string>& writes) {
  Harness h;
  for (const auto& r : reads) h.Read(r, 100);
  for (const auto& w : writes) h.Write(w, 200);
  EXPECT_EQ(h.stats().unparseable, 0u);
  EXPECT_EQ(h.stats().responses_without_request, 0u);
  return DescribeAll(h.exchanges);
}

std::vector<std::string> Bytes(const std::string& s) {
  std::vector<std::string> out;
  for (char ch : s) out.emplace_back(1, ch);
  return out;
}

TEST(Http1Stream, SameExchangesAtEverySplitPoint) {
  for (const SplitCase& c : SplitCases()) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(Feed({c.reads}, {c.writes}), c.expected);
    for (size_t i = 1; i < c.reads.size(); ++i) {
      ASSERT_EQ(Feed({c.reads.substr(0, i), c.reads.substr(i)}, {c.writes}), c.expected)
          << "reads cut at " << i;
    }
    for (size_t i = 1; i < c.writes.size(); ++i) {
      ASSERT_EQ(Feed({c.reads}, {c.writes.substr(0, i), c.writes.substr(i)}), c.expected)
          << "writes cut at " << i;
    }
    EXPECT_EQ(Feed(Bytes(c.reads), Bytes(c.writes)), c.expected) << "byte by byte";
  }
}

TEST(Http1Stream, KeepAliveWithGoBackgroundOneByteReads) {
  Harness h;
  uint64_t ts = 1000;
  for (int k = 0; k < 100; ++k) {
    std::string path = "/api/v1/namespaces/ns/pods/p" + std::to_string(k);
    std::string req = Request(k % 2 ? "GET" : "PATCH", path, "Content-Type: application/merge-patch+json\r\n",
                              k % 2 ? "" : R"({"metadata":{"labels":{"a":"b"}}})");
    // net/http's connReader.backgroundRead returns the next request's first byte alone.
    h.Read(req.substr(0, 1), ts);
    h.Read(req.substr(1), ts + 1);
    h.Write(Response(200, "{\"k\":" + std::to_string(k) + "}"), ts + 5);
    ts += 10;
  }
  ASSERT_EQ(h.exchanges.size(), 100u);
  for (int k = 0; k < 100; ++k) {
    const Exchange& e = h.exchanges[k];
    EXPECT_EQ(e.method, k % 2 ? "GET" : "PATCH");
    EXPECT_EQ(e.path, "/api/v1/namespaces/ns/pods/p" + std::to_string(k));
    EXPECT_EQ(e.content_type, "application/merge-patch+json");
    EXPECT_EQ(e.body_prefix, k % 2 ? "" : "{\"k\":" + std::to_string(k) + "}");  // PATCH's only
    EXPECT_EQ(e.start_ns, 1000u + 10 * k);  // the 1-byte read
    EXPECT_EQ(e.end_ns, 1005u + 10 * k);
  }
  EXPECT_EQ(h.stats().exchanges, 100u);
  EXPECT_EQ(h.stats().unparseable + h.stats().requests_without_response +
                h.stats().responses_without_request + h.stats().head_truncated,
            0u);
  EXPECT_EQ(h.parser.connections(), 1u);
}

TEST(Http1Stream, NextRequestsFirstByteBeforeTheResponse) {
  Harness h;
  std::string second = Request("GET", "/api/v1/nodes");
  h.Read(Request("GET", "/api/v1/pods"), 10);
  h.Read(second.substr(0, 1), 20);  // read back in the background while the handler runs
  h.Write(Response(200, "a"), 30);
  h.Read(second.substr(1), 40);
  h.Write(Response(404, "b"), 50);
  ASSERT_EQ(h.exchanges.size(), 2u);
  EXPECT_EQ(h.exchanges[0].path, "/api/v1/pods");
  EXPECT_EQ(h.exchanges[0].status, 200);
  EXPECT_EQ(h.exchanges[0].end_ns, 30u);
  EXPECT_EQ(h.exchanges[1].path, "/api/v1/nodes");
  EXPECT_EQ(h.exchanges[1].status, 404);
  EXPECT_EQ(h.exchanges[1].start_ns, 20u);
  EXPECT_EQ(h.exchanges[1].end_ns, 50u);
}

TEST(Http1Stream, ContentLengthBodiesLargerThanTheCapture) {
  Harness h;
  std::string upload(100000, 'u');
  std::string req = Request("POST", "/api/v1/namespaces/a/secrets", "", "");
  // The request body arrives in one large read, of which only a prefix and tail are captured.
  h.Read(req.substr(0, req.size() - 2) + "Content-Length: 100000\r\n\r\n", 10);
  h.Read(upload, 11);
  h.Read(Request("GET", "/api/v1/namespaces/a/secrets/s"), 20);
  std::string big(50000, 'b');
  std::string big_response = Response(201, big);
  ASSERT_GT(big_response.size(), size_t{SW_TLS_CAPTURE});
  h.Write(big_response, 30);  // head + body in one write: prefix + tail
  h.Write(Response(200, "{}"), 40);
  ASSERT_EQ(h.exchanges.size(), 2u);
  EXPECT_EQ(h.exchanges[0].method, "POST");
  EXPECT_EQ(h.exchanges[0].status, 201);
  EXPECT_EQ(h.exchanges[0].response_bytes, 50000u);
  // The prefix stops where the capture did.
  EXPECT_EQ(h.exchanges[0].body_prefix,
            big.substr(0, SW_TLS_CAPTURE - (big_response.size() - big.size())));
  EXPECT_EQ(h.exchanges[0].end_ns, 30u);
  EXPECT_EQ(h.exchanges[1].path, "/api/v1/namespaces/a/secrets/s");
  EXPECT_EQ(h.exchanges[1].end_ns, 40u);
  EXPECT_EQ(h.stats().unparseable, 0u);
}

TEST(Http1Stream, ChunkedRequestBodyLargerThanTheCapture) {
  Harness h;
  std::string data(30000, 'u');
  std::string head = "POST /api/v1/namespaces/a/configmaps HTTP/1.1\r\nHost: api\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n";
  h.Read(head + Chunk(data).substr(0, 100), 1);
  h.Read(Chunk(data).substr(100), 2);  // read straight into the handler's buffer: prefix + tail
  h.Read("0\r\n\r\n" + Request("GET", "/next"), 3);
  h.Write(Response(201, "{}"), 4);
  h.Write(Response(200, "{}"), 5);
  ASSERT_EQ(h.exchanges.size(), 2u);
  EXPECT_EQ(h.exchanges[0].method, "POST");
  EXPECT_EQ(h.exchanges[1].path, "/next");
  EXPECT_EQ(h.exchanges[1].start_ns, 3u);
  EXPECT_EQ(h.stats().unparseable, 0u);
}

TEST(Http1Stream, BodyPrefixIsBounded) {
  Harness h;
  std::string body(3 * SW_TLS_CAPTURE, 'j');
  h.Read(Request("PUT", "/api/v1/namespaces/a/configmaps/c"), 1);
  std::string response = Response(200, body);
  // Written as Go's bufio.Writer does: 4 KB at a time, each fully captured.
  for (size_t at = 0; at < response.size(); at += 4096) h.Write(response.substr(at, 4096), 2);
  ASSERT_EQ(h.exchanges.size(), 1u);
  EXPECT_EQ(h.exchanges[0].body_prefix, body.substr(0, 4096));
  EXPECT_EQ(h.exchanges[0].response_bytes, body.size());
}

TEST(Http1Stream, ChunkedBodyThroughAnUncapturedMiddleKeepsItsFraming) {
  Harness h;
  h.Read(Request("POST", "/api/v1/namespaces/a/configmaps"), 1);
  // Data whose end looks like a chunked body's end: only the framing tells it is not.
  std::string data = std::string(19993, 'd') + "\r\n0\r\n\r\n";
  std::string chunk = Chunk(data);
  // Go: the head and the chunk size through bufio, the data written straight through, then
  // the chunk's CRLF and the terminator.
  std::string first = kChunkedHead + chunk.substr(0, 100);
  std::string middle = chunk.substr(100, chunk.size() - 102);
  h.Write(first, 2);
  h.Write(middle, 3);
  EXPECT_TRUE(h.exchanges.empty());
  h.Write("\r\n0\r\n\r\n", 4);
  ASSERT_EQ(h.exchanges.size(), 1u);
  EXPECT_EQ(h.exchanges[0].response_bytes, chunk.size() + 5);
  EXPECT_EQ(h.exchanges[0].end_ns, 4u);
  // Contiguous data from both writes, up to the bound; "4e20\r\n" is framing.
  EXPECT_EQ(h.exchanges[0].body_prefix, data.substr(0, 4096));
}

TEST(Http1Stream, ChunkedEndSeenInTheTailWhenTheFramingWasNotCaptured) {
  std::vector<std::string> chunks(10, std::string(1000, 'c'));
  std::string response = ChunkedResponse(chunks);
  ASSERT_GT(response.size(), size_t{SW_TLS_CAPTURE + 2000});  // chunk sizes inside the gap

  Harness h;
  h.Read(Request("POST", "/api/v1/namespaces/a/events"), 1);
  h.Write(response, 2);
  ASSERT_EQ(h.exchanges.size(), 1u);
  EXPECT_EQ(h.exchanges[0].response_bytes, response.size() - kChunkedHead.size());
  // The data of the captured prefix: three whole chunks (1007 bytes with framing), then the
  // start of the fourth after its 5-byte size line.
  size_t captured_body = SW_TLS_CAPTURE - kChunkedHead.size();
  ASSERT_GT(captured_body, 3 * 1007u + 5);
  ASSERT_LT(captured_body, 4 * 1007u);
  EXPECT_EQ(h.exchanges[0].body_prefix, std::string(3000 + captured_body - 3 * 1007 - 5, 'c'));
  EXPECT_EQ(h.exchanges[0].end_ns, 2u);

  // Without its end in the tail the response goes on; the terminator in its own write ends it.
  Harness split;
  split.Read(Request("GET", "/api/v1/events"), 1);
  std::string without_end = response.substr(0, response.size() - 5);
  split.Write(without_end, 2);
  EXPECT_TRUE(split.exchanges.empty());
  split.Write("0\r\n\r\n", 3);
  ASSERT_EQ(split.exchanges.size(), 1u);
  EXPECT_EQ(split.exchanges[0].response_bytes, response.size() - kChunkedHead.size());
  EXPECT_EQ(split.exchanges[0].end_ns, 3u);

  // A chunk size in the gap and no terminator ever: lost at close, not invented.
  Harness cut;
  cut.Read(Request("GET", "/api/v1/events"), 1);
  cut.Write(without_end, 2);
  cut.parser.OnClose(kTgid, kConn);
  EXPECT_TRUE(cut.exchanges.empty());
  EXPECT_EQ(cut.stats().requests_without_response, 1u);
}

TEST(Http1Stream, ResponseWithoutLengthEndsAtClose) {
  Harness h;
  h.Read(Request("DELETE", "/api/v1/namespaces/a/pods/p"), 1);
  h.Write("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nline 1\n", 2);
  h.Write("line 2\n", 3);
  EXPECT_TRUE(h.exchanges.empty());
  h.parser.OnClose(kTgid, kConn);
  ASSERT_EQ(h.exchanges.size(), 1u);
  EXPECT_EQ(h.exchanges[0].response_bytes, 14u);
  EXPECT_EQ(h.exchanges[0].body_prefix, "line 1\nline 2\n");
  EXPECT_EQ(h.exchanges[0].end_ns, 3u);
  EXPECT_EQ(h.parser.connections(), 0u);
}

TEST(Http1Stream, InterimContinueThenFinalResponse) {
  Harness go;
  std::string body = R"({"kind":"ConfigMap"})";
  std::string head = "POST /api/v1/namespaces/a/configmaps HTTP/1.1\r\nHost: api\r\n"
                     "Expect: 100-continue\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n";
  go.Read(head, 1);
  go.Write("HTTP/1.1 100 Continue\r\n\r\n", 2);
  go.Read(body, 3);
  go.Write(Response(201, "{}"), 4);
  ASSERT_EQ(go.exchanges.size(), 1u);
  EXPECT_EQ(go.exchanges[0].status, 201);
  EXPECT_EQ(go.exchanges[0].end_ns, 4u);
  EXPECT_EQ(go.stats().responses_without_request, 0u);
}

TEST(Http1Stream, UpgradeEmitsThenIgnoresTheTunnel) {
  Harness h;
  h.Read(Request("POST", "/api/v1/namespaces/a/pods/p/exec?command=sh",
                 "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"),
         1);
  h.Write("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n"
          "\x80\x03",
          2);
  h.Read(std::string("\x80\x03\x00\x01\x00\x00", 6), 3);
  h.Write("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 4);  // tunnel bytes, whatever they are
  ASSERT_EQ(h.exchanges.size(), 1u);
  EXPECT_EQ(h.exchanges[0].status, 101);
  EXPECT_EQ(h.exchanges[0].path, "/api/v1/namespaces/a/pods/p/exec?command=sh");
  EXPECT_EQ(h.ignored(Http1IgnoreReason::kUpgraded), 1u);
  EXPECT_EQ(h.ignored_events(Http1IgnoreReason::kUpgraded), 2u);
  EXPECT_EQ(h.stats().responses_without_request, 0u);
}

TEST(Http1Stream, RetryAfterAndCaseInsensitiveHeaders) {
  Harness h;
  h.Read("get /api/v1/pods HTTP/1.1\r\n\r\n", 1);  // lower-case method: not a request line
  EXPECT_EQ(h.ignored(Http1IgnoreReason::kNotHttp1), 1u);

  Harness ok;
  ok.Read("GET /api/v1/pods HTTP/1.1\r\nuser-agent: kubectl/v1.30.0\r\nAUTHORIZATION: Bearer t\r\n"
          "content-type: application/json\r\n\r\n",
          1);
  ok.Write("HTTP/1.1 429 Too Many Requests\r\nretry-after: 7\r\n"
           "x-kubernetes-pf-prioritylevel-uid: pl\r\ncontent-length: 0\r\n\r\n",
           2);
  ok.Read(Request("GET", "/x"), 3);
  ok.Write("HTTP/1.1 429 Too Many Requests\r\nRetry-After: Fri, 31 Dec 1999 23:59:59 GMT\r\n"
           "Content-Length: 0\r\n\r\n",
           4);
  ASSERT_EQ(ok.exchanges.size(), 2u);
  EXPECT_EQ(ok.exchanges[0].status, 429);
  EXPECT_EQ(ok.exchanges[0].retry_after_s, 7);
  EXPECT_EQ(ok.exchanges[0].priority_level_uid, "pl");
  EXPECT_EQ(ok.exchanges[0].user_agent, "kubectl/v1.30.0");
  EXPECT_EQ(ok.exchanges[0].authorization, "Bearer t");
  EXPECT_EQ(ok.exchanges[0].content_type, "application/json");
  EXPECT_EQ(ok.exchanges[1].retry_after_s, -1);  // a date, not seconds
}

TEST(Http1Stream, Http2PrefaceIsIgnored) {
  const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  Harness h;
  h.Read(preface, 1);
  h.Read(std::string("\x00\x00\x12\x04\x00\x00\x00\x00\x00", 9), 2);
  h.Write(std::string("\x00\x00\x00\x04\x01\x00\x00\x00\x00", 9), 3);
  h.Read(Request("GET", "/looks/like/http1"), 4);
  EXPECT_TRUE(h.exchanges.empty());
  EXPECT_EQ(h.ignored(Http1IgnoreReason::kHttp2), 1u);
  EXPECT_EQ(h.ignored_events(Http1IgnoreReason::kHttp2), 3u);
  EXPECT_EQ(h.stats().unparseable, 0u);

  // Even when the preface trickles in: "P" could still be POST, "PRI * HTTP/2" cannot.
  Harness slow;
  for (const auto& b : Bytes(preface)) slow.Read(b, 1);
  EXPECT_EQ(slow.ignored(Http1IgnoreReason::kHttp2), 1u);
  EXPECT_EQ(slow.ignored_events(Http1IgnoreReason::kHttp2), preface.size() - 14);
}

TEST(Http1Stream, ClientSideConnectionsAreIgnored) {
  Harness h;
  // kube-apiserver calling a webhook: it writes the request and reads the response.
  h.Write(Request("POST", "/validate"), 1, 1);
  h.Read(Response(200, "{}"), 2, 1);
  // kube-apiserver to etcd: the HTTP/2 client preface is a write.
  h.Write("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 3, 2);
  h.Read(std::string("\x00\x00\x00\x04\x01\x00\x00\x00\x00", 9), 4, 2);
  EXPECT_TRUE(h.exchanges.empty());
  EXPECT_EQ(h.ignored(Http1IgnoreReason::kClientSide), 2u);
  EXPECT_EQ(h.ignored_events(Http1IgnoreReason::kClientSide), 2u);
  EXPECT_EQ(h.stats().responses_without_request, 0u);
}

TEST(Http1Stream, JoinedMidResponseBodySkipsItThenCaptures) {
  // The agent attached while a large chunked LIST was being written: its first event on the
  // connection is the middle of a body. That is a server connection, not a client's.
  Harness h;
  h.Write("00001000\r\n{\"kind\":\"Pod\"}", 1);
  h.Write("\r\n0\r\n\r\n", 2);
  h.Read(Request("GET", "/api/v1/nodes"), 3);
  h.Write(Response(200, "{}"), 4);
  ASSERT_EQ(h.exchanges.size(), 1u);
  EXPECT_EQ(h.exchanges[0].path, "/api/v1/nodes");
  EXPECT_EQ(h.stats().joined_mid_response, 2u);
  EXPECT_EQ(h.ignored(Http1IgnoreReason::kClientSide), 0u);
}

TEST(Http1Stream, JoinedMidExchangeCountsTheOrphanResponseThenCaptures) {
  Harness h;
  h.Write(Response(200, "{\"items\":[]}"), 1);  // the agent attached during this request
  h.Read(Request("GET", "/api/v1/pods"), 2);
  h.Write(Response(200, "{}"), 3);
  ASSERT_EQ(h.exchanges.size(), 1u);
  EXPECT_EQ(h.exchanges[0].path, "/api/v1/pods");
  EXPECT_EQ(h.stats().responses_without_request, 1u);
}

TEST(Http1Stream, GarbageIsCountedAndTheConnectionResyncs) {
  Harness h;
  h.Read(std::string("\x16\x03\x01\x02\x00", 5), 1, 1);  // not a request line at all
  h.Read(Request("GET", "/after"), 2, 1);
  EXPECT_EQ(h.ignored(Http1IgnoreReason::kNotHttp1), 1u);
  EXPECT_EQ(h.ignored_events(Http1IgnoreReason::kNotHttp1), 1u);

  // An established connection: a malformed head, then a request at the start of a read.
  h.Read(Request("GET", "/one"), 3, 2);
  h.Write(Response(200, "1"), 4, 2);
  h.Read("GET /two HTTP/1.1\r\nContent-Length: many\r\n\r\nbody bytes", 5, 2);
  EXPECT_EQ(h.stats().unparseable, 1u);
  h.Read("more body bytes\r\n" + Request("GET", "/three"), 6, 2);
  h.Write(Response(200, "3"), 7, 2);
  ASSERT_EQ(h.exchanges.size(), 2u);
  EXPECT_EQ(h.exchanges[0].path, "/one");
  EXPECT_EQ(h.exchanges[1].path, "/three");
  EXPECT_EQ(h.stats().unparseable, 1u);

  // A response that is not HTTP: its request is lost, the next status line at a write resyncs.
  h.Read(Request("GET", "/four"), 8, 2);
  h.Write("garbage\r\n\r\n", 9, 2);
  h.Read(Request("GET", "/five"), 10, 2);
  h.Write(Response(200, "5"), 11, 2);
  ASSERT_EQ(h.exchanges.size(), 3u);
  EXPECT_EQ(h.exchanges[2].path, "/five");
  EXPECT_EQ(h.stats().unparseable, 2u);
  EXPECT_EQ(h.stats().requests_without_response, 1u);
}

TEST(Http1Stream, RandomBytesNeverCrashAndStayBounded) {
  Http1Limits limits;
  limits.max_connections = 8;
  limits.max_head_bytes = 1024;
  Harness h(limits);
  std::mt19937 rng(7);
  std::string valid = Request("PATCH", "/api/v1/namespaces/a/pods/p", "", "{\"x\":1}") +
                      kPythonGet;
  std::string response = ChunkedResponse({"abc", "defg"}) + Response(200, "{}");
  for (int round = 0; round < 2000; ++round) {
    uint64_t conn = rng() % 12;
    std::string bytes = rng() % 2 ? valid : response;
    for (int flips = rng() % 4; flips > 0; --flips) bytes[rng() % bytes.size()] = char(rng());
    size_t at = rng() % bytes.size();
    TlsDirection dir = rng() % 2 ? TlsDirection::kRead : TlsDirection::kWrite;
    h.parser.OnData(Call(dir, bytes.substr(0, at), round, conn));
    h.parser.OnData(Call(dir, bytes.substr(at), round, conn));
    if (rng() % 50 == 0) h.parser.OnClose(kTgid, conn);
    ASSERT_LE(h.parser.connections(), 8u);
  }
  EXPECT_GT(h.stats().connections_evicted, 0u);
}

TEST(Http1Stream, CloseWithoutResponseIsCounted) {
  Harness h;
  h.Read(Request("GET", "/api/v1/pods?watch=true"), 1);
  h.parser.OnClose(kTgid, kConn);
  EXPECT_TRUE(h.exchanges.empty());
  EXPECT_EQ(h.stats().requests_without_response, 1u);
  EXPECT_EQ(h.parser.connections(), 0u);
  h.parser.OnClose(kTgid, kConn);  // unknown connection: nothing
  EXPECT_EQ(h.stats().requests_without_response, 1u);
}

TEST(Http1Stream, ConnectionsAreBoundedLeastRecentlyActiveFirst) {
  Http1Limits limits;
  limits.max_connections = 4;
  Harness h(limits);
  for (uint64_t conn = 1; conn <= 4; ++conn) h.Read(Request("GET", "/c" + std::to_string(conn)), conn, conn);
  h.Read("", 5, 1);  // any event keeps a connection recent
  h.Read(Request("GET", "/c5"), 6, 5);  // evicts 2, the least recently active
  h.Read(Request("GET", "/c6"), 7, 6);  // evicts 3
  EXPECT_EQ(h.parser.connections(), 4u);
  EXPECT_EQ(h.stats().connections_evicted, 2u);
  EXPECT_EQ(h.stats().requests_without_response, 2u);
  h.Write(Response(200, "1"), 8, 1);
  h.Write(Response(200, "2"), 9, 2);  // its request was forgotten
  ASSERT_EQ(h.exchanges.size(), 1u);
  EXPECT_EQ(h.exchanges[0].path, "/c1");
  EXPECT_EQ(h.stats().responses_without_request, 1u);
}

TEST(Http1Stream, OversizedHeadIsUnparseableThenResyncs) {
  Http1Limits limits;
  limits.max_head_bytes = 256;
  Harness h(limits);
  h.Read(Request("GET", "/small"), 1);
  h.Write(Response(200, "s"), 2);
  std::string big = Request("GET", "/big", "X-Filler: " + std::string(300, 'f') + "\r\n");
  h.Read(big.substr(0, 200), 3);
  h.Read(big.substr(200), 4);
  EXPECT_EQ(h.stats().unparseable, 1u);
  h.Read(Request("GET", "/next"), 5);
  h.Write(Response(200, "n"), 6);
  ASSERT_EQ(h.exchanges.size(), 2u);
  EXPECT_EQ(h.exchanges[1].path, "/next");
  EXPECT_EQ(h.exchanges[1].start_ns, 5u);
}

TEST(Http1Stream, UncapturedBytesInsideAHeadMarkItTruncated) {
  Harness h;
  // A request head longer than the capture in one read: its damaged line is dropped, the rest
  // kept, and the blank line found in the tail.
  std::string head = "GET /api/v1/pods HTTP/1.1\r\nUser-Agent: ua/2\r\nAuthorization: Bearer t\r\n"
                     "X-Huge: " + std::string(6000, 'h') + "\r\n\r\n";
  h.Read(head, 1);
  std::string response = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Huge: " +
                         std::string(6000, 'h') + "\r\nX-Kubernetes-PF-FlowSchema-UID: f\r\n\r\n";
  h.Write(response, 2);
  h.Write("{}", 3);
  ASSERT_EQ(h.exchanges.size(), 1u);
  const Exchange& e = h.exchanges[0];
  EXPECT_EQ(e.path, "/api/v1/pods");
  EXPECT_EQ(e.user_agent, "ua/2");
  EXPECT_EQ(e.authorization, "Bearer t");
  EXPECT_TRUE(e.truncated);
  EXPECT_EQ(e.flow_schema_uid, "");  // inside the uncaptured middle
  EXPECT_EQ(e.response_bytes, 2u);
  EXPECT_EQ(e.end_ns, 3u);
  EXPECT_EQ(h.stats().head_truncated, 2u);
}

TEST(Http1Stream, ExpireAndForgetProcessDropPendingRequests) {
  Http1Limits limits;
  limits.max_idle_ns = 1000;
  Harness h(limits);
  h.Read(Request("GET", "/a"), 100, 1);
  h.Read(Request("GET", "/b"), 600, 2);
  h.Read(Request("GET", "/c"), 700, 3, 7);
  h.parser.Expire(1099);  // conn 1 idle for 999 ns: kept
  EXPECT_EQ(h.parser.connections(), 3u);
  h.parser.Expire(1100);
  EXPECT_EQ(h.parser.connections(), 2u);
  EXPECT_EQ(h.stats().requests_without_response, 1u);
  h.parser.ForgetProcess(7);
  EXPECT_EQ(h.parser.connections(), 1u);
  EXPECT_EQ(h.stats().requests_without_response, 2u);
  h.Write(Response(200, "b"), 1200, 2);
  ASSERT_EQ(h.exchanges.size(), 1u);
  EXPECT_EQ(h.exchanges[0].path, "/b");
}

TEST(Http1Stream, PipelinedRequestsAreBounded) {
  Http1Limits limits;
  limits.max_pipelined = 2;
  Harness h(limits);
  h.Read(Request("GET", "/1") + Request("GET", "/2") + Request("GET", "/3"), 1);
  EXPECT_EQ(h.stats().requests_without_response, 1u);
  h.Write(Response(200, "x") + Response(200, "y"), 2);
  ASSERT_EQ(h.exchanges.size(), 2u);
  EXPECT_EQ(h.exchanges[0].path, "/2");
  EXPECT_EQ(h.exchanges[1].path, "/3");
}

}  // namespace
}  // namespace stormwatch
