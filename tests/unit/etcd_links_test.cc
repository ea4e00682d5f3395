// Consistent LISTs matched to the etcd Ranges they caused: same resource and namespace, the
// Range inside the LIST in time, each Range used once; everything else left unmatched.
#include "agent/pipeline/etcd_links.h"

#include <gtest/gtest.h>

namespace stormwatch {
namespace {

EtcdRequest Range(uint64_t start, uint64_t end, const std::string& resource, const std::string& ns,
                  int64_t kvs, uint64_t bytes, int code = 0) {
  EtcdRequest r;
  r.method = "/etcdserverpb.KV/Range";
  r.request = EtcdMessage::kRangeRequest;
  r.start_ns = start;
  r.end_ns = end;
  r.decoded.registry = r.decoded.prefix = true;
  r.decoded.resource = resource;
  r.decoded.namespace_ = ns;
  r.kvs = kvs;
  r.kv_bytes = bytes;
  r.code = code;
  return r;
}

RequestRecord List(uint64_t start, uint64_t end, const std::string& resource, const std::string& ns,
                   QueryShape::Consistency c = QueryShape::Consistency::kConsistent) {
  RequestRecord r;
  r.start_ns = start;
  r.end_ns = end;
  r.info.verb = "list";
  r.info.verb_kind = KubeVerb::kList;
  r.info.resource = resource;
  r.info.namespace_ = ns;
  r.shape.consistency = c;
  return r;
}

TEST(EtcdLinks, EachConsistentListGetsTheRangeItCaused) {
  EtcdLinks links;
  links.OnRange(Range(110, 190, "pods", "", 500, 1'000'000));
  links.OnRange(Range(120, 150, "pods", "kube-system", 20, 40'000));
  links.OnRange(Range(130, 160, "configmaps", "", 7, 700));
  links.OnRange(Range(130, 160, "pods", "", 1, 10, /*code=*/11));  // failed: never a match

  RequestRecord all = List(100, 200, "pods", "");
  links.Match(all);
  EXPECT_EQ(all.etcd.ranges, 1u);
  EXPECT_EQ(all.etcd.keys, 500);
  EXPECT_EQ(all.etcd.bytes, 1'000'000u);
  // The same Range is not matched twice.
  RequestRecord again = List(100, 200, "pods", "");
  links.Match(again);
  EXPECT_EQ(again.etcd.ranges, 0u);
  // A namespace's LIST takes the namespace's Range; one from the watch cache takes none.
  RequestRecord ns = List(100, 200, "pods", "kube-system");
  links.Match(ns);
  EXPECT_EQ(ns.etcd.keys, 20);
  RequestRecord cached = List(100, 200, "configmaps", "", QueryShape::Consistency::kAny);
  links.Match(cached);
  EXPECT_EQ(cached.etcd.ranges, 0u);
  // A LIST that ended before the Range did is not its cause.
  RequestRecord early = List(100, 155, "configmaps", "");
  links.Match(early);
  EXPECT_EQ(early.etcd.ranges, 0u);
  RequestRecord late = List(100, 170, "configmaps", "");
  links.Match(late);
  EXPECT_EQ(late.etcd.keys, 7);
  // A namespaced LIST served from the cache reads the whole resource's current revision.
  EtcdRequest root = Range(310, 320, "secrets", "", 0, 0);
  root.decoded.prefix = false;  // "/registry/secrets", limit 1: the current revision only
  links.OnRange(root);
  EtcdRequest one = Range(311, 319, "secrets", "default", 1, 60);
  one.decoded.prefix = false;
  one.decoded.name = "token";  // a GET's read: no LIST's
  links.OnRange(one);
  RequestRecord in_ns = List(300, 330, "secrets", "default");
  links.Match(in_ns);
  EXPECT_EQ(in_ns.etcd.ranges, 1u);
  EXPECT_EQ(in_ns.etcd.keys, 0);
  EXPECT_EQ(links.stats().lists, 6u);  // the cached one is not consistent
  EXPECT_EQ(links.stats().lists_matched, 4u);
  EXPECT_EQ(links.stats().ranges, 4u);
}

TEST(EtcdLinks, BoundedAndExpired) {
  EtcdLinks links;
  for (size_t i = 0; i < EtcdLinks::kMaxRanges + 10; ++i) links.OnRange(Range(i, i + 1, "pods", "", 1, 1));
  EXPECT_EQ(links.stats().ranges_dropped, 10u);
  links.OnRange(Range(EtcdLinks::kKeepNs * 2, EtcdLinks::kKeepNs * 2 + 1, "pods", "", 1, 1));
  EXPECT_EQ(links.stats().ranges_dropped, EtcdLinks::kMaxRanges + 10);
  RequestRecord list = List(0, 100, "pods", "");
  links.Match(list);
  EXPECT_EQ(list.etcd.ranges, 0u);
}

}  // namespace
}  // namespace stormwatch
