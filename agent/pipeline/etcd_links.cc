#include "agent/pipeline/etcd_links.h"

namespace stormwatch {

void EtcdLinks::OnRange(const EtcdRequest& r) {
  seen_etcd_ = true;
  // A prefix read, or a read of the resource's root key itself: kube-apiserver's
  // GetCurrentResourceVersion (ConsistentListFromCache) gets "/registry/<resource>" with limit 1
  // for the revision, then answers from its cache. A read of one object is not a LIST's.
  if (r.request != EtcdMessage::kRangeRequest || r.decoded.resource.empty() ||
      (!r.decoded.prefix && !r.decoded.name.empty())) {
    return;
  }
  if (r.code != 0) return;
  ++stats_.ranges;
  Expire(r.end_ns);
  if (ranges_.size() >= kMaxRanges) {
    if (!ranges_.front().matched) ++stats_.ranges_dropped;
    ranges_.pop_front();
  }
  ranges_.push_back({r.start_ns, r.end_ns, r.decoded.resource, r.decoded.namespace_,
                     r.kvs < 0 ? 0 : r.kvs, r.kv_bytes, r.limit});
}

void EtcdLinks::Expire(uint64_t now_ns) {
  while (!ranges_.empty() && ranges_.front().end_ns + kKeepNs < now_ns) {
    if (!ranges_.front().matched) ++stats_.ranges_dropped;
    ranges_.pop_front();
  }
}

void EtcdLinks::Match(RequestRecord& r) {
  if (!seen_etcd_ || r.info.verb_kind != KubeVerb::kList ||
      r.shape.consistency != QueryShape::Consistency::kConsistent) {
    return;
  }
  ++stats_.lists;
  // A Range of the LIST's own namespace first; else one over the whole resource (a
  // cache-served consistent LIST reads the resource's current revision, whatever its namespace).
  // The buffer is in end-time order: only the Ranges that ended while the LIST ran are looked
  // at, newest first, and of the candidates the earliest is taken.
  Range* best[2] = {nullptr, nullptr};
  for (auto it = ranges_.rbegin(); it != ranges_.rend() && it->end_ns >= r.start_ns; ++it) {
    Range& range = *it;
    if (range.matched || range.end_ns > r.end_ns || range.start_ns < r.start_ns ||
        range.resource != r.info.resource) {
      continue;
    }
    if (range.namespace_ == r.info.namespace_) {
      best[0] = &range;
    } else if (range.namespace_.empty()) {
      best[1] = &range;
    }
  }
  Range* range = best[0] ? best[0] : best[1];
  if (!range) return;
  range->matched = true;
  r.etcd = {1, range->keys, range->bytes, range->limit};
  ++stats_.lists_matched;
}

}  // namespace stormwatch
