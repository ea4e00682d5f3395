// etcd Range storm detector (STORMS.md §7, storm "etcd_range_storm").
//
// etcd's side of a LIST storm: ObserveEtcd() counts /etcdserverpb.KV/Range calls per key
// prefix resource ("pods" for /registry/pods/; "" when unknown): calls, returned key and value
// bytes and latency per second, and which etcd clients made them. Range calls/s >= range_rate, or
// bytes/s >= bytes_rate, in each of sustain_s consecutive complete seconds fires; resolve_s
// consecutive seconds under both resolve.
//
// The cause is named from the apiserver side: Observe() records, per (client, resource), the
// consistent LISTs (no resourceVersion: read from etcd, not the watch cache) of each second.
// The evidence lists the top clients of the same seconds on the same resource (any resource
// for the "" key) and the storm's identity is the top one; without any, the etcd client.
// State is bounded: max_keys prefixes and max_list_clients (client, resource) keys, least
// recently seen dropped first (a firing prefix dropped is Resolved). Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/core/bounded_lru.h"
#include "agent/analysis/detector_config.h"
#include "agent/analysis/storm.h"
#include "agent/analysis/storm_lifecycle.h"
#include "agent/core/etcd_request.h"

namespace stormwatch {

inline constexpr char kEtcdRangeStormStorm[] = "etcd_range_storm";
inline constexpr char kEtcdRangeMethod[] = "/etcdserverpb.KV/Range";
inline constexpr char kEtcdRangeStormFix[] =
    "Consistent LISTs (no resourceVersion) bypass the watch cache and become etcd Range "
    "calls: make the clients named here use informers (LIST once + WATCH), "
    "resourceVersion=0 when they must poll, and limit=500 + continue for large lists.";

class EtcdRangeStormDetector final : public StormDetector {
 public:
  explicit EtcdRangeStormDetector(EtcdRangeStormConfig config = {});

  const char* storm() const override { return kEtcdRangeStormStorm; }
  // An apiserver request: consistent LISTs are remembered for correlation.
  void Observe(const RequestRecord& r, int64_t now_ns) override;
  // A call etcd served: only Range calls count; r.decoded names the key's resource when known,
  // r.identity the etcd client when known.
  void ObserveEtcd(const EtcdRequest& r, int64_t now_ns);
  std::vector<StormTransition> Evaluate(int64_t now_ns) override;
  std::vector<StormEvidence> Active() const override;
  DetectorStats Stats() const override;

 private:
  struct EtcdClient {
    Identity identity;
    SecondBuckets ranges;
  };
  struct Prefix {
    explicit Prefix(size_t ring) : ranges(ring), bytes(ring), latency_ns(ring) {}
    std::string resource;
    std::string key_prefix;  // as read: "/registry/pods/", "/registry/example.com/widgets/"
    SecondBuckets ranges;
    SecondBuckets bytes;
    SecondBuckets latency_ns;  // summed over the second's calls
    std::vector<EtcdClient> clients;  // a few at most
    StormAlert alert{ResolvedEvidence::kLatest};
  };
  struct ListClient {
    explicit ListClient(size_t ring) : lists(ring) {}
    IdentityRef identity;
    std::string resource;
    SecondBuckets lists;  // consistent LISTs per second

    // As a new entry of `r`'s client and resource, its ring kept (BoundedLru's reuse).
    void Reset(const RequestRecord& r) {
      identity = r.identity;
      resource.assign(r.info.resource);
      lists.Clear();
    }
  };

  bool Stormy(const Prefix& p, int64_t s) const;
  StormEvidence BuildEvidence(const Prefix& p, int64_t last, int64_t now_ns) const;

  EtcdRangeStormConfig config_;
  size_t ring_;
  BoundedLru<std::string, Prefix> prefixes_;
  BoundedLru<uint64_t, ListClient> list_clients_;  // by client and resource name
  EvictedAlerts evicted_;
  uint64_t observed_ = 0;
};

}  // namespace stormwatch
