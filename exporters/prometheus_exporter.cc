#include "exporters/prometheus_exporter.h"

namespace stormwatch {

PrometheusExporter::PrometheusExporter(const std::string& address) : PrometheusExporter() {
  exposer_ = std::make_unique<prometheus::Exposer>(address);
  exposer_->RegisterCollectable(registry_);
}

PrometheusExporter::PrometheusExporter() : registry_(std::make_shared<prometheus::Registry>()) {
  requests_ = &prometheus::BuildCounter()
                   .Name("stormwatch_requests_total")
                   .Help("Requests the API server handled, by client and by the labels of "
                         "apiserver_request_total.")
                   .Register(*registry_);
  response_bytes_ = &prometheus::BuildCounter()
                         .Name("stormwatch_response_bytes_total")
                         .Help("Response body bytes written by the API server, by client and by "
                               "the labels of apiserver_request_total.")
                         .Register(*registry_);
  lists_ = &prometheus::BuildCounter()
                .Name("stormwatch_list_requests_total")
                .Help("LIST requests by client and cost shape: consistency (consistent reads go "
                      "to etcd; any = resourceVersion=0 from the watch cache) and pagination.")
                .Register(*registry_);
  etcd_requests_ = &prometheus::BuildCounter()
                        .Name("stormwatch_etcd_requests_total")
                        .Help("Requests etcd served over its Go HTTP/2 server (gRPC), by method "
                              "and HTTP status.")
                        .Register(*registry_);
  duration_ = &prometheus::BuildHistogram()
                   .Name("stormwatch_request_duration_seconds")
                   .Help("Time from decoded request headers to the handler's end, by verb and "
                         "resource (as apiserver_request_duration_seconds).")
                   .Register(*registry_);
  storm_active_ = &prometheus::BuildGauge()
                       .Name("stormwatch_storm_active")
                       .Help("1 while a storm is firing for this client and resource.")
                       .Register(*registry_);
  storms_total_ = &prometheus::BuildCounter()
                       .Name("stormwatch_storms_total")
                       .Help("Storms that started firing, by kind.")
                       .Register(*registry_);
  capture_loss_ = &prometheus::BuildCounter()
                       .Name("stormwatch_capture_lost_total")
                       .Help("Events or parts of events lost in capture, by cause.")
                       .Register(*registry_);
  probe_hits_ = &prometheus::BuildCounter()
                     .Name("stormwatch_probe_hits_total")
                     .Help("Uprobe hits, by probe.")
                     .Register(*registry_);
  targets_attached_ = &prometheus::BuildGauge()
                           .Name("stormwatch_targets_attached")
                           .Help("Target processes with probes attached.")
                           .Register(*registry_)
                           .Add({});
  target_info_ = &prometheus::BuildGauge()
                      .Name("stormwatch_target_info")
                      .Help("1 per target process seen, with its versions and attach status.")
                      .Register(*registry_);
  attach_failures_ = &prometheus::BuildCounter()
                          .Name("stormwatch_target_attach_failures_total")
                          .Help("Targets that could not be attached, by target and reason.")
                          .Register(*registry_);
}

void PrometheusExporter::CountRequest(const RequestLabels& l, uint64_t response_bytes) {
  std::string key;
  key.reserve(128);
  for (const std::string* s : {&l.client, &l.verb, &l.group, &l.version, &l.resource,
                               &l.subresource, &l.scope, &l.code}) {
    key += *s;
    key += '\x1f';
  }
  std::lock_guard lock(mu_);
  auto it = request_cache_.find(key);
  if (it == request_cache_.end()) {
    std::map<std::string, std::string> labels = {
        {"client", l.client},     {"verb", l.verb},   {"group", l.group},
        {"version", l.version},   {"resource", l.resource},
        {"subresource", l.subresource}, {"scope", l.scope}, {"code", l.code}};
    it = request_cache_
             .emplace(key, std::make_pair(&requests_->Add(labels), &response_bytes_->Add(labels)))
             .first;
  }
  it->second.first->Increment();
  if (response_bytes) it->second.second->Increment(static_cast<double>(response_bytes));
}

void PrometheusExporter::CountList(const std::string& client, const std::string& group,
                                   const std::string& resource, const std::string& scope,
                                   const std::string& consistency, bool paginated) {
  std::string key = client + '\x1f' + group + '\x1f' + resource + '\x1f' + scope + '\x1f' +
                    consistency + (paginated ? "\x1fp" : "\x1fu");
  std::lock_guard lock(mu_);
  auto it = list_cache_.find(key);
  if (it == list_cache_.end()) {
    it = list_cache_
             .emplace(key, &lists_->Add({{"client", client},
                                         {"group", group},
                                         {"resource", resource},
                                         {"scope", scope},
                                         {"consistency", consistency},
                                         {"paginated", paginated ? "true" : "false"}}))
             .first;
  }
  it->second->Increment();
}

void PrometheusExporter::CountEtcdRequest(const std::string& method, const std::string& code) {
  std::lock_guard lock(mu_);
  etcd_requests_->Add({{"method", method}, {"code", code}}).Increment();
}

void PrometheusExporter::ObserveDuration(const std::string& verb, const std::string& group,
                                         const std::string& resource, double seconds) {
  // apiserver_request_duration_seconds' buckets, so the two line up.
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3,
      4,     5,     6,    8,   10,  15,  20,  30,  45,  60};
  std::string key = verb + '\x1f' + group + '\x1f' + resource;
  std::lock_guard lock(mu_);
  auto it = duration_cache_.find(key);
  if (it == duration_cache_.end()) {
    it = duration_cache_
             .emplace(key, &duration_->Add({{"verb", verb}, {"group", group}, {"resource", resource}},
                                           kBuckets))
             .first;
  }
  it->second->Observe(seconds);
}

void PrometheusExporter::SetStormActive(const std::map<std::string, std::string>& labels,
                                        bool active) {
  storm_active_->Add(labels).Set(active ? 1 : 0);
}

void PrometheusExporter::CountStormStarted(const std::string& storm) {
  storms_total_->Add({{"storm", storm}}).Increment();
}

void PrometheusExporter::AddCumulative(prometheus::Family<prometheus::Counter>& family,
                                       std::map<std::string, uint64_t>& seen,
                                       const std::string& label_name,
                                       const std::string& label_value, uint64_t cumulative) {
  std::lock_guard lock(mu_);
  auto& counter = family.Add({{label_name, label_value}});
  uint64_t& last = seen[label_value];
  if (cumulative > last) counter.Increment(static_cast<double>(cumulative - last));
  last = cumulative;
}

void PrometheusExporter::SetCaptureLoss(const std::string& cause, uint64_t cumulative) {
  AddCumulative(*capture_loss_, loss_seen_, "cause", cause, cumulative);
}

void PrometheusExporter::SetProbeHits(const std::string& probe, uint64_t cumulative) {
  AddCumulative(*probe_hits_, hits_seen_, "probe", probe, cumulative);
}

void PrometheusExporter::SetTargetsAttached(size_t n) {
  targets_attached_->Set(static_cast<double>(n));
}

void PrometheusExporter::SetTargetInfo(const std::map<std::string, std::string>& labels,
                                       bool present) {
  if (present) {
    target_info_->Add(labels).Set(1);
  } else if (target_info_->Has(labels)) {
    target_info_->Remove(&target_info_->Add(labels));
  }
}

void PrometheusExporter::CountAttachFailure(const std::string& target, const std::string& reason) {
  attach_failures_->Add({{"target", target}, {"reason", reason}}).Increment();
}

}  // namespace stormwatch
