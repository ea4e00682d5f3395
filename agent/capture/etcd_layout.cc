#include "agent/capture/etcd_layout.h"

#include "agent/capture/layout_deriver.h"

namespace stormwatch {
namespace {

using K = GoKind;
constexpr uint64_t kPtr = 8, kString = 16, kSlice = 24, kIface = 16;

std::string Qualified(const GoTypes& types, const std::string& suffix) {
  auto t = types.FindNamedSuffix(suffix);
  return t ? t->name : suffix;  // not found: the derivation's error names the suffix
}

uint64_t PointerVaddr(const GoTypes& types, const std::string& name) {
  auto t = types.FindNamed(name);
  if (!t) return 0;
  auto p = types.PointerTo(*t);
  return p ? p->vaddr : 0;
}

// The context chain to the client's peer, and the certificate behind it. Optional: without it
// etcd's calls are counted and decoded, with client "unknown".
void DerivePeer(const GoTypes& types, sw_grpc_offsets& o, std::vector<std::string>& caveats) {
  Deriver d(types);
  o.value_ctx_key = d.Offset("context.valueCtx", "key", {K::kInterface}, kIface);
  o.value_ctx_val = d.Offset("context.valueCtx", "val", {K::kInterface}, kIface);
  o.peer_addr = d.Offset("google.golang.org/grpc/peer.Peer", "Addr", {K::kInterface}, kIface);
  o.peer_auth_info = d.Offset("google.golang.org/grpc/peer.Peer", "AuthInfo", {K::kInterface}, kIface);
  o.tcpaddr_ip = d.Offset("net.TCPAddr", "IP", {K::kSlice}, kSlice);
  o.tcpaddr_port = d.Offset("net.TCPAddr", "Port", {K::kInt}, 8);
  uint64_t value_ctx = PointerVaddr(types, "context.valueCtx");
  auto peer_key = types.FindNamed("google.golang.org/grpc/peer.peerKey");
  if (!d.ok() || !value_ctx || !peer_key) {
    caveats.push_back("etcd clients not named: " +
                      (d.ok() ? std::string("context.valueCtx or grpc/peer.peerKey not in the type data")
                              : d.gap().message));
    o.value_ctx_type = 0;
    return;
  }
  o.value_ctx_type = value_ctx;
  o.peer_key_type = peer_key->vaddr;
  // Streams: the context behind the ServerStream (either type may be missing: then streams of
  // that kind are counted with client "unknown").
  Deriver s(types);
  const uint64_t server_stream = PointerVaddr(types, "google.golang.org/grpc.serverStream");
  const uint32_t server_stream_ctx = s.Offset("google.golang.org/grpc.serverStream", "ctx", {K::kInterface}, kIface);
  if (s.ok() && server_stream) {
    o.server_stream_type = server_stream;
    o.server_stream_ctx = server_stream_ctx;
  } else {
    caveats.push_back("etcd stream clients not named: *grpc.serverStream not as expected");
  }
  Deriver w(types);
  const std::string with_ctx = Qualified(types, "v3rpc.serverStreamWithCtx");
  auto with_ctx_type = types.FindNamed(with_ctx);
  const uint32_t with_ctx_inner = w.Offset(with_ctx, "ServerStream", {K::kInterface}, kIface);
  if (w.ok() && with_ctx_type && o.server_stream_type) {
    o.stream_with_ctx_type = with_ctx_type->vaddr;
    o.stream_with_ctx_inner = with_ctx_inner;
  } else {
    caveats.push_back("etcd leader-requiring stream clients not named: " +
                      (w.ok() ? with_ctx + " not in the type data" : w.gap().message));
  }
  Deriver c(types);
  o.tls_info_peer_certificates = c.Offset("google.golang.org/grpc/credentials.TLSInfo",
                                          "State.PeerCertificates", {K::kSlice}, kSlice);
  o.x509_raw = c.Offset("crypto/x509.Certificate", "Raw", {K::kSlice}, kSlice);
  if (!c.ok() || o.tls_info_peer_certificates == 0) {
    caveats.push_back("etcd client certificates not read: " + c.gap().message);
    o.tls_info_peer_certificates = 0;
  }
}

// *status.Error -> s *Status -> s *spb.Status -> Code. Optional: without it an error's code is
// "Unknown".
void DeriveStatus(const GoTypes& types, sw_grpc_offsets& o, std::vector<std::string>& caveats) {
  Deriver d(types);
  const std::string error = "google.golang.org/grpc/internal/status.Error";
  auto error_type = types.FindNamed(error);
  std::optional<GoStructField> status;
  if (error_type) {
    // grpc 1.26 (etcd 3.4) names the field e, later releases s: the struct's only pointer.
    auto fields = types.StructFields(*error_type);
    if (fields && fields->size() == 1 && (*fields)[0].type.kind == K::kPointer) status = (*fields)[0];
  }
  if (!error_type || !status) {
    caveats.push_back("gRPC status codes of errors not read: " + error + " not as expected");
    return;
  }
  auto status_type = types.Elem(status->type);
  if (!status_type) {
    caveats.push_back("gRPC status codes of errors not read: " + status_type.error().message);
    return;
  }
  std::optional<GoStructField> proto;
  if (auto direct = types.Field(status_type->name, "Code"); direct && direct->type.kind == K::kInt32) {
    o.status_direct = 1;  // grpc < 1.30: Error{e *spb.Status}
    o.status_code = direct->offset;
    proto = *status;
  } else {
    proto = d.Field(status_type->name, "s", {K::kPointer}, kPtr);
    if (proto) {
      auto proto_type = types.Elem(proto->type);
      if (proto_type) o.status_code = d.Offset(proto_type->name, "Code", {K::kInt32}, 4);
    }
  }
  uint64_t error_ptr = types.PointerTo(*error_type) ? types.PointerTo(*error_type)->vaddr : 0;
  if (!d.ok() || !proto || !error_ptr) {
    caveats.push_back("gRPC status codes of errors not read: " +
                      (d.ok() ? std::string("no *status.Error type") : d.gap().message));
    return;
  }
  o.status_error_type = error_ptr;
  o.status_error_status = status->offset;
  o.status_proto = o.status_direct ? 0 : proto->offset;
}

}  // namespace

bool IsGrpcServerInterceptorClosure(std::string_view name, std::string_view kind) {
  constexpr std::string_view kPackage = "github.com/grpc-ecosystem/go-grpc-prometheus.";
  if (!name.starts_with(kPackage)) return false;
  name.remove_prefix(kPackage.size());
  if (name.starts_with("init.")) name.remove_prefix(5);
  const std::string method = "(*ServerMetrics)." + std::string(kind) + "ServerInterceptor.func";
  if (!name.starts_with(method)) return false;
  name.remove_prefix(method.size());
  return !name.empty() && name.find_first_not_of("0123456789") == std::string_view::npos;
}

Result<EtcdLayout> DeriveEtcdLayout(const GoTypes& types, LayoutGap* gap) {
  EtcdLayout layout;
  sw_grpc_offsets& o = layout.offsets;
  Deriver d(types);
  o.unary_info_method = d.Offset("google.golang.org/grpc.UnaryServerInfo", "FullMethod", {K::kString}, kString);
  o.stream_info_method = d.Offset("google.golang.org/grpc.StreamServerInfo", "FullMethod", {K::kString}, kString);

  // The KV messages. Keys and range ends are byte slices; the facts the agent reads are at
  // fixed offsets in the copied struct.
  const std::string range = Qualified(types, "etcdserverpb.RangeRequest");
  const std::string range_resp = Qualified(types, "etcdserverpb.RangeResponse");
  const std::string put = Qualified(types, "etcdserverpb.PutRequest");
  const std::string del = Qualified(types, "etcdserverpb.DeleteRangeRequest");
  const std::string txn = Qualified(types, "etcdserverpb.TxnRequest");
  const std::string txn_resp = Qualified(types, "etcdserverpb.TxnResponse");
  const std::string compare = Qualified(types, "etcdserverpb.Compare");
  const std::string op = Qualified(types, "etcdserverpb.RequestOp");
  const std::string compact = Qualified(types, "etcdserverpb.CompactionRequest");
  const std::string grant = Qualified(types, "etcdserverpb.LeaseGrantRequest");
  const std::string revoke = Qualified(types, "etcdserverpb.LeaseRevokeRequest");
  const std::string kv = Qualified(types, "mvccpb.KeyValue");

  EtcdMessageFields& f = layout.fields;
  uint32_t range_key = d.Offset(range, "Key", {K::kSlice}, kSlice);
  uint32_t range_end = d.Offset(range, "RangeEnd", {K::kSlice}, kSlice);
  f.range_limit = d.Offset(range, "Limit", {K::kInt64}, 8);
  f.range_revision = d.Offset(range, "Revision", {K::kInt64}, 8);
  f.range_serializable = d.Offset(range, "Serializable", {K::kBool}, 1);
  f.range_keys_only = d.Offset(range, "KeysOnly", {K::kBool}, 1);
  f.range_count_only = d.Offset(range, "CountOnly", {K::kBool}, 1);
  o.range_resp_kvs = d.Offset(range_resp, "Kvs", {K::kSlice}, kSlice);
  f.range_resp_kvs = o.range_resp_kvs;
  f.range_resp_more = d.Offset(range_resp, "More", {K::kBool}, 1);
  f.range_resp_count = d.Offset(range_resp, "Count", {K::kInt64}, 8);
  o.kv_key = d.Offset(kv, "Key", {K::kSlice}, kSlice);
  o.kv_value = d.Offset(kv, "Value", {K::kSlice}, kSlice);
  uint32_t put_key = d.Offset(put, "Key", {K::kSlice}, kSlice);
  uint32_t del_key = d.Offset(del, "Key", {K::kSlice}, kSlice);
  uint32_t del_end = d.Offset(del, "RangeEnd", {K::kSlice}, kSlice);
  o.txn_compare = d.Offset(txn, "Compare", {K::kSlice}, kSlice);
  o.txn_success = d.Offset(txn, "Success", {K::kSlice}, kSlice);
  o.compare_key = d.Offset(compare, "Key", {K::kSlice}, kSlice);
  o.request_op_request = d.Offset(op, "Request", {K::kInterface}, kIface);
  f.txn_resp_succeeded = d.Offset(txn_resp, "Succeeded", {K::kBool}, 1);
  f.compact_revision = d.Offset(compact, "Revision", {K::kInt64}, 8);
  f.lease_grant_ttl = d.Offset(grant, "TTL", {K::kInt64}, 8);
  if (!d.ok()) {
    if (gap) *gap = d.gap();
    return Error{"etcd gRPC layout: " + d.gap().message, ErrorCode::kNotFound};
  }
  // The BPF program copies the first SW_GRPC_MSG_MAX (request) or SW_GRPC_RESP_MAX (response)
  // bytes of a message struct: a fact beyond them is not read.
  for (int* at : {&f.range_limit, &f.range_revision, &f.range_serializable, &f.range_keys_only,
                  &f.range_count_only, &f.compact_revision, &f.lease_grant_ttl}) {
    if (*at + 8 > SW_GRPC_MSG_MAX) *at = -1;
  }
  for (int* at : {&f.range_resp_kvs, &f.range_resp_more, &f.range_resp_count, &f.txn_resp_succeeded}) {
    if (*at + 8 > SW_GRPC_RESP_MAX) *at = -1;
  }
  if (f.range_limit < 0 || f.range_count_only < 0 || f.range_resp_count < 0 || f.range_resp_kvs < 0) {
    layout.caveats.push_back("etcd Range facts lie beyond the bytes copied of the message");
  }
  // The BPF program reads a Txn op's request at +0 of its oneof wrapper: Range, Put and
  // DeleteRange requests must start with their Key.
  if (range_key != 0 || put_key != 0 || del_key != 0) {
    LayoutGap g{range, "Key", "etcd request messages do not start with their Key"};
    if (gap) *gap = g;
    return Error{g.message, ErrorCode::kNotFound};
  }

  struct Message {
    const std::string* name;
    EtcdMessage message;
    uint16_t kind;
    uint32_t key_off, end_off;
  };
  const Message messages[] = {
      {&range, EtcdMessage::kRangeRequest, SW_MSG_KEYED, range_key, range_end},
      {&range_resp, EtcdMessage::kRangeResponse, SW_MSG_RANGE_RESP, 0, 0xffff},
      {&put, EtcdMessage::kPutRequest, SW_MSG_KEYED, put_key, 0xffff},
      {&del, EtcdMessage::kDeleteRangeRequest, SW_MSG_KEYED, del_key, del_end},
      {&txn, EtcdMessage::kTxnRequest, SW_MSG_TXN, 0, 0xffff},
      {&txn_resp, EtcdMessage::kTxnResponse, SW_MSG_PLAIN, 0, 0xffff},
      {&compact, EtcdMessage::kCompactionRequest, SW_MSG_PLAIN, 0, 0xffff},
      {&grant, EtcdMessage::kLeaseGrantRequest, SW_MSG_PLAIN, 0, 0xffff},
      {&revoke, EtcdMessage::kLeaseRevokeRequest, SW_MSG_PLAIN, 0, 0xffff},
  };
  for (const Message& m : messages) {
    auto t = types.FindNamed(*m.name);
    auto p = t ? types.PointerTo(*t) : std::nullopt;
    if (!t || !p) {
      if (m.message == EtcdMessage::kLeaseRevokeRequest) continue;  // only names the call
      LayoutGap g{*m.name, "", "*" + *m.name + " not in the type data"};
      if (gap) *gap = g;
      return Error{g.message, ErrorCode::kNotFound};
    }
    EtcdMessageShape s;
    s.type_vaddr = p->vaddr;
    s.message = m.message;
    s.shape.kind = m.kind;
    s.shape.size = static_cast<uint16_t>(t->size > 0xffff ? 0xffff : t->size);
    s.shape.key_off = static_cast<uint16_t>(m.key_off);
    s.shape.end_off = static_cast<uint16_t>(m.end_off);
    layout.messages.push_back(s);
  }
  DerivePeer(types, o, layout.caveats);
  DeriveStatus(types, o, layout.caveats);
  return layout;
}

}  // namespace stormwatch
