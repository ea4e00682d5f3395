// Which etcd Range a consistent LIST caused. kube-apiserver serves a LIST without
// resourceVersion by reading etcd (a Range over the resource's prefix, or, with
// ConsistentListFromCache, a 1-key Range for the current revision before answering from its
// cache), on the same node when etcd is stacked as kubeadm runs it. A LIST and a Range match
// when the Range is a prefix read of the same resource (by name: etcd keys of built-ins carry no
// group) and namespace (or of the whole resource: the current-revision read is not namespaced),
// and lies inside the LIST in time (both clocks are the node's
// CLOCK_MONOTONIC): the Range started after the LIST's headers were decoded and returned before
// its handler finished. Of several candidates the earliest unmatched one is taken, so concurrent
// LISTs of one resource may swap their Ranges (they are the same shape); the counts are exact.
// Bounded: Ranges older than kKeepNs or beyond kMaxRanges are dropped unmatched.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "agent/core/etcd_request.h"
#include "agent/core/request_record.h"

namespace stormwatch {

struct EtcdLinkStats {
  uint64_t lists = 0;          // consistent LISTs seen while etcd calls were being seen
  uint64_t lists_matched = 0;  // of them, matched to a Range
  uint64_t ranges = 0;         // prefix Ranges seen
  uint64_t ranges_dropped = 0; // dropped unmatched (too old, or the buffer full)
};

class EtcdLinks {
 public:
  static constexpr uint64_t kKeepNs = 120'000'000'000;  // a LIST may take minutes; keep 2 min
  static constexpr size_t kMaxRanges = 16384;

  void OnRange(const EtcdRequest& r);
  // Fills r.etcd for a consistent LIST whose Range is buffered.
  void Match(RequestRecord& r);
  const EtcdLinkStats& stats() const { return stats_; }

 private:
  struct Range {
    uint64_t start_ns, end_ns;
    std::string resource, namespace_;
    int64_t keys;
    uint64_t bytes;
    int64_t limit;
    bool matched = false;
  };
  void Expire(uint64_t now_ns);

  std::deque<Range> ranges_;  // by end time
  bool seen_etcd_ = false;
  EtcdLinkStats stats_;
};

}  // namespace stormwatch
