// etcd's gRPC calls from the interceptor events of bpf/grpc_server.bpf.h: decoded (pure: bytes
// in, an event or an error out, no length trusted) and joined entry to return per (process,
// goroutine): the interceptor runs a call on one goroutine from entry to return, and a
// goroutine runs one call at a time. The messages' Go structs are read through the target's
// EtcdMessageTypes (agent/capture/etcd_layout.h). Bounded: at most `max_pending` calls wait
// for their return (a stream waits as long as it is open); the oldest are dropped first and
// counted.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <variant>

#include "agent/core/bounded_lru.h"
#include "agent/core/etcd_request.h"
#include "agent/core/result.h"

namespace stormwatch {

struct GrpcCallEvent {
  uint32_t tgid = 0;
  uint64_t goroutine = 0;
  uint64_t ts_ns = 0;
  bool stream = false;
  EtcdStreamMessage message = EtcdStreamMessage::kNone;  // set: one message, no return follows
  uint64_t watch_stream = 0;  // the mvcc watch stream of a Watch stream's messages
  int64_t id = 0;             // watch ID or lease ID
  int64_t rev = 0;            // a watch's start revision
  std::string method;
  uint64_t msg_type = 0;
  std::string msg;            // the request struct's bytes
  std::string key, range_end;
  uint32_t key_total = 0, end_total = 0;
  std::string peer_address;
  uint64_t client_cert_der = 0;
  uint32_t client_cert_der_len = 0;
};

struct GrpcDoneEvent {
  uint32_t tgid = 0;
  uint64_t goroutine = 0;
  uint64_t ts_ns = 0;
  bool stream = false;
  int code = -1;
  uint64_t msg_type = 0;
  std::string msg;            // the response struct's bytes
  uint32_t kvs_read = 0;
  uint64_t kv_bytes = 0;
};

using GrpcEvent = std::variant<GrpcCallEvent, GrpcDoneEvent>;
Result<GrpcEvent> DecodeGrpcEvent(std::span<const uint8_t> bytes);

struct GrpcCallStats {
  uint64_t calls = 0;                 // joined, emitted
  uint64_t stream_messages = 0;       // watch creates/cancels and lease keepalives, emitted
  uint64_t returns_without_call = 0;  // a return whose entry was not seen (agent started mid-call)
  uint64_t calls_evicted = 0;         // pending calls dropped: max_pending, or their process exited
};

class GrpcCalls {
 public:
  using Sink = std::function<void(EtcdRequest&)>;
  explicit GrpcCalls(Sink sink, size_t max_pending = 65536)
      : sink_(std::move(sink)), max_pending_(max_pending), pending_(max_pending) {}

  // The message types of an etcd process (its messages are not decoded without).
  void SetMessageTypes(uint32_t tgid, std::shared_ptr<const EtcdMessageTypes> types) {
    types_[tgid] = std::move(types);
  }
  void ForgetProcess(uint32_t tgid);

  // A unary call or stream waits for its return; a stream message is emitted at once.
  void OnCall(GrpcCallEvent call);
  void OnDone(const GrpcDoneEvent& done);

  const GrpcCallStats& stats() const { return stats_; }
  size_t pending() const { return pending_.size(); }

 private:
  void OnStreamMessage(GrpcCallEvent call);
  struct Key {
    uint32_t tgid;
    uint64_t goroutine;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return std::hash<uint64_t>()(k.goroutine * 31 + k.tgid); }
  };

  Sink sink_;
  size_t max_pending_;
  BoundedLru<Key, GrpcCallEvent, KeyHash> pending_;  // calls in flight, by goroutine
  std::unordered_map<uint32_t, std::shared_ptr<const EtcdMessageTypes>> types_;
  // (process, mvcc watch stream) -> the client of the gRPC Watch stream that made it, while open.
  struct StreamClient {
    std::string peer_address;
    uint64_t cert = 0;
    uint32_t cert_len = 0;
  };
  std::unordered_map<Key, StreamClient, KeyHash> watch_clients_;
  GrpcCallStats stats_;
};

// Fills the request facts of `r` from a RangeRequest/... struct copy, and the response facts
// from a RangeResponse/TxnResponse copy (exposed for tests).
void DecodeEtcdRequestMessage(const EtcdMessageTypes& types, uint64_t msg_type, std::string_view msg,
                              EtcdRequest* r);
void DecodeEtcdResponseMessage(const EtcdMessageTypes& types, uint64_t msg_type, std::string_view msg,
                               uint32_t kvs_read, uint64_t kv_bytes, EtcdRequest* r);

}  // namespace stormwatch
