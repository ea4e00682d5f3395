// The storm detectors the configuration enables, as one sink: every finished request and etcd
// call goes to each of them, and once a second they decide (Evaluate).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "agent/analysis/detector_config.h"
#include "agent/analysis/record_sink.h"
#include "agent/analysis/storm.h"

namespace stormwatch {

class ExemptClientDetector;
class EtcdRangeStormDetector;

class StormDetectors final : public RecordSink {
 public:
  explicit StormDetectors(const DetectorsConfig& config);
  ~StormDetectors() override;

  void OnRequest(const RequestRecord& r) override;
  void OnEtcdCall(const EtcdRequest& r) override;

  // Every enabled detector's transitions over the complete seconds before `now_ns`.
  std::vector<StormTransition> Evaluate(int64_t now_ns);

  const std::vector<std::unique_ptr<StormDetector>>& detectors() const { return detectors_; }
  // The exempt-client detector, when enabled (its per-client counts are exported).
  const ExemptClientDetector* exempt() const { return exempt_; }

 private:
  std::vector<std::unique_ptr<StormDetector>> detectors_;  // one per enabled storm
  ExemptClientDetector* exempt_ = nullptr;        // in detectors_, when enabled
  EtcdRangeStormDetector* etcd_range_ = nullptr;  // in detectors_, when enabled
};

}  // namespace stormwatch
