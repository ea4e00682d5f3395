// Keeps the probes attached to exactly the live target processes: attaches new ones, detaches
// those that exited, re-attaches a PID whose binary changed. A target that cannot be attached
// is a degraded state reported once (log + metric), never a crash.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/capture/gohttp_probes.h"
#include "agent/capture/target_discovery.h"

namespace stormwatch {

struct TargetStatus {
  TargetProcess process;
  bool attached = false;
  uint32_t slot = 0;
  std::string go_version;
  std::string xnet_version;
  std::string stack;
  std::string problem;  // why it is not attached, or a caveat when it is
};

struct TargetManagerOptions {
  std::vector<std::string> names;  // executable names to find (default kube-apiserver, etcd)
  std::vector<pid_t> pids;         // explicit PIDs (--pid); when set, names are not scanned
};

class TargetManager {
 public:
  using ChangeCallback = std::function<void(const TargetStatus&, bool present)>;

  TargetManager(GoHttpProbes* probes, TargetManagerOptions options, ChangeCallback on_change);
  ~TargetManager();

  // Rescans /proc and brings the attachments in line. Cheap enough to call every second.
  void Refresh();
  const std::map<pid_t, TargetStatus>& targets() const { return targets_; }
  size_t attached_count() const;

 private:
  TargetStatus Attach(const TargetProcess& process);
  void Remove(std::map<pid_t, TargetStatus>::iterator it);

  GoHttpProbes* probes_;
  TargetManagerOptions options_;
  ChangeCallback on_change_;
  std::map<pid_t, TargetStatus> targets_;
};

}  // namespace stormwatch
