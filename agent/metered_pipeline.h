// The pipeline as the agent and `stormwatch replay` run it: every record counted into the
// exporter's families (exporters/request_metrics.h), every storm transition handed to
// `on_transition` (the alert outputs), after the pipeline's own sinks.
#pragma once

#include <functional>
#include <utility>

#include "agent/pipeline/request_pipeline.h"
#include "exporters/prometheus_exporter.h"
#include "exporters/request_metrics.h"

namespace stormwatch {

class MeteredPipeline : public RequestPipeline {
 public:
  using TransitionSink = std::function<void(const StormTransition&)>;

  MeteredPipeline(PrometheusExporter* exporter, const DetectorsConfig& detectors,
                  TransitionSink on_transition, AssemblerLimits limits = {},
                  ConnectionLookups connections = {}, ApfNaming apf = {})
      : RequestPipeline(detectors, limits, std::move(connections), std::move(apf)),
        metrics_(exporter, &storms()) {
    alerts_.transition = std::move(on_transition);
    AddSink(&metrics_);
    AddSink(&alerts_);
  }

 private:
  RequestMetrics metrics_;
  CallbackSink alerts_;
};

}  // namespace stormwatch
