// Drives a StormDetector on an injected clock for unit tests: feeds requests in time order and
// calls Evaluate at every whole second, as the agent's loop does.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "agent/analysis/storm.h"
#include "agent/kube/query_shape.h"
#include "agent/kube/request_info.h"

namespace stormwatch::sim {

inline constexpr int64_t kSec = 1'000'000'000;
inline constexpr int64_t kMs = 1'000'000;

// A request as agent/kube would describe it, from its method and path with query.
inline RequestRecord Request(const Identity& who, const std::string& method,
                             const std::string& path_and_query, int status = 200) {
  RequestRecord r;
  r.method = method;
  r.path = path_and_query;
  r.status = status;
  r.info = ParseRequestInfo(method, path_and_query);
  r.shape = ParseQueryShape(r.info, path_and_query);
  r.identity = who;
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

inline void Append(std::vector<Event>& all, std::vector<Event> more) {
  all.insert(all.end(), std::make_move_iterator(more.begin()),
             std::make_move_iterator(more.end()));
}

class DetectorSim {
 public:
  explicit DetectorSim(StormDetector& det) : det_(det) {}

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
      for (StormTransition& tr : det_.Evaluate(next_eval_)) transitions_.push_back(std::move(tr));
      active_at_[next_eval_ / kSec] = det_.Active().size();
    }
  }

  std::vector<StormTransition> Of(StormState state) const {
    std::vector<StormTransition> out;
    for (const StormTransition& t : transitions_) {
      if (t.state == state) out.push_back(t);
    }
    return out;
  }
  const std::vector<StormTransition>& transitions() const { return transitions_; }
  // Storms active right after the Evaluate at `second`.
  size_t ActiveAt(int64_t second) const {
    auto it = active_at_.find(second);
    return it == active_at_.end() ? 0 : it->second;
  }

 private:
  StormDetector& det_;
  int64_t next_eval_ = kSec;
  std::vector<StormTransition> transitions_;
  std::map<int64_t, size_t> active_at_;
};

}  // namespace stormwatch::sim
