// The metric policy: what each finished record counts in the agent's Prometheus families
// (exporters/prometheus_exporter.h), as a sink of the pipeline. The labels of
// stormwatch_requests_total are apiserver_request_total's (agent/kube/metric_labels.h) plus
// `client`; etcd calls are counted as go-grpc-prometheus labels etcd's own.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "agent/analysis/record_sink.h"
#include "agent/analysis/storm_detectors.h"
#include "exporters/prometheus_exporter.h"

namespace stormwatch {

// Which (group, resource) pairs get a `resource` label of their own. A path names any resource
// its sender likes, so the labels of requests are bounded here: at most kMaxResources pairs,
// of which at most kMaxUnservedResources were only ever answered 401, 403 or 404 (what a path no
// route serves gets): junk paths, even unauthenticated, cannot crowd out the API's resources.
// Beyond: resource="other" (group, version and subresource empty).
class ResourceLabels {
 public:
  static constexpr size_t kMaxResources = 1024;
  static constexpr size_t kMaxUnservedResources = 64;
  // Whether the pair keeps its own label; `resource_key`: the pair's RecordKeys::resource (the
  // record's, hashed once per record); `served`: the request was answered otherwise than 401,
  // 403 or 404; `named()`: whether the pair could name a served API (CouldBeServedResource),
  // asked only of a pair not admitted before (a pair that could not is never admitted).
  template <typename Named>
  bool Admit(uint64_t resource_key, bool served, Named named) {
    if (auto it = seen_.find(resource_key); it != seen_.end()) {
      if (served && !it->second.served) {
        it->second.served = true;
        --unserved_;
      }
      return true;
    }
    if (!named()) return false;
    return AdmitNew(resource_key, served);
  }
  uint64_t folded() const { return folded_; }

 private:
  bool AdmitNew(uint64_t resource_key, bool served);

  struct Seen {
    bool served = false;
  };
  absl::flat_hash_map<uint64_t, Seen> seen_;  // by resource key
  size_t unserved_ = 0;   // entries never served
  uint64_t folded_ = 0;   // requests labelled "other" for want of room
};

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

  ResourceLabels resources_;
  // stormwatch_response_bodies_total's counter per (BodyEncoding, BodyFactsResult), found
  // once: a third of all requests are writes whose body is read.
  static constexpr size_t kEncodings = static_cast<size_t>(BodyEncoding::kOther) + 1;
  static constexpr size_t kBodyResults = static_cast<size_t>(BodyFactsResult::kUnreadable) + 1;
  std::array<std::array<prometheus::Counter*, kBodyResults>, kEncodings> body_counters_{};

  PrometheusExporter* exporter_;
  const StormDetectors* detectors_;
};

// gRPC paths are "/package.Service/Method"; anything else is "other", so labels stay bounded.
std::string_view GrpcMethodLabel(std::string_view path);

}  // namespace stormwatch
