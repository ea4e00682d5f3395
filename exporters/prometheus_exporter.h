// The agent's /metrics endpoint (prometheus-cpp). Metric names and the `client` label plus
// apiserver_request_total's label vocabulary are a contract with checks outside the project.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace stormwatch {

// Labels of stormwatch_requests_total: `client` plus apiserver_request_total's labels.
struct RequestLabels {
  std::string client, verb, group, version, resource, subresource, scope, code;
};

class PrometheusExporter {
 public:
  // Serves on `address` ("host:port"); throws at start-up if it cannot bind (fatal).
  explicit PrometheusExporter(const std::string& address);
  // No HTTP endpoint: for tests that read the registry directly.
  PrometheusExporter();

  void CountRequest(const RequestLabels& labels, uint64_t response_bytes);
  // Requests etcd served (the apiserver's storage traffic), by gRPC method and HTTP status.
  void CountEtcdRequest(const std::string& method, const std::string& code);
  // LISTs by how much they cost: consistent (etcd) or from the cache, paginated or not.
  void CountList(const std::string& client, const std::string& group, const std::string& resource,
                 const std::string& scope, const std::string& consistency, bool paginated);
  // Latency as apiserver_request_duration_seconds has it (no client label: bounded series).
  void ObserveDuration(const std::string& verb, const std::string& group,
                       const std::string& resource, double seconds);
  void SetStormActive(const std::map<std::string, std::string>& labels, bool active);
  void CountStormStarted(const std::string& storm);
  // Adds a cumulative count observed elsewhere (BPF maps) as a delta.
  void SetCaptureLoss(const std::string& cause, uint64_t cumulative);
  void SetProbeHits(const std::string& probe, uint64_t cumulative);
  void SetTargetsAttached(size_t n);
  void SetTargetInfo(const std::map<std::string, std::string>& labels, bool present);
  void CountAttachFailure(const std::string& target, const std::string& reason);

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

 private:
  void AddCumulative(prometheus::Family<prometheus::Counter>& family,
                     std::map<std::string, uint64_t>& seen, const std::string& label_name,
                     const std::string& label_value, uint64_t cumulative);

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Counter>* response_bytes_;
  prometheus::Family<prometheus::Counter>* lists_;
  prometheus::Family<prometheus::Counter>* etcd_requests_;
  prometheus::Family<prometheus::Histogram>* duration_;
  prometheus::Family<prometheus::Gauge>* storm_active_;
  prometheus::Family<prometheus::Counter>* storms_total_;
  prometheus::Family<prometheus::Counter>* capture_loss_;
  prometheus::Family<prometheus::Counter>* probe_hits_;
  prometheus::Gauge* targets_attached_;
  prometheus::Family<prometheus::Gauge>* target_info_;
  prometheus::Family<prometheus::Counter>* attach_failures_;

  std::mutex mu_;
  // Counter handles per label set: Family::Add hashes a std::map on every call.
  std::unordered_map<std::string, std::pair<prometheus::Counter*, prometheus::Counter*>> request_cache_;
  std::unordered_map<std::string, prometheus::Counter*> list_cache_;
  std::unordered_map<std::string, prometheus::Histogram*> duration_cache_;
  std::map<std::string, uint64_t> loss_seen_, hits_seen_;
};

}  // namespace stormwatch
