#include "agent/analysis/throttled_client_detector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "agent/kube/record_keys.h"

namespace stormwatch {
namespace {

constexpr size_t kMaxResourcesPerClient = 8;
constexpr size_t kTopResources = 3;

double Round2(double v) { return std::round(v * 100) / 100; }

}  // namespace

double FlatClientGoLimit(const SecondBuckets& counts, int64_t last, int seconds,
                         double tolerance) {
  if (seconds < 1 || seconds > static_cast<int>(counts.seconds())) return 0;
  for (double limit : kClientGoQpsLimits) {
    bool flat = true;
    for (int i = 0; i < seconds && flat; ++i) {
      flat = std::abs(counts.At(last - i) - limit) <= tolerance * limit;
    }
    if (flat) return limit;
  }
  return 0;
}

ThrottledClientDetector::ThrottledClientDetector(ThrottledClientConfig config)
    : config_(std::move(config)), ring_(0), clients_(config_.max_clients, Recency::kApproximate) {
  if (!(config_.throttled_rate > 0)) config_.throttled_rate = ThrottledClientConfig{}.throttled_rate;
  config_.sustain_s = std::max(config_.sustain_s, 1);
  config_.resolve_s = std::max(config_.resolve_s, 1);
  // +1: the second in progress occupies a slot besides the complete ones looked at.
  ring_ = static_cast<size_t>(std::max(config_.sustain_s, config_.resolve_s)) + 1;
  window_ring_ = static_cast<size_t>(config_.sustain_s) + 1;
}

void ThrottledClientDetector::CountResource(Client& c, const RequestRecord& r,
                                            int64_t now_ns) const {
  auto same = [&](const ResourceThrottles& t) {
    return t.api_group == r.info.api_group && t.resource == r.info.resource;
  };
  const auto used = c.resources.begin() + static_cast<ptrdiff_t>(c.resources_used);
  auto it = std::find_if(c.resources.begin(), used, same);
  if (it == used) {
    if (c.resources_used < kMaxResourcesPerClient) {
      if (c.resources_used == c.resources.size()) {
        c.resources.push_back({"", "", SecondBuckets(window_ring_)});
      }
      it = c.resources.begin() + static_cast<ptrdiff_t>(c.resources_used++);
    } else {
      // Full: the resource with the fewest recent 429s makes room.
      const int64_t last = now_ns / kNsPerSecond;
      const int window = static_cast<int>(window_ring_);
      it = std::min_element(c.resources.begin(), used,
                            [&](const ResourceThrottles& a, const ResourceThrottles& b) {
                              return a.throttled.Sum(last, window) < b.throttled.Sum(last, window);
                            });
    }
    // A slot taken over keeps its buffers.
    it->api_group.assign(r.info.api_group);
    it->resource.assign(r.info.resource);
    it->throttled.Clear();
  }
  it->throttled.Add(now_ns);
}

void ThrottledClientDetector::Observe(const RequestRecord& r, int64_t now_ns) {
  if (config_.allow.Allows(r.identity->user)) return;
  ++observed_;
  const uint64_t key = KeysOf(r).client;
  const int64_t now_s = now_ns / kNsPerSecond;
  // A 429 begins tracking; another answer counts only for a client already tracked.
  Client* tracked = clients_.Touch(key);
  if (tracked == nullptr) {
    if (r.status != 429) return;
    tracked = &clients_.FindOrInsert(
        key,
        [&] {
          Client fresh(ring_, window_ring_);
          fresh.Reset(r.identity, now_s);
          return fresh;
        },
        [&](uint64_t, Client& victim) { evicted_.Evict(victim.alert, now_ns); },
        [&](Client& reused) { reused.Reset(r.identity, now_s); });
  }
  Client& c = *tracked;
  KeepLatestIdentity(c.identity, r);
  c.requests.Add(now_ns);
  if (!r.response.priority_level.empty()) c.priority_level = r.response.priority_level;
  if (!r.response.flow_schema.empty()) c.flow_schema = r.response.flow_schema;
  if (r.status != 429) return;

  c.throttled.Add(now_ns);
  CountResource(c, r, now_ns);
  if (now_s - c.last_throttled_s >= static_cast<int64_t>(ring_)) {
    c.retry_after_min_s = c.retry_after_max_s = -1;  // a new run of 429s
  }
  c.last_throttled_s = std::max(c.last_throttled_s, now_s);
  if (const int ra = r.response.retry_after_s; ra >= 0) {
    c.retry_after_min_s = c.retry_after_min_s < 0 ? ra : std::min(c.retry_after_min_s, ra);
    c.retry_after_max_s = std::max(c.retry_after_max_s, ra);
  }
}

StormEvidence ThrottledClientDetector::BuildEvidence(const Client& c, int64_t last,
                                                     int64_t now_ns) const {
  const int window = config_.sustain_s;
  const double throttled = c.throttled.Sum(last, window) / window;
  // The request rate over the window's seconds the client was tracked for whole: the second
  // of its first 429 misses the requests before it (counted alone only when there is no other).
  const int64_t whole_seconds = last - c.tracked_since_s;
  const int rate_window = static_cast<int>(std::clamp<int64_t>(whole_seconds, 1, window));
  const double requests = c.requests.Sum(last, rate_window) / rate_window;
  const double limit =
      whole_seconds >= 1 ? FlatClientGoLimit(c.requests, last, rate_window, config_.flat_tolerance)
                         : 0;

  std::vector<std::pair<double, const ResourceThrottles*>> top;
  for (const ResourceThrottles& t : Resources(c)) {
    if (double n = t.throttled.Sum(last, window); n > 0) top.emplace_back(n, &t);
  }
  std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first > b.first;
    return a.second->resource < b.second->resource;
  });
  if (top.size() > kTopResources) top.resize(kTopResources);
  nlohmann::json top_json = nlohmann::json::array();
  for (const auto& [n, t] : top) {
    top_json.push_back({{"group", t->api_group}, {"resource", t->resource},
                        {"throttled_per_second", Round2(n / window)}});
  }

  StormEvidence e;
  e.storm = kThrottledClientStorm;
  e.identity = *c.identity;
  e.fix = kThrottledClientFix;
  e.fired_ns = now_ns;
  e.details = {{"throttled_per_second", Round2(throttled)},
               {"requests_per_second", Round2(requests)},
               {"window_s", window},
               {"requests_window_s", rate_window},
               {"retry_after_min_s", c.retry_after_min_s},
               {"retry_after_max_s", c.retry_after_max_s},
               {"priority_level", c.priority_level},
               {"flow_schema", c.flow_schema},
               {"top_resources", top_json},
               {"client_side_limit", limit > 0},
               {"client_side_limit_qps", limit}};
  char figures[160];
  std::snprintf(figures, sizeof(figures), "%.1f 429s/s of %.1f requests/s", throttled, requests);
  e.summary = "client " + (c.identity->user.empty() ? std::string("unknown") : c.identity->user) +
              " is throttled by the API server (" + figures +
              (c.priority_level.empty() ? "" : ", priority level " + c.priority_level) + ")";
  if (limit > 0) {
    std::snprintf(figures, sizeof(figures), "%.0f", limit);
    e.summary += " and pinned at its own client-go limit of " + std::string(figures) + " QPS";
  }
  return e;
}

std::vector<StormTransition> ThrottledClientDetector::Evaluate(int64_t now_ns) {
  std::vector<StormTransition> out = evicted_.Take();
  const int64_t last = now_ns / kNsPerSecond - 1;  // newest complete second
  const int limit = static_cast<int>(ring_) - 1;
  for (auto& entry : clients_) {
    [[maybe_unused]] const auto& key = entry.first;  // not a structured binding: lambdas capture it (clang 14)
    auto& c = entry.second;
    auto throttled_at = [&](int64_t s) { return c.throttled.At(s) >= config_.throttled_rate; };
    if (!c.alert.firing()) {
      if (!c.throttled.EachAtLeast(last, config_.sustain_s, config_.throttled_rate)) continue;
      const int64_t since = last - TrailingRun(last, limit, throttled_at) + 1;
      out.push_back(c.alert.Fire(BuildEvidence(c, last, now_ns), since * kNsPerSecond, now_ns));
    } else if (HeldFor(last, config_.resolve_s, [&](int64_t s) { return !throttled_at(s); })) {
      out.push_back(c.alert.Resolve(now_ns));
    } else {
      c.alert.Refresh(BuildEvidence(c, last, now_ns));
    }
  }
  return out;
}

std::vector<StormEvidence> ThrottledClientDetector::Active() const {
  return ActiveEvidence(clients_, &Client::alert);
}

DetectorStats ThrottledClientDetector::Stats() const {
  return {observed_, clients_.evictions(), clients_.size()};
}

}  // namespace stormwatch
