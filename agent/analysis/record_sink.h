// Where finished records go. The pipeline (agent/pipeline) turns captured events into one
// record per request or etcd call, enriches it once (RequestInfo, query shape, identity, keys,
// body facts, APF names, etcd reads) and hands the same immutable record to every sink in
// turn: the storm detectors, the metrics, the per-client views, the recorder. Nothing a sink
// does flows back into the pipeline or into another sink.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "agent/analysis/storm.h"
#include "agent/core/etcd_request.h"
#include "agent/core/request_record.h"

namespace stormwatch {

// What the pipeline's own stages lost or matched so far (cumulative), once a second.
struct PipelineHealth {
  // stormwatch_capture_lost_total's `cause` and its count, for the pipeline's stages.
  std::vector<std::pair<const char*, uint64_t>> capture_loss;
  uint64_t etcd_lists = 0;          // consistent LISTs that could have read etcd here
  uint64_t etcd_lists_matched = 0;  // ... and whose etcd Range was found
  // Requests whose identity was already decoded (hit) or had to be (miss: a JWT decode), and
  // those named by their connection's authenticated credential (not looked up in the cache).
  uint64_t identity_cache_hits = 0, identity_cache_misses = 0, identity_connection_hits = 0;
};

class RecordSink {
 public:
  virtual ~RecordSink() = default;
  // One request, final. Its body is gone; its identity, info, shape and keys are set.
  virtual void OnRequest(const RequestRecord&) {}
  // One etcd call, final: key decoded and dropped, resource label and identity set.
  virtual void OnEtcdCall(const EtcdRequest&) {}
  // Once a second, after the detectors' evaluation: a storm that started or ended, its
  // evidence complete (peers included).
  virtual void OnStormTransition(const StormTransition&) {}
  // Once a second, after the transitions.
  virtual void OnTick(int64_t /*now_ns*/, const PipelineHealth&) {}
};

// A sink made of functions, for callers that need one or two of the calls (the alert log,
// the recorder, tests). An empty function is skipped.
struct CallbackSink final : RecordSink {
  std::function<void(const RequestRecord&)> request;
  std::function<void(const EtcdRequest&)> etcd;
  std::function<void(const StormTransition&)> transition;

  void OnRequest(const RequestRecord& r) override {
    if (request) request(r);
  }
  void OnEtcdCall(const EtcdRequest& r) override {
    if (etcd) etcd(r);
  }
  void OnStormTransition(const StormTransition& t) override {
    if (transition) transition(t);
  }
};

}  // namespace stormwatch
