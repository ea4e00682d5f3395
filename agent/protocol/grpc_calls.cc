#include "agent/protocol/grpc_calls.h"

#include <cstddef>
#include <cstring>
#include <optional>

#include "agent/core/tcp_endpoint.h"
#include "bpf/events.h"

namespace stormwatch {
namespace {

std::string SockAddr(const sw_sock_addr& a) {
  if (a.ip_len != 4 && a.ip_len != 16) return "";
  return FormatTcpEndpoint(std::span<const uint8_t>(a.ip, a.ip_len), a.port);
}

template <typename T>
std::optional<T> At(std::string_view msg, int offset) {
  if (offset < 0 || static_cast<size_t>(offset) + sizeof(T) > msg.size()) return std::nullopt;
  T v;
  std::memcpy(&v, msg.data() + offset, sizeof(T));
  return v;
}

}  // namespace

Result<GrpcEvent> DecodeGrpcEvent(std::span<const uint8_t> bytes) {
  uint32_t type = 0;
  if (bytes.size() >= sizeof(type)) std::memcpy(&type, bytes.data(), sizeof(type));
  if (type == SW_EV_GRPC_CALL) {
    if (bytes.size() != sizeof(sw_grpc_call)) return Error{"gRPC call event of the wrong size"};
    sw_grpc_call e;
    std::memcpy(&e, bytes.data(), sizeof(e));
    if (e.method_len > SW_GRPC_METHOD_MAX || e.msg_len > SW_GRPC_MSG_MAX || e.key_len > SW_ETCD_KEY_MAX ||
        e.end_len > SW_ETCD_KEY_MAX || e.key_len > e.key_total || e.end_len > e.end_total) {
      return Error{"gRPC call event lengths past their fields"};
    }
    GrpcCallEvent c;
    c.tgid = e.hdr.tgid;
    c.goroutine = e.hdr.conn;
    c.ts_ns = e.hdr.ts_ns;
    c.stream = e.kind == SW_GRPC_STREAM;
    switch (e.kind) {
      case SW_GRPC_UNARY:
      case SW_GRPC_STREAM: break;
      case SW_GRPC_WATCH_CREATE: c.message = EtcdStreamMessage::kWatchCreate; break;
      case SW_GRPC_WATCH_CANCEL: c.message = EtcdStreamMessage::kWatchCancel; break;
      case SW_GRPC_LEASE_KEEPALIVE: c.message = EtcdStreamMessage::kLeaseKeepAlive; break;
      case SW_GRPC_WATCH_STREAM: c.message = EtcdStreamMessage::kWatchStream; break;
      default: return Error{"gRPC call event of an unknown kind"};
    }
    c.watch_stream = e.stream;
    c.id = e.id;
    c.rev = e.rev;
    c.method.assign(e.method, e.method_len);
    c.msg_type = e.msg_type;
    c.msg.assign(reinterpret_cast<const char*>(e.msg), e.msg_len);
    c.key.assign(reinterpret_cast<const char*>(e.key), e.key_len);
    c.range_end.assign(reinterpret_cast<const char*>(e.end), e.end_len);
    c.key_total = e.key_total;
    c.end_total = e.end_total;
    c.peer_address = SockAddr(e.peer);
    c.client_cert_der = e.client_cert_der;
    c.client_cert_der_len = e.client_cert_der_len;
    return GrpcEvent{std::move(c)};
  }
  if (type == SW_EV_GRPC_DONE) {
    if (bytes.size() != sizeof(sw_grpc_done)) return Error{"gRPC done event of the wrong size"};
    sw_grpc_done e;
    std::memcpy(&e, bytes.data(), sizeof(e));
    if (e.msg_len > SW_GRPC_RESP_MAX || e.kvs_read > SW_MAX_KVS_READ) {
      return Error{"gRPC done event lengths past their fields"};
    }
    GrpcDoneEvent d;
    d.tgid = e.hdr.tgid;
    d.goroutine = e.hdr.conn;
    d.ts_ns = e.hdr.ts_ns;
    d.stream = e.kind == SW_GRPC_STREAM;
    d.code = e.code;
    d.msg_type = e.msg_type;
    d.msg.assign(reinterpret_cast<const char*>(e.msg), e.msg_len);
    d.kvs_read = e.kvs_read;
    d.kv_bytes = e.kv_bytes;
    return GrpcEvent{std::move(d)};
  }
  return Error{"not a gRPC event"};
}

void DecodeEtcdRequestMessage(const EtcdMessageTypes& types, uint64_t msg_type, std::string_view msg,
                              EtcdRequest* r) {
  auto it = types.by_type.find(msg_type);
  r->request = it == types.by_type.end() ? EtcdMessage::kOther : it->second;
  const EtcdMessageFields& f = types.fields;
  if (r->request == EtcdMessage::kRangeRequest) {
    r->limit = At<int64_t>(msg, f.range_limit).value_or(0);
    r->revision = At<int64_t>(msg, f.range_revision).value_or(0);
    r->serializable = At<uint8_t>(msg, f.range_serializable).value_or(0) != 0;
    r->keys_only = At<uint8_t>(msg, f.range_keys_only).value_or(0) != 0;
    r->count_only = At<uint8_t>(msg, f.range_count_only).value_or(0) != 0;
  } else if (r->request == EtcdMessage::kCompactionRequest) {
    r->revision = At<int64_t>(msg, f.compact_revision).value_or(0);
  }
}

void DecodeEtcdResponseMessage(const EtcdMessageTypes& types, uint64_t msg_type, std::string_view msg,
                               uint32_t kvs_read, uint64_t kv_bytes, EtcdRequest* r) {
  auto it = types.by_type.find(msg_type);
  if (it == types.by_type.end()) return;
  const EtcdMessageFields& f = types.fields;
  if (it->second == EtcdMessage::kRangeResponse) {
    r->count = At<int64_t>(msg, f.range_resp_count).value_or(-1);
    r->more = At<uint8_t>(msg, f.range_resp_more).value_or(0) != 0;
    // The Kvs slice header: ptr, len, cap.
    auto len = At<int64_t>(msg, f.range_resp_kvs < 0 ? -1 : f.range_resp_kvs + 8);
    r->kvs = len && *len >= 0 ? *len : -1;
    r->kv_bytes = kv_bytes;
    // Beyond the kvs summed in BPF, the rest are taken to be of the same average size.
    if (r->kvs > 0 && kvs_read > 0 && static_cast<uint64_t>(r->kvs) > kvs_read) {
      r->kv_bytes = kv_bytes * static_cast<uint64_t>(r->kvs) / kvs_read;
    }
  } else if (it->second == EtcdMessage::kTxnResponse) {
    r->txn_succeeded = At<uint8_t>(msg, f.txn_resp_succeeded).value_or(0) != 0;
  }
}

void GrpcCalls::ForgetProcess(uint32_t tgid) {
  types_.erase(tgid);
  std::erase_if(watch_clients_, [&](const auto& kv) { return kv.first.tgid == tgid; });
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->first.tgid == tgid) {
      it = pending_.Erase(it);
      ++stats_.calls_evicted;  // in flight when its process went away: never returns
    } else {
      ++it;
    }
  }
}

void GrpcCalls::OnCall(GrpcCallEvent call) {
  if (call.message != EtcdStreamMessage::kNone) {
    OnStreamMessage(std::move(call));
    return;
  }
  Key k{call.tgid, call.goroutine};
  // The goroutine's last call never returned in our sight (a lost event): the new one wins.
  if (pending_.Erase(k)) ++stats_.calls_evicted;
  // Oldest call first out (lookups never refresh a call).
  pending_.FindOrInsert(k, [&] { return std::move(call); },
                        [&](const Key&, GrpcCallEvent&) { ++stats_.calls_evicted; });
}

// A message on an open stream is complete when seen: named by its stream's method. Watch
// messages run on a goroutine of their own, without the stream's context: their client is the
// one of the gRPC stream whose handler made their mvcc watch stream.
void GrpcCalls::OnStreamMessage(GrpcCallEvent call) {
  if (call.message == EtcdStreamMessage::kWatchStream) {
    GrpcCallEvent* open_call = pending_.Find(Key{call.tgid, call.goroutine});
    if (open_call == nullptr || !open_call->stream || call.watch_stream == 0) return;
    GrpcCallEvent& open = *open_call;
    open.watch_stream = call.watch_stream;
    if (watch_clients_.size() >= max_pending_) watch_clients_.clear();  // bounded; lost names only
    watch_clients_[Key{call.tgid, call.watch_stream}] = {open.peer_address, open.client_cert_der,
                                                         open.client_cert_der_len};
    return;
  }
  if (call.message != EtcdStreamMessage::kLeaseKeepAlive) {
    if (auto w = watch_clients_.find(Key{call.tgid, call.watch_stream}); w != watch_clients_.end()) {
      call.peer_address = w->second.peer_address;
      call.client_cert_der = w->second.cert;
      call.client_cert_der_len = w->second.cert_len;
    }
  }
  EtcdRequest r;
  r.pid = call.tgid;
  r.start_ns = r.end_ns = call.ts_ns;
  r.stream = true;
  r.stream_message = call.message;
  r.method = call.message == EtcdStreamMessage::kLeaseKeepAlive ? "/etcdserverpb.Lease/LeaseKeepAlive"
                                                                 : "/etcdserverpb.Watch/Watch";
  if (call.message == EtcdStreamMessage::kLeaseKeepAlive) {
    r.lease_id = call.id;
  } else {
    r.watch_id = call.id;
  }
  if (call.message == EtcdStreamMessage::kWatchCreate) r.revision = call.rev;
  r.peer_address = std::move(call.peer_address);
  r.connection.pid = call.tgid;
  r.connection.client_cert_der = call.client_cert_der;
  r.connection.client_cert_der_len = call.client_cert_der_len;
  r.key_truncated = call.key_total > call.key.size() || call.end_total > call.range_end.size();
  r.key = std::move(call.key);
  r.range_end = std::move(call.range_end);
  ++stats_.stream_messages;
  sink_(r);
}

void GrpcCalls::OnDone(const GrpcDoneEvent& done) {
  const Key k{done.tgid, done.goroutine};
  GrpcCallEvent* pending = pending_.Find(k);
  if (pending == nullptr || pending->stream != done.stream) {
    ++stats_.returns_without_call;
    return;
  }
  GrpcCallEvent call = std::move(*pending);
  pending_.Erase(k);
  if (call.watch_stream) watch_clients_.erase(Key{call.tgid, call.watch_stream});

  EtcdRequest r;
  r.pid = call.tgid;
  r.start_ns = call.ts_ns;
  r.end_ns = done.ts_ns;
  r.stream = call.stream;
  r.method = std::move(call.method);
  r.code = done.code;
  r.peer_address = std::move(call.peer_address);
  r.connection.pid = call.tgid;
  r.connection.client_cert_der = call.client_cert_der;
  r.connection.client_cert_der_len = call.client_cert_der_len;
  r.key_truncated = call.key_total > call.key.size() || call.end_total > call.range_end.size();
  if (auto t = types_.find(call.tgid); t != types_.end() && t->second) {
    DecodeEtcdRequestMessage(*t->second, call.msg_type, call.msg, &r);
    DecodeEtcdResponseMessage(*t->second, done.msg_type, done.msg, done.kvs_read, done.kv_bytes, &r);
  }
  r.key = std::move(call.key);
  r.range_end = std::move(call.range_end);
  ++stats_.calls;
  sink_(r);
}

}  // namespace stormwatch
