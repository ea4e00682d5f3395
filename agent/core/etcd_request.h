// One gRPC call as etcd served it: the record that crosses protocol -> kube -> analysis on the
// storage side, next to RequestRecord on the API server's. Plain data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "agent/core/request_record.h"

namespace stormwatch {

// The etcd messages the agent reads, by their Go type in one target.
enum class EtcdMessage : uint8_t {
  kOther,
  kRangeRequest,
  kRangeResponse,
  kPutRequest,
  kDeleteRangeRequest,
  kTxnRequest,
  kTxnResponse,
  kCompactionRequest,
  kLeaseGrantRequest,
  kLeaseRevokeRequest,
};

// Where the facts sit in the copied bytes of each message struct (from the target's type data,
// agent/capture/etcd_layout.cc); -1 where the field was not found.
struct EtcdMessageFields {
  int range_limit = -1, range_revision = -1;  // RangeRequest
  int range_serializable = -1, range_keys_only = -1, range_count_only = -1;
  int range_resp_kvs = -1, range_resp_more = -1, range_resp_count = -1;  // RangeResponse
  int txn_resp_succeeded = -1;                                           // TxnResponse
  int compact_revision = -1;                                             // CompactionRequest
  int lease_grant_ttl = -1;                                              // LeaseGrantRequest
};

// One etcd target's message types: runtime address of *T's descriptor -> which message.
struct EtcdMessageTypes {
  std::unordered_map<uint64_t, EtcdMessage> by_type;
  EtcdMessageFields fields;
};

// What an etcd key means to kube-apiserver (its /registry layout; agent/kube/etcd_keys.h).
struct EtcdKey {
  bool registry = false;   // under /registry/
  bool prefix = false;     // a range over a prefix (a LIST), not one key
  std::string group;       // "" core or unknown built-in; "example.com" for CRDs
  std::string resource;    // "pods", "widgets"; "" when the key is not a resource's
  std::string namespace_;  // "" cluster-wide or cluster-scoped
  std::string name;        // "" for a prefix
  std::string key_prefix;  // the resource's prefix as read: "/registry/services/specs/"
};

// One message on an open stream, seen where etcd handles it (not a call of its own).
enum class EtcdStreamMessage : uint8_t {
  kNone,            // a unary call, or a stream opened and closed
  kWatchCreate,     // a WatchCreateRequest: key, range end, start revision (`revision`)
  kWatchCancel,     // a WatchCancelRequest
  kLeaseKeepAlive,  // a LeaseKeepAliveRequest: the lease renewed (`lease_id`)
  kWatchStream,     // (capture only) a Watch stream's mvcc stream made: names its messages' client
};

struct EtcdRequest {
  uint32_t pid = 0;
  uint64_t start_ns = 0;  // CLOCK_MONOTONIC at the interceptor's entry and return
  uint64_t end_ns = 0;
  bool stream = false;    // a streaming call (Watch, LeaseKeepAlive): opened at start, closed at end
  EtcdStreamMessage stream_message = EtcdStreamMessage::kNone;  // start_ns == end_ns when set
  int64_t watch_id = 0;   // kWatchCreate: the ID asked for (0: etcd picks); kWatchCancel: the ID
  int64_t lease_id = 0;   // kLeaseKeepAlive
  std::string method;     // "/etcdserverpb.KV/Range"
  EtcdMessage request = EtcdMessage::kOther;
  // The key and range end as sent (at most SW_ETCD_KEY_MAX bytes kept of each). Keys name
  // objects: they never leave the process (metrics and records carry `decoded` only).
  std::string key, range_end;
  bool key_truncated = false;
  EtcdKey decoded;
  int64_t limit = 0;
  int64_t revision = 0;   // 0: the newest (a linearizable read unless serializable); a watch's start
  bool serializable = false, keys_only = false, count_only = false;
  // The response: RangeResponse's count, kvs and their key + value bytes, more; Txn's outcome.
  int64_t count = -1;
  int64_t kvs = -1;
  uint64_t kv_bytes = 0;  // summed over the kvs read in BPF, scaled to all kvs beyond them
  bool more = false;
  bool txn_succeeded = false;
  int code = -1;          // gRPC status code; -1 unknown
  std::string peer_address;  // the client's ip:port as etcd sees it, "" when unknown
  RequestConnection connection;  // pid and where the peer's certificate sits in the target
  Identity identity;             // the client (its certificate CN), filled by the pipeline
  // Filled by the pipeline once the call is final: the resource label of `decoded`, from a
  // bounded vocabulary the pipeline owns ("" for calls without a key).
  std::string_view resource;
  // Not 0: the call was seen by the HTTP/2 server probes only (no gRPC interceptor found):
  // `method` is the HTTP/2 path, this its HTTP status, and nothing else is known.
  int http_status = 0;
};

// Label values of stormwatch_etcd_stream_messages_total's `message`.
inline const char* EtcdStreamMessageName(EtcdStreamMessage m) {
  switch (m) {
    case EtcdStreamMessage::kWatchCreate: return "watch_create";
    case EtcdStreamMessage::kWatchCancel: return "watch_cancel";
    case EtcdStreamMessage::kLeaseKeepAlive: return "lease_keepalive";
    case EtcdStreamMessage::kWatchStream:  // the stream itself, counted as a call
    case EtcdStreamMessage::kNone: break;
  }
  return "";
}

// "OK", "NotFound", ... as go-grpc-prometheus labels grpc_code (codes.Code.String());
// "Unknown" for -1, as status.FromError names an error without a status.
inline const char* GrpcCodeName(int code) {
  static const char* const kNames[] = {
      "OK",       "Canceled",           "Unknown",        "InvalidArgument", "DeadlineExceeded",
      "NotFound", "AlreadyExists",      "PermissionDenied", "ResourceExhausted",
      "FailedPrecondition", "Aborted",  "OutOfRange",     "Unimplemented",   "Internal",
      "Unavailable", "DataLoss",        "Unauthenticated"};
  if (code < 0 || code >= static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) return "Unknown";
  return kNames[code];
}

}  // namespace stormwatch
