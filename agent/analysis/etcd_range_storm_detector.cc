#include "agent/analysis/etcd_range_storm_detector.h"

#include "agent/kube/record_keys.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>
#include <utility>

namespace stormwatch {
namespace {

constexpr char kSep = '\x1f';  // cannot occur in names, users or resources
constexpr size_t kMaxEtcdClientsPerPrefix = 4;
constexpr size_t kTopListClients = 3;

double Round2(double v) { return std::round(v * 100) / 100; }

}  // namespace

EtcdRangeStormDetector::EtcdRangeStormDetector(EtcdRangeStormConfig config)
    : config_(std::move(config)),
      ring_(0),
      prefixes_(config_.max_keys, Recency::kApproximate),
      list_clients_(config_.max_list_clients, Recency::kApproximate) {
  const EtcdRangeStormConfig defaults;
  if (!(config_.range_rate > 0)) config_.range_rate = defaults.range_rate;
  if (!(config_.bytes_rate > 0)) config_.bytes_rate = defaults.bytes_rate;
  config_.sustain_s = std::max(config_.sustain_s, 1);
  config_.resolve_s = std::max(config_.resolve_s, 1);
  // +1: the second in progress occupies a slot besides the complete ones looked at.
  ring_ = static_cast<size_t>(std::max(config_.sustain_s, config_.resolve_s)) + 1;
}

void EtcdRangeStormDetector::Observe(const RequestRecord& r, int64_t now_ns) {
  if (r.info.verb_kind != KubeVerb::kList ||
      r.shape.consistency != QueryShape::Consistency::kConsistent) {
    return;
  }
  if (config_.allow.Allows(r.identity->user)) return;
  ++observed_;
  // By resource name only: etcd's key prefixes carry no API group.
  ListClient& c = list_clients_.FindOrInsert(
      CombineKeys(KeysOf(r).client, HashFields({r.info.resource})),
      [&] {
        ListClient fresh(static_cast<size_t>(config_.sustain_s) + 1);
        fresh.Reset(r);
        return fresh;
      },
      [](uint64_t, ListClient&) {}, [&](ListClient& reused) { reused.Reset(r); });
  c.lists.Add(now_ns);
}

void EtcdRangeStormDetector::ObserveEtcd(const EtcdRequest& r, int64_t now_ns) {
  if (r.method != kEtcdRangeMethod) return;
  if (config_.allow.Allows(r.identity.user)) return;
  ++observed_;
  const std::string& resource = r.decoded.resource;
  Prefix& p = prefixes_.FindOrInsert(
      resource,
      [&] {
        Prefix fresh(ring_);
        fresh.resource = resource;
        return fresh;
      },
      [&](const std::string&, Prefix& victim) { evicted_.Evict(victim.alert, now_ns); });
  if (p.key_prefix.empty()) p.key_prefix = r.decoded.key_prefix;
  p.ranges.Add(now_ns);
  p.bytes.Add(now_ns, static_cast<double>(r.kv_bytes));
  if (r.end_ns >= r.start_ns) p.latency_ns.Add(now_ns, static_cast<double>(r.end_ns - r.start_ns));

  auto it = std::find_if(p.clients.begin(), p.clients.end(), [&](const EtcdClient& c) {
    return c.identity.user == r.identity.user;
  });
  if (it == p.clients.end()) {
    if (p.clients.size() < kMaxEtcdClientsPerPrefix) {
      p.clients.push_back({r.identity, SecondBuckets(ring_)});
      it = p.clients.end() - 1;
    } else {
      // Full: the client with the fewest recent calls makes room.
      const int64_t s = now_ns / kNsPerSecond;
      const int window = static_cast<int>(ring_);
      it = std::min_element(p.clients.begin(), p.clients.end(),
                            [&](const EtcdClient& a, const EtcdClient& b) {
                              return a.ranges.Sum(s, window) < b.ranges.Sum(s, window);
                            });
      *it = {r.identity, SecondBuckets(ring_)};
    }
  }
  it->ranges.Add(now_ns);
}

bool EtcdRangeStormDetector::Stormy(const Prefix& p, int64_t s) const {
  return p.ranges.At(s) >= config_.range_rate || p.bytes.At(s) >= config_.bytes_rate;
}

StormEvidence EtcdRangeStormDetector::BuildEvidence(const Prefix& p, int64_t last,
                                                    int64_t now_ns) const {
  const int n = config_.sustain_s;
  const double ranges = p.ranges.Sum(last, n);
  const double bytes = p.bytes.Sum(last, n);
  const double mean_latency_ms = ranges > 0 ? p.latency_ns.Sum(last, n) / ranges / 1e6 : 0;

  const EtcdClient* etcd_client = nullptr;
  double etcd_client_ranges = 0;
  for (const EtcdClient& c : p.clients) {
    if (double calls = c.ranges.Sum(last, n); !etcd_client || calls > etcd_client_ranges) {
      etcd_client = &c;
      etcd_client_ranges = calls;
    }
  }

  // The apiserver clients whose consistent LISTs of the same seconds read this prefix.
  struct Cause {
    const Identity* identity = nullptr;
    std::string resources;
    double lists = 0;
  };
  std::unordered_map<std::string, Cause> causes;
  for (const auto& [key, c] : list_clients_) {
    if (!p.resource.empty() && c.resource != p.resource) continue;
    const double lists = c.lists.Sum(last, n);
    if (lists <= 0) continue;
    Cause& cause = causes[c.identity->user + kSep + c.identity->pod_name];
    cause.identity = c.identity.get();
    cause.resources.append(cause.resources.empty() ? "" : ",").append(c.resource);
    cause.lists += lists;
  }
  std::vector<const Cause*> top;
  for (const auto& [key, cause] : causes) top.push_back(&cause);
  std::sort(top.begin(), top.end(), [](const Cause* a, const Cause* b) {
    if (a->lists != b->lists) return a->lists > b->lists;
    if (a->identity->user != b->identity->user) return a->identity->user < b->identity->user;
    return a->identity->pod_name < b->identity->pod_name;
  });
  if (top.size() > kTopListClients) top.resize(kTopListClients);
  nlohmann::json clients = nlohmann::json::array();
  for (const Cause* c : top) {
    clients.push_back({{"client", c->identity->user},
                       {"pod", c->identity->pod_name},
                       {"user_agent", c->identity->user_agent},
                       {"resources", c->resources},
                       {"consistent_lists", c->lists},
                       {"consistent_lists_per_second", Round2(c->lists / n)}});
  }

  StormEvidence ev;
  ev.storm = kEtcdRangeStormStorm;
  if (!top.empty()) {
    ev.identity = *top.front()->identity;
  } else if (etcd_client) {
    ev.identity = etcd_client->identity;
  }
  ev.resource = p.resource;
  ev.fix = kEtcdRangeStormFix;
  ev.fired_ns = now_ns;
  const std::string& prefix = p.key_prefix;
  ev.details = {{"ranges_per_second", Round2(ranges / n)},
                {"bytes_per_second", Round2(bytes / n)},
                {"mean_latency_ms", Round2(mean_latency_ms)},
                {"window_s", n},
                {"key_prefix", prefix},
                {"etcd_client", etcd_client ? etcd_client->identity.user : std::string()},
                {"correlated_list_clients", clients}};
  char figures[128];
  std::snprintf(figures, sizeof(figures), "%.0f Range/s, %.1f MiB/s, mean %.1f ms", ranges / n,
                bytes / n / (1024 * 1024), mean_latency_ms);
  ev.summary = std::string("etcd Range storm on ") +
               (prefix.empty() ? std::string("unknown keys") : prefix) + " (" + figures + ")";
  if (!top.empty()) {
    std::snprintf(figures, sizeof(figures), "%.1f", top.front()->lists / n);
    ev.summary += "; caused by consistent LISTs from " + top.front()->identity->user + " (" +
                  figures + "/s)";
  }
  return ev;
}

std::vector<StormTransition> EtcdRangeStormDetector::Evaluate(int64_t now_ns) {
  std::vector<StormTransition> out = evicted_.Take();
  const int64_t last = now_ns / kNsPerSecond - 1;  // newest complete second
  const int limit = static_cast<int>(ring_) - 1;
  for (auto& entry : prefixes_) {
    [[maybe_unused]] const auto& key = entry.first;  // not a structured binding: lambdas capture it (clang 14)
    auto& p = entry.second;
    auto stormy = [&](int64_t s) { return Stormy(p, s); };
    if (!p.alert.firing()) {
      const int run = TrailingRun(last, limit, stormy);
      if (run < config_.sustain_s) continue;
      out.push_back(
          p.alert.Fire(BuildEvidence(p, last, now_ns), (last - run + 1) * kNsPerSecond, now_ns));
    } else if (HeldFor(last, config_.resolve_s, [&](int64_t s) { return !stormy(s); })) {
      out.push_back(p.alert.Resolve(now_ns));
    } else {
      p.alert.Refresh(BuildEvidence(p, last, now_ns));
    }
  }
  return out;
}

std::vector<StormEvidence> EtcdRangeStormDetector::Active() const {
  return ActiveEvidence(prefixes_, &Prefix::alert);
}

DetectorStats EtcdRangeStormDetector::Stats() const {
  return {observed_, prefixes_.evictions() + list_clients_.evictions(),
          prefixes_.size() + list_clients_.size()};
}

}  // namespace stormwatch
