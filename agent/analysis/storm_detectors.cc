#include "agent/analysis/storm_detectors.h"

#include "agent/analysis/conflict_storm_detector.h"
#include "agent/analysis/etcd_range_storm_detector.h"
#include "agent/analysis/exempt_client_detector.h"
#include "agent/analysis/list_storm_detector.h"
#include "agent/analysis/relist_churn_detector.h"
#include "agent/analysis/stuck_finalizers_detector.h"
#include "agent/analysis/throttled_client_detector.h"
#include "agent/analysis/update_loop_detector.h"

namespace stormwatch {

StormDetectors::StormDetectors(const DetectorsConfig& config) {
  if (config.update_loop.enabled) {
    detectors_.push_back(
        std::make_unique<UpdateLoopStormDetector>(config.update_loop, config.update_loop_allow));
  }
  if (config.list_storm.enabled) {
    detectors_.push_back(std::make_unique<ListStormDetector>(config.list_storm));
  }
  if (config.exempt_client.enabled) {
    auto d = std::make_unique<ExemptClientDetector>(config.exempt_client);
    exempt_ = d.get();
    detectors_.push_back(std::move(d));
  }
  if (config.conflict_storm.enabled) {
    detectors_.push_back(std::make_unique<ConflictStormDetector>(config.conflict_storm));
  }
  if (config.throttled_client.enabled) {
    detectors_.push_back(std::make_unique<ThrottledClientDetector>(config.throttled_client));
  }
  if (config.stuck_finalizers.enabled) {
    detectors_.push_back(std::make_unique<StuckFinalizersDetector>(config.stuck_finalizers));
  }
  if (config.relist_churn.enabled) {
    detectors_.push_back(std::make_unique<RelistChurnDetector>(config.relist_churn));
  }
  if (config.etcd_range_storm.enabled) {
    auto d = std::make_unique<EtcdRangeStormDetector>(config.etcd_range_storm);
    etcd_range_ = d.get();
    detectors_.push_back(std::move(d));
  }
}

StormDetectors::~StormDetectors() = default;

void StormDetectors::OnRequest(const RequestRecord& r) {
  for (auto& d : detectors_) d->Observe(r, static_cast<int64_t>(r.end_ns));
}

void StormDetectors::OnEtcdCall(const EtcdRequest& r) {
  // One message of an open stream says nothing about ranges: its stream is a call when it ends.
  if (etcd_range_ && r.stream_message == EtcdStreamMessage::kNone) {
    etcd_range_->ObserveEtcd(r, static_cast<int64_t>(r.end_ns));
  }
}

std::vector<StormTransition> StormDetectors::Evaluate(int64_t now_ns) {
  std::vector<StormTransition> all;
  for (auto& d : detectors_) {
    for (StormTransition& t : d->Evaluate(now_ns)) all.push_back(std::move(t));
  }
  return all;
}

}  // namespace stormwatch
