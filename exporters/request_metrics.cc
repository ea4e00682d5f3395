#include "exporters/request_metrics.h"

#include <algorithm>
#include <charconv>
#include <string>

#include "agent/analysis/exempt_client_detector.h"
#include "agent/kube/identity.h"
#include "agent/kube/metric_labels.h"
#include "agent/kube/object_facts.h"
#include "agent/kube/query_shape.h"
#include "agent/kube/record_keys.h"

namespace stormwatch {
namespace {

// The client label of `id` (ClientLabel) with its key: the identity's own user_key when it
// has one (a label's key is the hash of the label, and user_key is the hash of the user).
ClientName ClientNameOf(const Identity& id) {
  if (id.user.empty()) {
    static const ClientName unknown(ClientLabel(id));
    return unknown;
  }
  return ClientName(id.user, id.keys_set ? id.user_key : HashFields({id.user}));
}

}  // namespace

std::string_view GrpcMethodLabel(std::string_view path) {
  if (path.size() > 96 || path.size() < 4 || path[0] != '/') return "other";
  size_t slash = path.find('/', 1);
  if (slash == std::string_view::npos || path.find_first_of("?/ ", slash + 1) != std::string_view::npos) {
    return "other";
  }
  return path;
}

bool ResourceLabels::AdmitNew(uint64_t key, bool served) {
  if (seen_.size() >= kMaxResources || (!served && unserved_ >= kMaxUnservedResources)) {
    ++folded_;
    return false;
  }
  seen_.emplace(key, Seen{served});
  if (!served) ++unserved_;
  return true;
}

void RequestMetrics::OnRequest(const RequestRecord& r) {
  if (r.body_read) {
    // A replayed record's values may lie outside the enums: counted as their names are then
    // ("other", "unreadable"), the last of each.
    const size_t encoding = std::min(static_cast<size_t>(r.body_read->encoding), kEncodings - 1);
    const size_t result = std::min(static_cast<size_t>(r.body_read->result), kBodyResults - 1);
    prometheus::Counter*& body = body_counters_[encoding][result];
    if (!body) {
      body = &exporter_->ResponseBodyCounter(BodyEncodingName(static_cast<BodyEncoding>(encoding)),
                                             BodyFactsResultName(static_cast<BodyFactsResult>(result)));
    }
    body->Increment();
  }
  MetricLabels m = MetricLabelsFor(r.info, r.shape, r.method, r.content_type, r.path);
  uint64_t resource_key = 0;  // of m.group and m.resource, when they are the record's
  if (!m.resource.empty()) {
    const bool served = r.status != 401 && r.status != 403 && r.status != 404;
    // m.group and m.resource are the RequestInfo's: their key is the record's resource key,
    // and whether they could name an API is asked once per pair.
    resource_key = KeysOf(r).resource;
    if (!CouldBeServedVersion(m) ||
        !resources_.Admit(resource_key, served, [&] { return CouldBeServedResource(m); })) {
      m.group = m.version = m.subresource = "";
      m.resource = "other";
      resource_key = 0;
    }
  }
  const ClientName client = ClientNameOf(*r.identity);
  char code[16];
  const auto printed = std::to_chars(code, code + sizeof(code), r.status);
  RequestObservation o;
  o.labels = RequestLabels{client, m.verb, m.group, m.version, m.resource, m.subresource, m.scope,
                           std::string_view(code, printed.ptr - code)};
  o.response_bytes = r.response_bytes;
  o.resource_key = resource_key;
  if (r.response.ThroughApf()) {
    o.apf = true;
    o.priority_level = r.response.priority_level;
    o.flow_schema = r.response.flow_schema;
  }
  // Watches last minutes by design: their duration says nothing about latency.
  if (m.verb != "WATCH" && r.end_ns >= r.start_ns) o.duration_s = (r.end_ns - r.start_ns) / 1e9;
  exporter_->CountRequest(o);
  if (r.info.verb_kind == KubeVerb::kList) {
    exporter_->CountList(client, m.group, m.resource, m.scope,
                         ConsistencyName(r.shape.consistency), r.shape.paginated);
  }
  if (r.status == 429) {
    exporter_->CountThrottled(client, r.response.priority_level, r.response.retry_after_s);
  }
  if (m.verb == "WATCH" && r.end_ns >= r.start_ns) {
    exporter_->CountWatch(client, m.group, m.resource, (r.end_ns - r.start_ns) / 1e9,
                          r.shape.send_initial_events);
  }
}

void RequestMetrics::OnEtcdCall(const EtcdRequest& r) {
  const ClientName client = ClientNameOf(r.identity);
  const std::string_view method = GrpcMethodLabel(r.method);  // views: no copy per call
  const std::string_view resource = r.resource;
  if (r.http_status != 0) {  // the HTTP/2 server's view: method and status only
    exporter_->CountEtcdRequest(method, resource, client, std::to_string(r.http_status));
    return;
  }
  if (r.stream_message != EtcdStreamMessage::kNone) {
    // One message of an open stream: its stream is counted as a call when it closes.
    exporter_->CountEtcdStreamMessage(method, EtcdStreamMessageName(r.stream_message), resource,
                                      client);
    return;
  }
  exporter_->CountEtcdRequest(method, resource, client, GrpcCodeName(r.code));
  if (r.request == EtcdMessage::kRangeRequest && r.kvs >= 0) {
    exporter_->CountEtcdRange(resource, client, static_cast<uint64_t>(r.kvs), r.kv_bytes);
  }
  if (!r.stream && r.end_ns >= r.start_ns) {
    exporter_->ObserveEtcdDuration(method, resource, (r.end_ns - r.start_ns) / 1e9);
  }
}

void RequestMetrics::OnStormTransition(const StormTransition& t) {
  const StormEvidence& e = t.evidence;
  const bool firing = t.state == StormState::kFiring;
  // The resource and namespace came from a path: as for the request counters, what could not
  // name a served API is "other" (a label must be valid UTF-8, or the whole scrape fails).
  MetricLabels api;
  api.group = e.api_group;
  api.version = "v1";
  api.resource = e.resource;
  const bool named = CouldBeServedApi(api);
  MetricLabels ns;  // a namespace is valid where a core resource name would be
  ns.version = "v1";
  ns.resource = e.namespace_;
  exporter_->SetStormActive({{"storm", e.storm},
                             {"client", ClientLabel(e.identity)},
                             {"group", named ? e.api_group : ""},
                             {"resource", named ? e.resource : "other"},
                             {"severity", e.severity},
                             // not "namespace": Prometheus sets that to the scraped pod's
                             {"object_namespace", CouldBeServedApi(ns) ? e.namespace_ : "other"}},
                            firing);
  if (firing) exporter_->CountStormStarted(e.storm);
}

void RequestMetrics::OnTick(int64_t now_ns, const PipelineHealth& health) {
  for (const auto& [cause, count] : health.capture_loss) exporter_->SetCaptureLoss(cause, count);
  exporter_->SetEtcdLinks(health.etcd_lists, health.etcd_lists_matched);
  exporter_->SetIdentityCache(health.identity_connection_hits, health.identity_cache_hits,
                              health.identity_cache_misses);
  PublishDetectorState(now_ns);
}

void RequestMetrics::PublishDetectorState(int64_t now_ns) {
  if (!detectors_) return;
  for (const auto& d : detectors_->detectors()) {
    DetectorStats st = d->Stats();
    exporter_->SetDetectorState(d->storm(), st.tracked, st.evictions, st.refusals);
  }
  if (const ExemptClientDetector* exempt = detectors_->exempt()) {
    for (const ExemptClient& c : exempt->ExemptClients(now_ns)) {
      if (c.priority_level_exempt_requests) {
        exporter_->CountExemptClientRequests(c.user, kReasonPriorityLevelExempt,
                                             c.priority_level_exempt_requests, c.first_seen_ns,
                                             c.last_seen_ns);
      }
      if (c.system_masters_requests) {
        exporter_->CountExemptClientRequests(c.user, kReasonSystemMasters,
                                             c.system_masters_requests, c.first_seen_ns,
                                             c.last_seen_ns);
      }
    }
  }
}

}  // namespace stormwatch
