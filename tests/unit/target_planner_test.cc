// Targets are planned off the main loop (agent/capture/target_planner.cc) and attached by
// TargetManager::Collect: the planner's queue, cancellation and shutdown, and the manager's
// bookkeeping while a plan is in progress (readiness, a target that exits, a binary that
// changes). The manager runs on a process table and plans of the test's own, so no BPF and no
// privileges: every plan is refused (missing_field), which takes the same path to
// stormwatch_target_info as an attach. The real planner on a real binary is the last test.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "agent/capture/target_manager.h"
#include "agent/capture/target_planner.h"

namespace stormwatch {
namespace {

using namespace std::chrono_literals;

TargetProcess Process(pid_t pid, uint64_t inode, std::string name = "kube-apiserver") {
  TargetProcess p;
  p.pid = pid;
  p.name = std::move(name);
  p.exe_path = "/proc/" + std::to_string(pid) + "/exe";
  p.dev = 2049;
  p.inode = inode;
  p.start_time = 1000 + pid;
  return p;
}

// Polls `done` for up to 5 s (the planner is another thread).
template <typename F>
bool Eventually(F done) {
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// A plan function the test holds at a gate: each call is recorded, waits until the gate opens
// or its plan is cancelled, and returns a refusal naming the inode it planned.
class GatedPlans {
 public:
  struct Call {
    TargetProcess process;
    std::thread::id thread;
    int nice = 0;
    bool saw_cancel = false;
  };

  TargetPlanFunction Function() {
    return [this](const TargetProcess& p, const std::atomic<bool>& cancelled) {
      std::unique_lock lock(mu_);
      size_t i = calls_.size();
      errno = 0;
      int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
      calls_.push_back({p, std::this_thread::get_id(), errno ? -100 : nice});
      // Cancellation is a flag, as the real planner polls it between phases.
      auto give_up = std::chrono::steady_clock::now() + 10s;
      while (!open_ && !cancelled.load() && std::chrono::steady_clock::now() < give_up) {
        changed_.wait_for(lock, 1ms);
      }
      calls_[i].saw_cancel = cancelled.load();
      ++finished_;
      GoHttp2ProbePlan plan;
      plan.go_version = "go1.26.2";
      plan.failure = AttachFailure::kMissingField;
      plan.problem = "planned inode " + std::to_string(p.inode);
      return plan;
    };
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    changed_.notify_all();
  }
  std::vector<Call> calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }
  bool WaitForCalls(size_t n) {
    return Eventually([&] { return calls().size() >= n; });
  }
  // Until `n` plans have returned (their results follow within microseconds).
  bool WaitForFinished(size_t n) {
    return Eventually([&] {
      std::lock_guard lock(mu_);
      return finished_ >= n;
    });
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  bool open_ = false;
  size_t finished_ = 0;
  std::vector<Call> calls_;
};

std::vector<pid_t> Pids(const std::vector<TargetPlanner::Result>& results) {
  std::vector<pid_t> out;
  for (const auto& r : results) out.push_back(r.process.pid);
  return out;
}

TEST(TargetPlannerTest, PlansInOrderOnItsOwnThread) {
  GatedPlans plans;
  TargetPlanner planner(plans.Function());
  planner.Submit(Process(1, 100));
  planner.Submit(Process(2, 200));
  ASSERT_TRUE(plans.WaitForCalls(1));
  EXPECT_EQ(planner.pending(), 2u);
  EXPECT_TRUE(planner.TakeResults().empty());  // nothing waits for the plan in progress
  std::this_thread::sleep_for(200ms);
  plans.Open();
  std::vector<TargetPlanner::Result> results;
  ASSERT_TRUE(Eventually([&] {
    for (auto& r : planner.TakeResults()) results.push_back(std::move(r));
    return results.size() == 2;
  }));
  EXPECT_EQ(Pids(results), (std::vector<pid_t>{1, 2}));
  EXPECT_EQ(results[0].plan.problem, "planned inode 100");
  EXPECT_EQ(results[1].plan.problem, "planned inode 200");
  EXPECT_GE(results[0].seconds, 0.2);  // held 200 ms at the gate
  EXPECT_LT(results[1].seconds, 0.2);  // its 200 ms in the queue are not planning time
  EXPECT_EQ(planner.pending(), 0u);
  auto calls = plans.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_NE(calls[0].thread, std::this_thread::get_id());
  EXPECT_EQ(calls[0].thread, calls[1].thread);  // one worker
  EXPECT_EQ(calls[0].nice, TargetPlanner::kNice);  // yields the CPU to the drain
}

TEST(TargetPlannerTest, CancelDropsQueuedAndRunningPlans) {
  GatedPlans plans;
  TargetPlanner planner(plans.Function());
  planner.Submit(Process(1, 100));
  planner.Submit(Process(2, 200));
  planner.Submit(Process(3, 300));
  ASSERT_TRUE(plans.WaitForCalls(1));
  planner.Cancel(1);  // running: told to stop, its result dropped
  planner.Cancel(2);  // queued: never planned
  ASSERT_TRUE(plans.WaitForCalls(2));
  plans.Open();
  std::vector<TargetPlanner::Result> results;
  ASSERT_TRUE(Eventually([&] {
    for (auto& r : planner.TakeResults()) results.push_back(std::move(r));
    return planner.pending() == 0 && !results.empty();
  }));
  EXPECT_EQ(Pids(results), (std::vector<pid_t>{3}));
  auto calls = plans.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].process.pid, 1);
  EXPECT_TRUE(calls[0].saw_cancel);
  EXPECT_EQ(calls[1].process.pid, 3);
  EXPECT_FALSE(calls[1].saw_cancel);
}

TEST(TargetPlannerTest, DestructionCancelsThePlanInProgressAndSkipsTheQueue) {
  GatedPlans plans;
  auto planner = std::make_unique<TargetPlanner>(plans.Function());
  planner->Submit(Process(1, 100));
  planner->Submit(Process(2, 200));
  ASSERT_TRUE(plans.WaitForCalls(1));
  auto start = std::chrono::steady_clock::now();
  planner.reset();  // the gate never opens: only the cancellation ends the plan (else 10 s)
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  auto calls = plans.calls();
  ASSERT_EQ(calls.size(), 1u);  // pid 2 was never planned
  EXPECT_TRUE(calls[0].saw_cancel);
}

// The manager over a process table of the test's own.
class TargetManagerPlanningTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TargetManagerOptions options;
    options.find = [this] {
      std::lock_guard lock(mu_);
      std::vector<TargetProcess> out;
      for (const auto& [pid, p] : table_) out.push_back(p);
      return out;
    };
    options.read = [this](pid_t pid, TargetProcess* out) {
      std::lock_guard lock(mu_);
      auto it = table_.find(pid);
      if (it == table_.end()) return false;
      *out = it->second;
      return true;
    };
    options.plan = plans_.Function();
    manager_ = std::make_unique<TargetManager>(
        nullptr, options, [this](const TargetStatus& t, bool present) {
          changes_.push_back({t, present});
        });
  }
  void TearDown() override {
    plans_.Open();
    manager_.reset();
  }
  void Run(const TargetProcess& p) {
    std::lock_guard lock(mu_);
    table_[p.pid] = p;
  }
  void Exit(pid_t pid) {
    std::lock_guard lock(mu_);
    table_.erase(pid);
  }
  // Collects until a target is reported (true) or 5 s pass; that Collect says so.
  bool CollectUntilReported() {
    size_t before = changes_.size();
    return Eventually([&] {
      bool changed = manager_->Collect();
      if (changes_.size() == before) return false;
      EXPECT_TRUE(changed);
      return true;
    });
  }
  // Collects for `d`: for what must not happen.
  void CollectFor(std::chrono::milliseconds d) {
    auto end = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < end) {
      manager_->Collect();
      std::this_thread::sleep_for(1ms);
    }
  }

  GatedPlans plans_;
  std::mutex mu_;
  std::map<pid_t, TargetProcess> table_;
  std::unique_ptr<TargetManager> manager_;
  std::vector<std::pair<TargetStatus, bool>> changes_;
};

TEST_F(TargetManagerPlanningTest, ATargetBeingPlannedIsNotReadyThenReportedOnce) {
  Run(Process(42, 100));
  manager_->Refresh();  // returns with the plan held at its gate
  ASSERT_TRUE(plans_.WaitForCalls(1));
  EXPECT_EQ(manager_->NotReadyReason(), "planning kube-apiserver pid 42");
  EXPECT_EQ(manager_->planning().size(), 1u);
  EXPECT_TRUE(manager_->targets().empty());
  EXPECT_FALSE(manager_->Collect());
  manager_->Refresh();  // still planned: not submitted again
  EXPECT_TRUE(changes_.empty());

  plans_.Open();
  ASSERT_TRUE(CollectUntilReported());
  ASSERT_EQ(changes_.size(), 1u);
  const auto& [status, present] = changes_[0];
  EXPECT_TRUE(present);
  EXPECT_EQ(status.process.pid, 42);
  EXPECT_EQ(status.process.inode, 100u);
  EXPECT_FALSE(status.attached);
  EXPECT_EQ(status.failure, AttachFailure::kMissingField);
  EXPECT_EQ(status.go_version, "go1.26.2");
  EXPECT_GT(status.planning_seconds, 0);
  EXPECT_TRUE(manager_->planning().empty());
  ASSERT_EQ(manager_->targets().size(), 1u);
  EXPECT_EQ(manager_->attached_count(), 0u);
  EXPECT_EQ(manager_->NotReadyReason(),
            "kube-apiserver pid 42 not attached (missing_field): planned inode 100");
  manager_->Refresh();  // the same process: neither planned nor reported again
  CollectFor(20ms);
  EXPECT_EQ(plans_.calls().size(), 1u);
  EXPECT_EQ(changes_.size(), 1u);
}

TEST_F(TargetManagerPlanningTest, AnUnreadableProcEntryIsRefusedOnceWithoutAPlan) {
  TargetProcess hidden;
  hidden.pid = 44;
  hidden.name = "kube-apiserver";
  hidden.exe_path = "/proc/44/exe";
  hidden.unreadable = "cannot read /proc/44/stat: empty";
  Run(hidden);
  manager_->Refresh();
  ASSERT_EQ(changes_.size(), 1u);  // at once: nothing to plan
  EXPECT_TRUE(changes_[0].second);
  EXPECT_EQ(changes_[0].first.failure, AttachFailure::kProcUnreadable);
  EXPECT_EQ(changes_[0].first.problem, "cannot read /proc/44/stat: empty");
  EXPECT_EQ(manager_->NotReadyReason(),
            "kube-apiserver pid 44 not attached (proc_unreadable): cannot read /proc/44/stat: empty");
  manager_->Refresh();  // still unreadable: not reported again
  CollectFor(20ms);
  EXPECT_EQ(changes_.size(), 1u);
  EXPECT_TRUE(plans_.calls().empty());
  // Readable again: withdrawn, then planned as the process it is.
  Run(Process(44, 100));
  manager_->Refresh();
  ASSERT_EQ(changes_.size(), 2u);
  EXPECT_FALSE(changes_[1].second);
  ASSERT_TRUE(plans_.WaitForCalls(1));
  // Gone: withdrawn, nothing left.
  plans_.Open();
  ASSERT_TRUE(CollectUntilReported());
  Exit(44);
  manager_->Refresh();
  EXPECT_TRUE(manager_->targets().empty());
  EXPECT_EQ(manager_->NotReadyReason(), "");
}

TEST_F(TargetManagerPlanningTest, ATargetThatExitsWhilePlannedIsDropped) {
  Run(Process(42, 100));
  Run(Process(43, 300, "etcd"));
  manager_->Refresh();
  ASSERT_TRUE(plans_.WaitForCalls(1));
  EXPECT_EQ(manager_->NotReadyReason(), "planning kube-apiserver pid 42\nplanning etcd pid 43");
  Exit(42);
  manager_->Refresh();
  EXPECT_EQ(manager_->NotReadyReason(), "planning etcd pid 43");
  ASSERT_TRUE(plans_.WaitForCalls(2));  // 42's plan was stopped; 43's runs
  auto calls = plans_.calls();
  EXPECT_EQ(calls[0].process.pid, 42);
  EXPECT_TRUE(calls[0].saw_cancel);
  EXPECT_EQ(calls[1].process.pid, 43);
  plans_.Open();
  ASSERT_TRUE(CollectUntilReported());
  CollectFor(20ms);
  ASSERT_EQ(changes_.size(), 1u);  // 43 only; 42 was never announced, so never withdrawn
  EXPECT_EQ(changes_[0].first.process.pid, 43);
  EXPECT_EQ(manager_->targets().count(42), 0u);
  EXPECT_TRUE(manager_->planning().empty());
}

TEST_F(TargetManagerPlanningTest, ATargetThatExitsBeforeItsPlanIsCollectedIsDropped) {
  plans_.Open();
  Run(Process(42, 100));
  manager_->Refresh();
  ASSERT_TRUE(plans_.WaitForFinished(1));  // the plan is done and waits to be collected
  Exit(42);  // no Refresh in between: Collect itself sees it gone
  EXPECT_TRUE(Eventually([&] { return manager_->Collect(); }));  // readiness changed
  CollectFor(20ms);
  EXPECT_TRUE(changes_.empty());
  EXPECT_TRUE(manager_->planning().empty());
  EXPECT_TRUE(manager_->targets().empty());
  EXPECT_EQ(manager_->NotReadyReason(), "");
}

TEST_F(TargetManagerPlanningTest, ABinaryChangedWhilePlannedIsPlannedAgain) {
  Run(Process(42, 100));
  manager_->Refresh();
  ASSERT_TRUE(plans_.WaitForCalls(1));
  Run(Process(42, 200));  // same PID, same start: exec'd an upgraded binary
  manager_->Refresh();
  ASSERT_TRUE(plans_.WaitForCalls(2));
  EXPECT_EQ(manager_->NotReadyReason(), "planning kube-apiserver pid 42");
  plans_.Open();
  ASSERT_TRUE(CollectUntilReported());
  CollectFor(20ms);
  auto calls = plans_.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].process.inode, 100u);
  EXPECT_TRUE(calls[0].saw_cancel);
  EXPECT_EQ(calls[1].process.inode, 200u);
  EXPECT_FALSE(calls[1].saw_cancel);
  ASSERT_EQ(changes_.size(), 1u);  // the old binary's plan is never reported
  EXPECT_EQ(changes_[0].first.process.inode, 200u);
  EXPECT_EQ(changes_[0].first.problem, "planned inode 200");
}

TEST_F(TargetManagerPlanningTest, ABinaryChangedBeforeItsPlanIsCollectedIsPlannedAgain) {
  plans_.Open();
  Run(Process(42, 100));
  manager_->Refresh();
  ASSERT_TRUE(plans_.WaitForFinished(1));  // planned for inode 100
  Run(Process(42, 200));  // no Refresh in between: Collect checks before it attaches
  ASSERT_TRUE(CollectUntilReported());
  auto calls = plans_.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].process.inode, 100u);
  EXPECT_EQ(calls[1].process.inode, 200u);
  ASSERT_EQ(changes_.size(), 1u);
  EXPECT_EQ(changes_[0].first.process.inode, 200u);
  EXPECT_EQ(changes_[0].first.problem, "planned inode 200");
}

TEST_F(TargetManagerPlanningTest, AnUpgradeOfAnAnnouncedTargetWithdrawsItAndPlansTheNewBinary) {
  plans_.Open();
  Run(Process(42, 100));
  manager_->Refresh();
  ASSERT_TRUE(CollectUntilReported());
  Run(Process(42, 200));
  manager_->Refresh();  // withdrawn at once; the new binary is planned
  ASSERT_EQ(changes_.size(), 2u);
  EXPECT_FALSE(changes_[1].second);
  EXPECT_EQ(changes_[1].first.process.inode, 100u);
  ASSERT_TRUE(CollectUntilReported());
  ASSERT_EQ(changes_.size(), 3u);
  EXPECT_TRUE(changes_[2].second);
  EXPECT_EQ(changes_[2].first.process.inode, 200u);
}

// The real planner: a cancelled plan of a real stripped Go binary stops at its first check.
TEST(PlanGoHttp2ProbesTest, ACancelledPlanStopsEarly) {
  const std::string binary = std::string(STORMWATCH_GO_OUT) + "/test-apiserver";
  std::atomic<bool> cancelled{false};
  GoHttp2ProbePlan plan = PlanGoHttp2Probes(binary, &cancelled);
  ASSERT_EQ(plan.failure, AttachFailure::kNone) << plan.problem;
  EXPECT_FALSE(plan.sites.empty());
  EXPECT_GT(plan.type_count, 0u);
  cancelled = true;
  plan = PlanGoHttp2Probes(binary, &cancelled);
  EXPECT_EQ(plan.failure, AttachFailure::kAttachFailed);
  EXPECT_EQ(plan.problem, "planning cancelled");
  EXPECT_TRUE(plan.sites.empty());
  EXPECT_EQ(plan.type_count, 0u);  // stopped before the type data was read
}

}  // namespace
}  // namespace stormwatch
