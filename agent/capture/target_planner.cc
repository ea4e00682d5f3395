#include "agent/capture/target_planner.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>

namespace stormwatch {

TargetPlanner::TargetPlanner(PlanFunction plan)
    : plan_(std::move(plan)), worker_([this] { Run(); }) {}

TargetPlanner::~TargetPlanner() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    queue_.clear();
    if (running_) running_->cancelled->store(true);
  }
  wake_.notify_all();
  worker_.join();
}

void TargetPlanner::Submit(const TargetProcess& process) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(Job{process});
  }
  wake_.notify_one();
}

void TargetPlanner::Cancel(pid_t pid) {
  std::lock_guard lock(mu_);
  std::erase_if(queue_, [&](const Job& j) { return j.process.pid == pid; });
  if (running_ && running_->process.pid == pid) running_->cancelled->store(true);
  std::erase_if(results_, [&](const Result& r) { return r.process.pid == pid; });
}

std::vector<TargetPlanner::Result> TargetPlanner::TakeResults() {
  std::lock_guard lock(mu_);
  return std::exchange(results_, {});
}

size_t TargetPlanner::pending() const {
  std::lock_guard lock(mu_);
  return queue_.size() + (running_ ? 1 : 0);
}

void TargetPlanner::Run() {
  // Planning can wait; the drain cannot: on a busy node this thread gives the CPU to the main
  // loop first (Linux nice is per thread). Best effort: at worst it plans at the loop's priority.
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kNice);
  std::unique_lock lock(mu_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    running_ = std::move(queue_.front());
    queue_.pop_front();
    // The job's own copies: Cancel may flag it while the lock is released.
    TargetProcess process = running_->process;
    std::shared_ptr<std::atomic<bool>> cancelled = running_->cancelled;
    lock.unlock();
    auto start = std::chrono::steady_clock::now();
    GoHttp2ProbePlan plan = plan_(process, *cancelled);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    lock.lock();
    running_.reset();
    if (!cancelled->load()) results_.push_back({std::move(process), std::move(plan), seconds});
  }
}

}  // namespace stormwatch
