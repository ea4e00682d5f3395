#include "agent/pipeline/request_pipeline.h"

#include <cstring>

#include "agent/kube/etcd_keys.h"
#include "agent/kube/identity.h"
#include "agent/kube/object_facts.h"
#include "agent/kube/query_shape.h"
#include "agent/kube/record_keys.h"
#include "agent/kube/request_info.h"
#include "agent/protocol/h2_events.h"
#include "agent/protocol/tls_events.h"
#include "bpf/events.h"

namespace stormwatch {

IdentityRef IdentityCache::Resolve(std::string_view authorization, std::string_view user_agent) {
  const absl::uint128 key = CredentialKey(authorization, user_agent);
  if (IdentityRef* found = lru_.Touch(key)) {
    ++hits_;
    return *found;
  }
  ++misses_;
  return lru_.FindOrInsert(
      key,
      [&] { return ShareIdentity(IdentityFromHeaders(authorization, user_agent)); },
      [](const absl::uint128&, IdentityRef&) {});
}

RequestPipeline::RequestPipeline(const DetectorsConfig& detectors, AssemblerLimits limits,
                                 ConnectionLookups connections, ApfNaming apf)
    : identities_(limits.max_identities),
      credentials_(limits.max_identities),
      interned_identities_(limits.max_identities, Recency::kApproximate),
      connections_(std::move(connections)),
      assembler_([this](const RequestConnection& c, std::string_view a,
                        std::string_view ua) { return Resolve(c, a, ua); },
                 limits),
      http1_([this](const Http1Exchange& x) { OnHttp1Exchange(x); }),
      grpc_([this](EtcdRequest& r) { OnEtcdCall(r); }),
      apf_(std::move(apf)),
      storms_(detectors),
      sinks_{&storms_, &peers_, &recorder_} {}

RequestPipeline::~RequestPipeline() = default;

ResolvedIdentity RequestPipeline::Resolve(const RequestConnection& connection,
                                          std::string_view authorization,
                                          std::string_view user_agent) {
  // kube-apiserver's authenticators run x509 first, so a client certificate wins over a token.
  // The BPF program looks for the certificate only on requests without a token (a probe read
  // costs the server time; clients rarely send both), so a token names its request.
  if (connections_.identity && authorization.empty()) {
    if (std::optional<Identity> cert = connections_.identity(connection)) {
      Identity id = IdentityFromHeaders("", user_agent);  // user agent and its component
      id.kind = cert->kind;
      id.user = std::move(cert->user);
      id.groups = std::move(cert->groups);
      id.system_masters = cert->system_masters;
      id.reason = std::move(cert->reason);
      return ShareIdentity(std::move(id));
    }
  }
  const uint64_t fingerprint = CredentialFingerprint(authorization, user_agent);
  if (const IdentityRef* known = credentials_.Find(connection.pid, connection.conn, fingerprint)) {
    ++credential_hits_;
    return {*known, fingerprint};
  }
  return {identities_.Resolve(authorization, user_agent), fingerprint};
}

void RequestPipeline::SettleCredential(RequestRecord& r) {
  if (r.credential_fingerprint == 0) return;
  // APF classifies a request only once authentication has passed (kube-apiserver's filter
  // chain), and a success is one; a 401 never is.
  const bool authenticated = r.response.ThroughApf() || (r.status >= 200 && r.status < 300);
  if (authenticated) credentials_.Remember(r.pid, r.conn_id, r.credential_fingerprint, r.identity);
  r.credential_fingerprint = 0;
}

void RequestPipeline::OnEvent(std::span<const uint8_t> bytes) {
  ++stats_.events;
  // The next record follows this one in the ring buffer (after libbpf's 8-byte header): its
  // first 512 bytes are asked for while this one is handled. Events come from another core's
  // writes or from memory, and the handling reads them by fields, not in one stream the
  // processor would prefetch itself (replay_bench, events cold: +10%, docs/benchmark.md). A
  // prefetch never faults, past the ring's end included.
  for (size_t line = 0; line < 8; ++line) __builtin_prefetch(bytes.data() + bytes.size() + 64 * line);
  if (bytes.size() >= sizeof(sw_event_header)) {
    sw_event_header header;
    std::memcpy(&header, bytes.data(), sizeof(header));
    // bpf_ktime_get_ns counts from boot: 2^62 ns is 146 years. A record past it is corrupt,
    // and its time, cast to the signed nanoseconds every detector computes windows in, would
    // overflow their arithmetic.
    if (header.ts_ns > kLatestPlausibleEventNs) {
      ++stats_.decode_errors;
      return;
    }
    const uint32_t type = header.type;
    if (type == SW_EV_GRPC_CALL || type == SW_EV_GRPC_DONE) {
      auto grpc = DecodeGrpcEvent(bytes);
      if (!grpc) {
        ++stats_.decode_errors;
      } else if (auto* call = std::get_if<GrpcCallEvent>(&*grpc)) {
        grpc_.OnCall(std::move(*call));
      } else {
        grpc_.OnDone(std::get<GrpcDoneEvent>(*grpc));
      }
      return;
    }
    if (type == SW_EV_TLS_DATA || type == SW_EV_TLS_CLOSE) {
      auto tls = DecodeTlsEvent(bytes);
      if (!tls) {
        ++stats_.decode_errors;
      } else if (auto* data = std::get_if<TlsDataEvent>(&*tls)) {
        http1_.OnData(*data);
      } else {
        const auto& close = std::get<TlsCloseEvent>(*tls);
        http1_.OnClose(close.tgid, close.conn);
        if (connections_.http1_closed) connections_.http1_closed(close.tgid, close.conn);
      }
      return;
    }
  }
  const Result<H2EventKind> kind = DecodeH2EventInto(bytes, h2_request_, h2_response_);
  if (!kind.ok()) {
    ++stats_.decode_errors;
  } else if (*kind == H2EventKind::kRequest) {
    assembler_.OnRequest(h2_request_);
  } else if (RequestRecord* record = assembler_.OnResponse(h2_response_)) {
    OnRequest(*record);
  }
}

void RequestPipeline::OnHttp1Exchange(const Http1Exchange& x) {
  RequestRecord& r = http1_record_;
  r.Clear();  // as a new record, the buffers kept
  r.pid = x.tgid;
  r.conn_id = x.conn;
  r.start_ns = x.start_ns;
  r.end_ns = x.end_ns;
  r.protocol = "HTTP/1.1";
  if (connections_.http1_ends) {
    const ConnectionEnds ends = connections_.http1_ends(x.tgid, x.conn);
    r.local_address = ends.local;
    r.peer_address = ends.peer;
  }
  SetField(r.method, x.method);
  SetField(r.path, x.path);
  SetField(r.content_type, x.content_type);
  r.status = x.status;
  r.response_bytes = x.response_bytes;
  SetField(r.response.priority_level_uid, x.priority_level_uid);
  SetField(r.response.flow_schema_uid, x.flow_schema_uid);
  r.response.retry_after_s = x.retry_after_s;
  r.response_body_prefix = x.body_prefix;
  ResolvedIdentity resolved = Resolve({.pid = x.tgid, .conn = x.conn, .http1 = true},
                                      x.authorization, x.user_agent);
  r.identity = std::move(resolved.identity);
  r.credential_fingerprint = resolved.fingerprint;
  OnRequest(r);
}

void RequestPipeline::NameApfLevels(ResponseFacts& facts) {
  if (!apf_.names || !facts.ThroughApf()) return;
  bool unknown = false;
  if (!facts.priority_level_uid.empty()) {
    auto name = apf_.names->PriorityLevel(facts.priority_level_uid);
    unknown = unknown || !name;
    facts.priority_level = name.value_or("");
  }
  if (!facts.flow_schema_uid.empty()) {
    auto name = apf_.names->FlowSchema(facts.flow_schema_uid);
    unknown = unknown || !name;
    facts.flow_schema = name.value_or("");
  }
  if (unknown && apf_.on_unknown_uid) apf_.on_unknown_uid();
}

std::string_view RequestPipeline::EtcdResource(const EtcdKey& key) {
  static const std::string kOther = "other";
  // Resources are the cluster's API (built-ins and CRDs); keys under /registry that name more
  // than this many are folded, since anyone with etcd credentials can write any key.
  constexpr size_t kMaxEtcdResources = 512;
  std::string label = EtcdResourceLabel(key);
  if (auto it = etcd_resources_.find(label); it != etcd_resources_.end()) return *it;
  if (etcd_resources_.size() >= kMaxEtcdResources) return kOther;
  return *etcd_resources_.insert(std::move(label)).first;
}

void RequestPipeline::OnEtcdCall(EtcdRequest& r) {
  ++stats_.etcd_calls;
  const bool had_key = !r.key.empty();
  if (had_key) r.decoded = DecodeEtcdKey(r.key, r.range_end, r.key_truncated);
  // Keys name objects: from here on only their decoded resource travels.
  std::string().swap(r.key);
  std::string().swap(r.range_end);
  if (connections_.identity && r.connection.client_cert_der != 0) {
    if (std::optional<Identity> cert = connections_.identity(r.connection)) r.identity = std::move(*cert);
  }
  const bool keyed = r.request == EtcdMessage::kRangeRequest || r.request == EtcdMessage::kPutRequest ||
                     r.request == EtcdMessage::kDeleteRangeRequest || r.request == EtcdMessage::kTxnRequest;
  // Calls without a key (leases, compaction, status, watches) have resource=""; of the
  // messages of an open stream, a watch's creation names its resource.
  const bool named = r.stream_message == EtcdStreamMessage::kNone
                         ? keyed
                         : r.stream_message == EtcdStreamMessage::kWatchCreate;
  r.resource = named ? EtcdResource(r.decoded) : std::string_view();
  Deliver(r);
  if (r.stream_message == EtcdStreamMessage::kNone) etcd_links_.OnRange(r);
}

void RequestPipeline::ReplayRequest(RequestRecord&& r) {
  r.etcd = {};  // matched again from the replayed etcd calls, as live
  OnRequest(r, /*replayed=*/true);
}

void RequestPipeline::ReplayEtcdCall(EtcdRequest&& r) {
  // Recorded without its key: the decoded key and the identity stand as recorded.
  r.key.clear();
  r.range_end.clear();
  r.connection = {};
  OnEtcdCall(r);
}

void RequestPipeline::OnEtcdHttp2Request(const RequestRecord& r) {
  // Without the interceptor probes: the method from the HTTP/2 path, the HTTP status as code.
  EtcdRequest e;
  e.pid = r.pid;
  e.start_ns = r.start_ns;
  e.end_ns = r.end_ns;
  e.method = r.path;
  e.identity = *r.identity;
  e.resource = "other";
  e.http_status = r.status;
  Deliver(e);
}

IdentityRef RequestPipeline::InternIdentity(const RequestRecord& r) {
  IdentityRef& ref = interned_identities_.FindOrInsert(
      r.keys.client, [] { return IdentityRef(); }, [](uint64_t, IdentityRef&) {});
  // Same client key, different identity: a new user agent (or a token after a certificate).
  if (!ref || (ref != r.identity && !(*ref == *r.identity))) ref = r.identity;
  return ref;
}

void RequestPipeline::OnRequest(RequestRecord& r, bool replayed) {
  ++stats_.requests;
  SettleCredential(r);
  if (auto role = roles_.find(r.pid); role != roles_.end() && role->second == TargetRole::kEtcd) {
    OnEtcdHttp2Request(r);
    return;
  }
  // Parsed into the record. Live records are the assembler's slots or http1_record_, reused
  // with their buffers: the path and the name (which rarely fit a string's inline 15 bytes)
  // grow once per slot. A replayed record is new each time: the pipeline lends it its own
  // buffers of those two until it is delivered (no allocation once they have grown; swapping
  // the whole RequestInfo costs more than the copies).
  if (replayed) LendParseBuffers(r.info);
  ParseRequestInfoInto(r.method, r.path, r.info, /*parts=*/nullptr, &query_);
  r.shape = QueryShapeOf(r.info, query_);
  r.keys = RecordKeysOf(r);  // identity and info are final: every detector keys by these
  // Live records carry their identity from the identity cache, shared (a client certificate's
  // is made per request); replayed ones are interned here.
  if (replayed) r.identity = InternIdentity(r);
  // Facts from the response body, then the body is gone: it may be a Secret.
  // Only writes' (POST, PUT, PATCH, DELETE: as the HTTP/2 probe keeps them); HTTP/1.1 keeps
  // every response's first bytes.
  const bool write = !r.method.empty() && (r.method[0] == 'P' || r.method[0] == 'D');
  if (write && !r.response_body_prefix.empty()) {
    r.body_read = ParseObjectFacts(r.response_body_prefix, &r.response);
  }
  r.response_body_prefix = {};
  NameApfLevels(r.response);
  etcd_links_.Match(r);
  Deliver(r);
  // Back to the pipeline: r.info's path and name are the record's own again (every caller
  // drops the record now; nothing may keep a view of them past Deliver).
  if (replayed) LendParseBuffers(r.info);
}

void RequestPipeline::LendParseBuffers(RequestInfo& info) {
  info.path.swap(parse_buffers_.path);
  info.name.swap(parse_buffers_.name);
}

void RequestPipeline::Deliver(const RequestRecord& r) {
  for (RecordSink* sink : sinks_) sink->OnRequest(r);
}

void RequestPipeline::Deliver(const EtcdRequest& r) {
  for (RecordSink* sink : sinks_) sink->OnEtcdCall(r);
}

void RequestPipeline::SetRecorder(Recorder recorder) {
  recorder_.request = std::move(recorder.request);
  // The HTTP/2 server's view of an etcd call (no interceptor) is not a recordable call.
  recorder_.etcd = [etcd = std::move(recorder.etcd)](const EtcdRequest& r) {
    if (etcd && r.http_status == 0) etcd(r);
  };
}

void RequestPipeline::Tick(int64_t now_ns) {
  assembler_.Expire(static_cast<uint64_t>(now_ns));
  http1_.Expire(static_cast<uint64_t>(now_ns));
  for (StormTransition& t : storms_.Evaluate(now_ns)) {
    // Which machines the client's requests come from: its pods, or the nodes behind them.
    StormEvidence& e = t.evidence;
    if (nlohmann::json peers = peers_.TopPeers(ClientLabel(e.identity)); !peers.empty()) {
      e.details["peers"] = std::move(peers);
    }
    for (RecordSink* sink : sinks_) sink->OnStormTransition(t);
  }
  const PipelineHealth health = Health();
  for (RecordSink* sink : sinks_) sink->OnTick(now_ns, health);
}

PipelineHealth RequestPipeline::Health() const {
  const AssemblerStats& a = assembler_.stats();
  const Http1Stats& h1 = http1_.stats();
  const GrpcCallStats& g = grpc_.stats();
  const EtcdLinkStats& l = etcd_links_.stats();
  return {.capture_loss = {{"request_without_response", a.requests_without_response},
                           {"response_without_request", a.responses_without_request},
                           {"headers_truncated", a.truncated_headers},
                           {"undecodable_event", stats_.decode_errors},
                           {"http1_head_truncated", h1.head_truncated},
                           {"http1_unparseable", h1.unparseable},
                           {"http1_response_without_request", h1.responses_without_request},
                           {"http1_request_without_response", h1.requests_without_response},
                           {"http1_connection_evicted", h1.connections_evicted},
                           {"http1_joined_mid_response", h1.joined_mid_response},
                           {"grpc_return_without_call", g.returns_without_call},
                           {"grpc_call_evicted", g.calls_evicted}},
          .etcd_lists = l.lists,
          .etcd_lists_matched = l.lists_matched,
          .identity_cache_hits = identities_.hits(),
          .identity_cache_misses = identities_.misses(),
          .identity_connection_hits = credential_hits_};
}

}  // namespace stormwatch
