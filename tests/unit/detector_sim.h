// Drives a storm detector on an injected clock for unit tests: feeds requests in time order and
// calls Evaluate at every whole second, as the agent's loop does. Also the identities and
// request streams the detector tests share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "agent/analysis/storm.h"
#include "agent/kube/query_shape.h"
#include "agent/kube/request_info.h"

namespace stormwatch::sim {

inline constexpr int64_t kSec = 1'000'000'000;
inline constexpr int64_t kMs = 1'000'000;

// A service account's identity, as a bound token names it.
inline Identity Sa(const std::string& ns, const std::string& name, const std::string& pod = "") {
  Identity id;
  id.kind = Identity::Kind::kServiceAccount;
  id.user = "system:serviceaccount:" + ns + ":" + name;
  id.sa_namespace = ns;
  id.sa_name = name;
  id.pod_name = pod;
  id.user_agent = name + "/v1.0";
  return id;
}

// A user's identity; the component is the user agent's product ("kubectl" of "kubectl/v1.28").
inline Identity User(const std::string& name, const std::string& user_agent = "",
                     const std::string& pod = "") {
  Identity id;
  id.kind = Identity::Kind::kUser;
  id.user = name;
  id.pod_name = pod;
  id.user_agent = user_agent;
  id.component = user_agent.substr(0, user_agent.find('/'));
  return id;
}

// A request as agent/kube would describe it, from its method and path with query.
inline RequestRecord Request(const Identity& who, const std::string& method,
                             const std::string& path_and_query, int status = 200) {
  RequestRecord r;
  r.method = method;
  r.path = path_and_query;
  r.status = status;
  r.info = ParseRequestInfo(method, path_and_query);
  r.shape = ParseQueryShape(r.info, path_and_query);
  r.identity = IdentityRef::Make(who);
  return r;
}

struct Event {
  int64_t t;  // when the request ends: the detector's now
  RequestRecord r;
};

// One copy of `r` every `period_ns` in [start_ns, end_ns).
inline std::vector<Event> Every(const RequestRecord& r, int64_t period_ns, int64_t start_ns,
                                int64_t end_ns) {
  std::vector<Event> out;
  for (int64_t t = start_ns; t < end_ns; t += period_ns) out.push_back({t, r});
  return out;
}

// `count` copies of `r` in every `period_s` seconds of [start_ns, end_ns), evenly spaced
// (integer arithmetic, so each period gets exactly `count`).
inline std::vector<Event> Stream(const RequestRecord& r, int64_t count, int64_t period_s,
                                 int64_t start_ns, int64_t end_ns) {
  std::vector<Event> out;
  for (int64_t k = 0;; ++k) {
    const int64_t t = start_ns + k * period_s * kSec / count;
    if (t >= end_ns) return out;
    out.push_back({t, r});
  }
}

// `n` copies of `r` in every second of [start_ns, end_ns), evenly spaced.
inline std::vector<Event> PerSecond(const RequestRecord& r, int64_t n, int64_t start_ns,
                                    int64_t end_ns) {
  return Stream(r, n, 1, start_ns, end_ns);
}

inline void Append(std::vector<Event>& all, std::vector<Event> more) {
  all.insert(all.end(), std::make_move_iterator(more.begin()),
             std::make_move_iterator(more.end()));
}

// Drives a StormDetector, or any detector with Observe(r, now), Evaluate(now) returning
// transitions and Active() (UpdateLoopDetector).
template <typename Detector>
class DetectorSim {
 public:
  using Transition = typename decltype(std::declval<Detector&>().Evaluate(0))::value_type;

  explicit DetectorSim(Detector& det) : det_(det) {}

  void Run(std::vector<Event> events, int64_t until_ns) {
    std::stable_sort(events.begin(), events.end(),
                     [](const Event& a, const Event& b) { return a.t < b.t; });
    for (const Event& e : events) {
      EvaluateUntil(e.t);
      det_.Observe(e.r, e.t);
    }
    EvaluateUntil(until_ns);
  }

  void EvaluateUntil(int64_t t) {
    for (; next_eval_ <= t; next_eval_ += kSec) {
      for (Transition& tr : det_.Evaluate(next_eval_)) transitions_.push_back(std::move(tr));
      active_at_[next_eval_ / kSec] = det_.Active().size();
    }
  }

  std::vector<Transition> Of(StormState state) const {
    std::vector<Transition> out;
    for (const Transition& t : transitions_) {
      if (t.state == state) out.push_back(t);
    }
    return out;
  }
  const std::vector<Transition>& transitions() const { return transitions_; }
  // Storms active right after the Evaluate at `second`.
  size_t ActiveAt(int64_t second) const {
    auto it = active_at_.find(second);
    return it == active_at_.end() ? 0 : it->second;
  }

 private:
  Detector& det_;
  int64_t next_eval_ = kSec;
  std::vector<Transition> transitions_;
  std::map<int64_t, size_t> active_at_;
};

// A detector built from its config and the simulation that drives it.
template <typename Detector>
struct Harness {
  using Config = std::decay_t<decltype(std::declval<const Detector&>().config())>;
  explicit Harness(Config config = {}) : det(std::move(config)), sim(det) {}
  Detector det;
  DetectorSim<Detector> sim;
};

}  // namespace stormwatch::sim
