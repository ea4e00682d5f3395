// Plans targets on a thread of its own. Planning reads a target's Go binary (ELF, .gopclntab,
// the runtime type data, probe sites: 0.1-0.2 s for the 78 MB apiextensions-apiserver here,
// more for a bigger binary or on a busy node); the main loop, which drains the ring buffer every
// 10 ms, only hands processes in and takes finished plans out. One worker, plans in submission
// order.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "agent/capture/target_discovery.h"
#include "agent/capture/target_manager.h"

namespace stormwatch {

class TargetPlanner {
 public:
  using PlanFunction = TargetPlanFunction;

  struct Result {
    TargetProcess process;  // as submitted: who the plan was made for
    GoHttp2ProbePlan plan;
    double seconds = 0;     // wall time the plan took (not the time it waited in the queue)
  };

  explicit TargetPlanner(PlanFunction plan);
  // Cancels the plan in progress and joins the worker: waits for that plan's current phase
  // only, never for the queue.
  ~TargetPlanner();
  TargetPlanner(const TargetPlanner&) = delete;
  TargetPlanner& operator=(const TargetPlanner&) = delete;

  void Submit(const TargetProcess& process);
  // Forgets every queued or running plan of `pid`: none of their results will be returned.
  void Cancel(pid_t pid);
  // The plans finished since the last call, in the order they finished. Never blocks on a plan.
  std::vector<Result> TakeResults();
  // Plans queued or running (results not taken yet are not counted).
  size_t pending() const;

  static constexpr int kNice = 10;  // the worker thread's nice value (the main loop keeps its own)

 private:
  struct Job {
    TargetProcess process;
    std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  };
  void Run();

  PlanFunction plan_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Job> queue_;
  std::optional<Job> running_;
  std::vector<Result> results_;
  bool stopping_ = false;
  std::thread worker_;  // last: started once everything above exists
};

}  // namespace stormwatch
