// The metric policy: what each finished record counts in the agent's Prometheus families
// (exporters/prometheus_exporter.h), as a sink of the pipeline. The labels of
// stormwatch_requests_total are apiserver_request_total's (agent/kube/metric_labels.h) plus
// `client`; etcd calls are counted as go-grpc-prometheus labels etcd's own.
#pragma once

#include <cstdint>

#include "agent/analysis/record_sink.h"
#include "agent/analysis/storm_detectors.h"
#include "exporters/prometheus_exporter.h"

namespace stormwatch {

class RequestMetrics final : public RecordSink {
 public:
  // `detectors` (optional) are the ones whose state gauges and exempt-client counters are
  // published once a second.
  RequestMetrics(PrometheusExporter* exporter, const StormDetectors* detectors)
      : exporter_(exporter), detectors_(detectors) {}

  void OnRequest(const RequestRecord& r) override;
  void OnEtcdCall(const EtcdRequest& r) override;
  void OnStormTransition(const StormTransition& t) override;
  void OnTick(int64_t now_ns, const PipelineHealth& health) override;

 private:
  void PublishDetectorState(int64_t now_ns);

  PrometheusExporter* exporter_;
  const StormDetectors* detectors_;
};

// gRPC paths are "/package.Service/Method"; anything else is "other", so labels stay bounded.
std::string_view GrpcMethodLabel(std::string_view path);

}  // namespace stormwatch
