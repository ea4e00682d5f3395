#include "agent/pipeline/request_pipeline.h"

#include "agent/kube/identity.h"
#include "agent/kube/metric_labels.h"
#include "agent/kube/query_shape.h"
#include "agent/kube/request_info.h"
#include "agent/protocol/h2_events.h"

namespace stormwatch {

Identity IdentityCache::Resolve(std::string_view authorization, std::string_view user_agent) {
  uint64_t key = KeyedHash(authorization) * 31 + KeyedHash(user_agent);
  if (auto it = index_.find(key); it != index_.end()) {
    ++hits_;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  ++misses_;
  Identity id = IdentityFromHeaders(authorization, user_agent);
  lru_.emplace_front(key, id);
  index_[key] = lru_.begin();
  if (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return id;
}

std::string ClientLabel(const Identity& identity) {
  return identity.user.empty() ? "unknown" : identity.user;
}

RequestPipeline::RequestPipeline(PrometheusExporter* exporter, const DetectorsConfig& detectors,
                                 TransitionSink on_transition, AssemblerLimits limits,
                                 ConnectionIdentity connection_identity)
    : exporter_(exporter),
      connection_identity_(std::move(connection_identity)),
      assembler_([this](uint32_t pid, uint64_t conn, std::string_view a,
                        std::string_view ua) { return Resolve(pid, conn, a, ua); },
                 limits),
      on_transition_(std::move(on_transition)) {
  detectors_.push_back(
      std::make_unique<UpdateLoopStormDetector>(detectors.update_loop, detectors.update_loop_allow));
}

Identity RequestPipeline::Resolve(uint32_t pid, uint64_t conn, std::string_view authorization,
                                  std::string_view user_agent) {
  // kube-apiserver's authenticators run x509 first: a verified client certificate wins.
  if (connection_identity_) {
    if (std::optional<Identity> cert = connection_identity_(pid, conn)) {
      Identity id = IdentityFromHeaders("", user_agent);  // user agent and its component
      id.kind = cert->kind;
      id.user = std::move(cert->user);
      id.groups = std::move(cert->groups);
      id.system_masters = cert->system_masters;
      id.reason = std::move(cert->reason);
      return id;
    }
  }
  return identities_.Resolve(authorization, user_agent);
}

void RequestPipeline::OnEvent(std::span<const uint8_t> bytes) {
  ++stats_.events;
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

TargetRole RoleOfExecutable(const std::string& name) {
  return name == "etcd" ? TargetRole::kEtcd : TargetRole::kApiServer;
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

void RequestPipeline::OnEtcdRequest(const RequestRecord& r) {
  exporter_->CountEtcdRequest(GrpcMethodLabel(r.path), std::to_string(r.status));
}

void RequestPipeline::OnRequest(RequestRecord& r) {
  ++stats_.requests;
  if (auto role = roles_.find(r.pid); role != roles_.end() && role->second == TargetRole::kEtcd) {
    OnEtcdRequest(r);
    return;
  }
  r.info = ParseRequestInfo(r.method, r.path);
  r.shape = ParseQueryShape(r.info, r.path);
  MetricLabels m = MetricLabelsFor(r.info, r.method, r.content_type, r.path);
  exporter_->CountRequest(
      RequestLabels{ClientLabel(r.identity), m.verb, m.group, m.version, m.resource, m.subresource,
                    m.scope, std::to_string(r.status)},
      r.response_bytes);
  if (r.info.verb == "list") {
    exporter_->CountList(ClientLabel(r.identity), m.group, m.resource, m.scope,
                         ConsistencyName(r.shape.consistency), r.shape.paginated);
  }
  // Watches last minutes by design: their duration says nothing about latency.
  if (m.verb != "WATCH" && r.end_ns >= r.start_ns) {
    exporter_->ObserveDuration(m.verb, m.group, m.resource, (r.end_ns - r.start_ns) / 1e9);
  }
  for (auto& d : detectors_) d->Observe(r, static_cast<int64_t>(r.end_ns));
}

void RequestPipeline::Tick(int64_t now_ns) {
  assembler_.Expire(static_cast<uint64_t>(now_ns));
  for (auto& d : detectors_) {
    for (const StormTransition& t : d->Evaluate(now_ns)) {
      const StormEvidence& e = t.evidence;
      bool firing = t.state == StormState::kFiring;
      exporter_->SetStormActive({{"storm", e.storm},
                                 {"client", ClientLabel(e.identity)},
                                 {"group", e.api_group},
                                 {"resource", e.resource}},
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
}

}  // namespace stormwatch
