#include "agent/pipeline/request_pipeline.h"

#include <cstring>

#include "agent/analysis/conflict_storm_detector.h"
#include "agent/analysis/etcd_range_storm_detector.h"
#include "agent/analysis/exempt_client_detector.h"
#include "agent/analysis/list_storm_detector.h"
#include "agent/analysis/relist_churn_detector.h"
#include "agent/analysis/stuck_finalizers_detector.h"
#include "agent/analysis/throttled_client_detector.h"
#include "agent/kube/etcd_keys.h"
#include "agent/kube/identity.h"
#include "agent/kube/object_facts.h"
#include "agent/kube/metric_labels.h"
#include "agent/kube/query_shape.h"
#include "agent/kube/record_keys.h"
#include "agent/kube/request_info.h"
#include "agent/protocol/h2_events.h"
#include "agent/protocol/tls_events.h"
#include "bpf/events.h"

namespace stormwatch {

IdentityRef IdentityCache::Resolve(std::string_view authorization, std::string_view user_agent) {
  uint64_t key = KeyedHash(authorization) * 31 + KeyedHash(user_agent);
  if (auto it = index_.find(key); it != index_.end()) {
    ++hits_;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  ++misses_;
  auto id = std::make_shared<const Identity>(IdentityFromHeaders(authorization, user_agent));
  lru_.emplace_front(key, id);
  index_[key] = lru_.begin();
  if (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return id;
}

const std::string& ClientLabel(const Identity& identity) {
  static const std::string kUnknown = "unknown";
  return identity.user.empty() ? kUnknown : identity.user;
}

RequestPipeline::RequestPipeline(PrometheusExporter* exporter, const DetectorsConfig& detectors,
                                 TransitionSink on_transition, AssemblerLimits limits,
                                 ConnectionLookups connections, ApfNaming apf)
    : exporter_(exporter),
      connections_(std::move(connections)),
      assembler_([this](const RequestConnection& c, std::string_view a,
                        std::string_view ua) { return Resolve(c, a, ua); },
                 limits),
      http1_([this](const Http1Exchange& x) { OnHttp1Exchange(x); }),
      grpc_([this](EtcdRequest& r) { OnEtcdCall(r); }),
      apf_(std::move(apf)),
      on_transition_(std::move(on_transition)) {
  detectors_.push_back(
      std::make_unique<UpdateLoopStormDetector>(detectors.update_loop, detectors.update_loop_allow));
  if (detectors.list_storm.enabled) {
    detectors_.push_back(std::make_unique<ListStormDetector>(detectors.list_storm));
  }
  if (detectors.exempt_client.enabled) {
    auto d = std::make_unique<ExemptClientDetector>(detectors.exempt_client);
    exempt_ = d.get();
    detectors_.push_back(std::move(d));
  }
  if (detectors.conflict_storm.enabled) {
    detectors_.push_back(std::make_unique<ConflictStormDetector>(detectors.conflict_storm));
  }
  if (detectors.throttled_client.enabled) {
    detectors_.push_back(std::make_unique<ThrottledClientDetector>(detectors.throttled_client));
  }
  if (detectors.stuck_finalizers.enabled) {
    detectors_.push_back(std::make_unique<StuckFinalizersDetector>(detectors.stuck_finalizers));
  }
  if (detectors.relist_churn.enabled) {
    detectors_.push_back(std::make_unique<RelistChurnDetector>(detectors.relist_churn));
  }
  if (detectors.etcd_range_storm.enabled) {
    auto d = std::make_unique<EtcdRangeStormDetector>(detectors.etcd_range_storm);
    etcd_range_ = d.get();
    detectors_.push_back(std::move(d));
  }
}

RequestPipeline::~RequestPipeline() = default;

IdentityRef RequestPipeline::Resolve(const RequestConnection& connection,
                                     std::string_view authorization, std::string_view user_agent) {
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
      return std::make_shared<const Identity>(std::move(id));
    }
  }
  return identities_.Resolve(authorization, user_agent);
}

void RequestPipeline::OnEvent(std::span<const uint8_t> bytes) {
  ++stats_.events;
  if (bytes.size() >= sizeof(uint32_t)) {
    uint32_t type;
    std::memcpy(&type, bytes.data(), sizeof(type));
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
  auto event = DecodeCaptureEvent(bytes);
  if (!event) {
    ++stats_.decode_errors;
    return;
  }
  if (auto* req = std::get_if<H2RequestEvent>(&*event)) {
    assembler_.OnRequest(*req);
  } else {
    const auto& resp = std::get<H2ResponseEvent>(*event);
    if (auto record = assembler_.OnResponse(resp)) OnRequest(*record);
  }
}

void RequestPipeline::OnHttp1Exchange(const Http1Exchange& x) {
  RequestRecord r;
  r.pid = x.tgid;
  r.conn_id = x.conn;
  r.start_ns = x.start_ns;
  r.end_ns = x.end_ns;
  r.protocol = "HTTP/1.1";
  if (connections_.http1_ends) {
    ConnectionEnds ends = connections_.http1_ends(x.tgid, x.conn);
    r.local_address = std::move(ends.local);
    r.peer_address = std::move(ends.peer);
  }
  r.method = x.method;
  r.path = x.path;
  r.content_type = x.content_type;
  r.status = x.status;
  r.response_bytes = x.response_bytes;
  r.response.priority_level_uid = x.priority_level_uid;
  r.response.flow_schema_uid = x.flow_schema_uid;
  r.response.retry_after_s = x.retry_after_s;
  r.response_body_prefix = x.body_prefix;
  r.shared_identity = Resolve({.pid = x.tgid, .conn = x.conn, .http1 = true}, x.authorization,
                              x.user_agent);
  r.identity = *r.shared_identity;
  OnRequest(r);
}

void RequestPipeline::NameApfLevels(ResponseFacts& facts) {
  if (!apf_.names || (facts.priority_level_uid.empty() && facts.flow_schema_uid.empty())) return;
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

namespace {
// gRPC paths are "/package.Service/Method"; anything else is folded so labels stay bounded.
std::string GrpcMethodLabel(const std::string& path) {
  if (path.size() > 96 || path.size() < 4 || path[0] != '/') return "other";
  size_t slash = path.find('/', 1);
  if (slash == std::string::npos || path.find_first_of("?/ ", slash + 1) != std::string::npos) {
    return "other";
  }
  return path;
}
}  // namespace

const std::string& RequestPipeline::EtcdResource(const EtcdKey& key) {
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
  if (recorder_.etcd) recorder_.etcd(r);
  const std::string& client = ClientLabel(r.identity);
  const std::string method = GrpcMethodLabel(r.method);
  static const std::string kNoKey;
  if (r.stream_message != EtcdStreamMessage::kNone) {
    // One message of an open stream: its stream is counted as a call when it closes.
    const bool create = r.stream_message == EtcdStreamMessage::kWatchCreate;
    exporter_->CountEtcdStreamMessage(method, EtcdStreamMessageName(r.stream_message),
                                      create ? EtcdResource(r.decoded) : kNoKey, client);
    return;
  }
  const bool keyed = r.request == EtcdMessage::kRangeRequest || r.request == EtcdMessage::kPutRequest ||
                     r.request == EtcdMessage::kDeleteRangeRequest || r.request == EtcdMessage::kTxnRequest;
  // Calls without a key (leases, compaction, status, watches) have resource="".
  const std::string& resource = keyed ? EtcdResource(r.decoded) : kNoKey;
  exporter_->CountEtcdRequest(method, resource, client, GrpcCodeName(r.code));
  if (r.request == EtcdMessage::kRangeRequest && r.kvs >= 0) {
    exporter_->CountEtcdRange(resource, client, static_cast<uint64_t>(r.kvs), r.kv_bytes);
  }
  if (!r.stream && r.end_ns >= r.start_ns) {
    exporter_->ObserveEtcdDuration(method, resource, (r.end_ns - r.start_ns) / 1e9);
  }
  if (etcd_range_) etcd_range_->ObserveEtcd(r, static_cast<int64_t>(r.end_ns));
  etcd_links_.OnRange(r);
}

void RequestPipeline::ReplayRequest(RequestRecord&& r) {
  r.shared_identity.reset();  // a record's identity as it stands, not a pointer it came with
  r.etcd = {};  // matched again from the replayed etcd calls, as live
  OnRequest(r);
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
  e.identity = r.identity;
  exporter_->CountEtcdRequest(GrpcMethodLabel(r.path), "other", ClientLabel(r.identity),
                              std::to_string(r.status));
  if (etcd_range_) etcd_range_->ObserveEtcd(e, static_cast<int64_t>(r.end_ns));
}

IdentityRef RequestPipeline::InternIdentity(const RequestRecord& r) {
  IdentityRef& ref = interned_identities_.FindOrInsert(
      r.keys.client, [] { return IdentityRef(); }, [](uint64_t, IdentityRef&) {});
  // Same client key, different identity: a new user agent (or a token after a certificate).
  if (!ref || !(*ref == r.identity)) ref = std::make_shared<const Identity>(r.identity);
  return ref;
}

void RequestPipeline::OnRequest(RequestRecord& r) {
  ++stats_.requests;
  if (auto role = roles_.find(r.pid); role != roles_.end() && role->second == TargetRole::kEtcd) {
    OnEtcdHttp2Request(r);
    return;
  }
  r.info = ParseRequestInfo(r.method, r.path);
  r.shape = ParseQueryShape(r.info, r.path);
  r.keys = RecordKeysOf(r);  // identity and info are final: every detector keys by these
  // Live records carry their identity from the identity cache, shared (a client certificate's
  // is made per request); replayed ones are interned here.
  if (!r.shared_identity) r.shared_identity = InternIdentity(r);
  // Facts from the response body, then the body is gone: it may be a Secret.
  // Only writes' (POST, PUT, PATCH, DELETE: as the HTTP/2 probe keeps them); HTTP/1.1 keeps
  // every response's first bytes.
  const bool write = !r.method.empty() && (r.method[0] == 'P' || r.method[0] == 'D');
  if (write && !r.response_body_prefix.empty()) {
    const BodyFacts body = ParseObjectFacts(r.response_body_prefix, &r.response);
    exporter_->CountResponseBody(BodyEncodingName(body.encoding), BodyFactsResultName(body.result));
  }
  std::string().swap(r.response_body_prefix);
  NameApfLevels(r.response);
  etcd_links_.Match(r);
  if (recorder_.request) recorder_.request(r);
  MetricLabels m = MetricLabelsFor(r.info, r.method, r.content_type, r.path);
  const std::string& client = ClientLabel(r.identity);
  // KeyOf(client): the user's key, or that of "unknown".
  static const uint64_t kUnknownKey = ClientPeers::KeyOf(ClientLabel(Identity{}));
  peers_.Observe(r.identity.user.empty() ? kUnknownKey : r.keys.user, client, r.peer_address,
                 r.local_address, static_cast<int64_t>(r.end_ns));
  exporter_->CountRequest(RequestLabels{client, m.verb, m.group, m.version, m.resource,
                                        m.subresource, m.scope, std::to_string(r.status)},
                          r.response_bytes);
  if (r.info.verb == "list") {
    exporter_->CountList(client, m.group, m.resource, m.scope,
                         ConsistencyName(r.shape.consistency), r.shape.paginated);
  }
  if (!r.response.priority_level_uid.empty() || !r.response.flow_schema_uid.empty()) {
    exporter_->CountApf(client, r.response.priority_level, r.response.flow_schema);
  }
  if (r.status == 429) {
    exporter_->CountThrottled(client, r.response.priority_level, r.response.retry_after_s);
  }
  if (m.verb == "WATCH" && r.end_ns >= r.start_ns) {
    exporter_->CountWatch(client, m.group, m.resource, (r.end_ns - r.start_ns) / 1e9,
                          r.shape.send_initial_events);
  }
  // Watches last minutes by design: their duration says nothing about latency.
  if (m.verb != "WATCH" && r.end_ns >= r.start_ns) {
    exporter_->ObserveDuration(m.verb, m.group, m.resource, (r.end_ns - r.start_ns) / 1e9);
  }
  for (auto& d : detectors_) d->Observe(r, static_cast<int64_t>(r.end_ns));
}

void RequestPipeline::PublishDetectorState(int64_t now_ns) {
  for (const auto& d : detectors_) {
    DetectorStats st = d->Stats();
    exporter_->SetDetectorState(d->storm(), st.tracked, st.evictions);
  }
  if (exempt_) {
    exporter_->ClearExemptClients();
    for (const ExemptClient& c : exempt_->ExemptClients(now_ns)) {
      // "priority_level_exempt,system_masters": one series per reason.
      size_t start = 0;
      while (start <= c.reason.size()) {
        size_t comma = c.reason.find(',', start);
        std::string reason = c.reason.substr(start, comma - start);
        if (!reason.empty()) exporter_->SetExemptClient(c.user, reason, c.requests_per_second);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
  }
}

void RequestPipeline::Tick(int64_t now_ns) {
  assembler_.Expire(static_cast<uint64_t>(now_ns));
  http1_.Expire(static_cast<uint64_t>(now_ns));
  for (auto& d : detectors_) {
    for (StormTransition& t : d->Evaluate(now_ns)) {
      StormEvidence& e = t.evidence;
      bool firing = t.state == StormState::kFiring;
      const std::string client = ClientLabel(e.identity);
      // Which machines the client's requests come from: its pods, or the nodes behind them.
      if (nlohmann::json peers = peers_.TopPeers(client); !peers.empty()) e.details["peers"] = peers;
      exporter_->SetStormActive({{"storm", e.storm},
                                 {"client", client},
                                 {"group", e.api_group},
                                 {"resource", e.resource},
                                 {"severity", e.severity}},
                                firing);
      if (firing) exporter_->CountStormStarted(e.storm);
      on_transition_(t);
    }
  }
  const AssemblerStats& a = assembler_.stats();
  exporter_->SetCaptureLoss("request_without_response", a.requests_without_response);
  exporter_->SetCaptureLoss("response_without_request", a.responses_without_request);
  exporter_->SetCaptureLoss("headers_truncated", a.truncated_headers);
  exporter_->SetCaptureLoss("undecodable_event", stats_.decode_errors);
  const Http1Stats& h1 = http1_.stats();
  exporter_->SetCaptureLoss("http1_head_truncated", h1.head_truncated);
  exporter_->SetCaptureLoss("http1_unparseable", h1.unparseable);
  exporter_->SetCaptureLoss("http1_response_without_request", h1.responses_without_request);
  exporter_->SetCaptureLoss("http1_request_without_response", h1.requests_without_response);
  exporter_->SetCaptureLoss("http1_connection_evicted", h1.connections_evicted);
  exporter_->SetCaptureLoss("http1_joined_mid_response", h1.joined_mid_response);
  const GrpcCallStats& g = grpc_.stats();
  exporter_->SetCaptureLoss("grpc_return_without_call", g.returns_without_call);
  exporter_->SetCaptureLoss("grpc_call_evicted", g.calls_evicted);
  const EtcdLinkStats& l = etcd_links_.stats();
  exporter_->SetEtcdLinks(l.lists, l.lists_matched);
  PublishDetectorState(now_ns);
}

}  // namespace stormwatch
