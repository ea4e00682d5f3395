// HTTP/1.1 exchanges rebuilt from the plaintext of kube-apiserver's crypto/tls.(*Conn) calls:
// Read (the bytes a call returned: requests) and Write (the bytes it was given: responses).
// One parser per (process, tls.Conn): requests are framed from the read stream, responses from
// the write stream, and paired in order. Calls may be partly captured (a prefix plus the last
// bytes): lengths keep the framing, the tail shows a chunked body's end. Pure and
// single-threaded; bounded state; every loss is counted, never fatal.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/core/bounded_lru.h"
#include "agent/protocol/http1_parser.h"
#include "agent/protocol/tls_events.h"

namespace stormwatch {

// One request and its response, handed to the sink: the strings are views into the parser's
// buffers, valid for the call only (copy what must outlive it).
struct Http1Exchange {
  uint32_t tgid = 0;
  uint64_t conn = 0;
  uint64_t start_ns = 0;  // the read that returned the first byte of the request head
  uint64_t end_ns = 0;    // the write that completed the response
  std::string_view method;
  std::string_view path;  // request target as sent, query included
  std::string_view content_type;
  std::string_view user_agent;
  // Wiped from the parser's memory as soon as the sink returns.
  std::string_view authorization;
  int status = 0;
  // Body bytes on the wire after the response head (chunk framing included when chunked).
  uint64_t response_bytes = 0;
  std::string_view priority_level_uid;  // X-Kubernetes-PF-PriorityLevel-UID
  std::string_view flow_schema_uid;     // X-Kubernetes-PF-FlowSchema-UID
  int retry_after_s = -1;               // Retry-After in seconds; -1 when absent or a date
  // A write's (POST, PUT, PATCH, DELETE: the requests whose answers the agent reads, as the
  // HTTP/2 probe keeps them) first response body bytes (dechunked), up to
  // Http1Limits::max_body_prefix; stops at the first uncaptured byte; empty for other methods.
  // May hold any object, Secrets included: parse, then drop. Wiped once the sink returns.
  std::string_view body_prefix;
  bool truncated = false;  // some bytes of the request or response head were not captured
};

// Why a connection's events are dropped without parsing.
enum class Http1IgnoreReason {
  kHttp2,       // its first read is the HTTP/2 client preface
  kClientSide,  // the process wrote first: it is the client (to etcd, to a webhook)
  kNotHttp1,    // its first read is no HTTP/1.x request line (or joined mid-request)
  kUpgraded,    // 101 Switching Protocols or a CONNECT tunnel: the bytes after are not HTTP
};
inline constexpr size_t kHttp1IgnoreReasonCount = 4;
const char* Http1IgnoreReasonName(Http1IgnoreReason reason);  // metric label value

struct Http1Stats {
  uint64_t exchanges = 0;
  std::array<uint64_t, kHttp1IgnoreReasonCount> ignored_connections{};  // by Http1IgnoreReason
  std::array<uint64_t, kHttp1IgnoreReasonCount> ignored_events{};       // dropped after that
  uint64_t head_truncated = 0;             // request or response heads with uncaptured bytes
  uint64_t unparseable = 0;                // malformed or oversized heads; the side resyncs
  uint64_t responses_without_request = 0;  // e.g. the agent attached mid-request
  uint64_t requests_without_response = 0;  // at close, expiry, eviction, or a lost response
  uint64_t connections_evicted = 0;        // LRU evictions at max_connections
  uint64_t joined_mid_response = 0;        // writes skipped: a response begun before the agent
};

struct Http1Limits {
  size_t max_connections = 16384;
  size_t max_head_bytes = 64 * 1024;  // a longer request or response head is unparseable
  size_t max_pipelined = 16;          // requests read and not yet answered, per connection
  size_t max_body_prefix = 4096;
  uint64_t max_idle_ns = 2 * 3600ull * 1000000000;  // longer than any apiserver watch timeout
};

class Http1Connections {
 public:
  // Called once per completed exchange, synchronously; must not call back into the parser.
  using ExchangeSink = std::function<void(const Http1Exchange&)>;

  explicit Http1Connections(ExchangeSink sink, Http1Limits limits = {});
  ~Http1Connections();
  Http1Connections(const Http1Connections&) = delete;
  Http1Connections& operator=(const Http1Connections&) = delete;

  void OnData(const TlsDataEvent& ev);
  // The connection is over: a response without length ends here; unanswered requests are lost.
  void OnClose(uint32_t tgid, uint64_t conn);
  // Drops connections without an event for max_idle_ns.
  void Expire(uint64_t now_ns);
  // Forgets every connection of a process that went away.
  void ForgetProcess(uint32_t tgid);

  size_t connections() const { return connections_.size(); }
  const Http1Stats& stats() const { return stats_; }

 private:
  struct Connection;
  struct PendingRequest;
  struct ResponseInProgress;
  struct HeadBuffer;
  struct Key {
    uint32_t tgid;
    uint64_t conn;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>{}(k.conn * 0x9E3779B97F4A7C15ull ^ k.tgid);
    }
  };
  // Most recently active first; a new connection beyond max_connections evicts the least.
  using Map = BoundedLru<Key, std::unique_ptr<Connection>, KeyHash>;

  Connection& Touch(uint32_t tgid, uint64_t conn, uint64_t ts_ns);
  void Drop(const Key& key, const Connection& c);
  void CountLost(const Connection& c);
  void Ignore(Connection& c, Http1IgnoreReason reason);

  void ReadBytes(Connection& c, std::string_view bytes, bool call_start, uint64_t ts_ns);
  std::string_view ReadHead(Connection& c, std::string_view bytes, uint64_t ts_ns);
  void ReadGap(Connection& c, uint64_t n);
  // A request head read whole, parsed (nullopt: malformed): it began at start_ns; gap: some of
  // its bytes were not captured.
  void OnRequestHead(Connection& c, const std::optional<http1::RequestHead>& parsed,
                     uint64_t start_ns, bool gap);
  void RequestUnparseable(Connection& c);

  void WriteBytes(Connection& c, std::string_view bytes, bool call_start, uint64_t ts_ns);
  std::string_view WriteHead(Connection& c, std::string_view bytes, uint64_t ts_ns);
  void WriteGap(Connection& c, uint64_t n, uint64_t ts_ns);
  void OnResponseHead(Connection& c, const std::optional<http1::ResponseHead>& parsed, bool gap,
                      uint64_t ts_ns);
  void ResponseUnparseable(Connection& c);
  void CompleteResponse(Connection& c, uint64_t ts_ns);

  // A request read on `c`, queued for its response: a spare one when there is one, its
  // strings' buffers kept, so an exchange allocates nothing once they have grown.
  PendingRequest& PushPending(Connection& c);
  // The oldest request of `c` answered or lost: wiped and kept as a spare (up to kMaxSpares).
  void PopPending(Connection& c);
  // The response `c` is writing: a spare from its head on (its buffers kept, in cache while
  // connections idle), given back wiped at its end.
  ResponseInProgress& OpenResponse(Connection& c);
  void CloseResponse(Connection& c);
  // A head cut across calls is gathered in a spare buffer, given back wiped once it is read.
  static bool Gathering(const std::unique_ptr<HeadBuffer>& head);  // holds bytes
  HeadBuffer& GatherHead(std::unique_ptr<HeadBuffer>& head);
  void ReleaseHead(std::unique_ptr<HeadBuffer>& head);
  static constexpr size_t kMaxSpares = 64;  // of each: pending requests, responses, heads

  // Objects kept for reuse, their buffers grown (up to kMaxSpares); made when none is left.
  template <typename T>
  class Spares {
   public:
    std::unique_ptr<T> Take() {
      if (free_.empty()) return std::make_unique<T>();
      std::unique_ptr<T> t = std::move(free_.back());
      free_.pop_back();
      return t;
    }
    // `t` reset (and wiped) by the caller.
    void Give(std::unique_ptr<T> t) {
      if (free_.size() < kMaxSpares) free_.push_back(std::move(t));
    }

   private:
    std::vector<std::unique_ptr<T>> free_;
  };

  ExchangeSink sink_;
  Http1Limits limits_;
  Map connections_;
  Http1Stats stats_;
  Spares<PendingRequest> spare_requests_;
  Spares<ResponseInProgress> spare_responses_;
  Spares<HeadBuffer> spare_heads_;
};

}  // namespace stormwatch
