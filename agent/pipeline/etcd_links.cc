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
  if (!seen_etcd_ || r.info.verb != "list" || r.shape.consistency != QueryShape::Consistency::kConsistent) {
    return;
  }
  ++stats_.lists;
  // A Range of the LIST's own namespace first; else one over the whole resource (a
  // cache-served consistent LIST reads the resource's current revision, whatever its namespace).
  for (bool whole_resource : {false, true}) {
    for (Range& range : ranges_) {
      if (range.matched || range.start_ns < r.start_ns || range.end_ns > r.end_ns ||
          range.resource != r.info.resource ||
          range.namespace_ != (whole_resource ? std::string() : r.info.namespace_)) {
        continue;
      }
      range.matched = true;
      r.etcd = {1, range.keys, range.bytes, range.limit};
      ++stats_.lists_matched;
      return;
    }
  }
}

}  // namespace stormwatch
