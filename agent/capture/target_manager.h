// Keeps the probes attached to exactly the live target processes: attaches new ones, detaches
// those that exited, re-attaches a PID whose binary changed. A new target's binary is planned on
// a thread of its own (TargetPlanner); everything else, the attach included, happens on the
// caller's thread. A target that cannot be attached is a degraded state reported once (log +
// metric), never a crash.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/capture/etcd_layout.h"
#include "agent/capture/go_layout.h"
#include "agent/capture/gohttp_probes.h"
#include "agent/capture/target_discovery.h"

namespace stormwatch {

class GoBinary;
class TargetPlanner;

// Why a target is not attached: the `reason` label of stormwatch_target_attach_failures_total.
enum class AttachFailure {
  kNone,              // attached
  kUnreadableBinary,  // "unreadable_binary": not an ELF Go binary we can read
  kNoHttp2Server,     // "no_http2_server": no HTTP/2 server stack is in the binary
  kNoTypeData,        // "no_type_data": the Go runtime type descriptors could not be read
  kMissingField,      // "missing_field": a type or field the probes need is not in them
  kFunctionShape,     // "function_shape": a probed function's arguments are not what they read
  kAttachFailed,      // "attach_failed": probe placement or the uprobe attach itself failed
  kProcUnreadable,    // "proc_unreadable": the process's /proc entry could not be read
};
const char* AttachFailureName(AttachFailure failure);

struct TargetStatus {
  TargetProcess process;
  bool attached = false;
  uint32_t slot = 0;
  std::string go_version;
  std::string xnet_version;  // "" when the binary has no module information (GOPATH build)
  double planning_seconds = 0;  // how long its binary took to plan (off the main loop)
  // google.golang.org/grpc, when linked (etcd): its gRPC reaches the agent through the HTTP/2
  // server stacks above (ServeHTTP), so it decides nothing here but names the build.
  std::string grpc_version;
  // The HTTP/2 server stacks found in the binary (all of them attached when `attached`),
  // comma-separated in the order "x/net,std"; "" when none was found or the binary is unreadable.
  std::string stack;
  bool etcd = false;    // an etcd server (by its code, not its file name), else an API server
  std::string problem;  // why it is not attached, or the caveats when it is
  AttachFailure failure = AttachFailure::kNone;  // machine-readable: kNone iff attached
  LayoutGap gap;        // kMissingField: which type and field
  sw_go_offsets layout{};  // the layout of its first stack (user-space readers of its memory)
  // etcd attached at its gRPC interceptor: its message types (runtime addresses), for decoding.
  std::shared_ptr<const EtcdMessageTypes> etcd_messages;
};

// What would be attached to one Go binary, decided from the file alone (no BPF, no
// privileges): every HTTP/2 server stack present, each with its layout derived from the
// binary's type data and its probe sites. A binary is attached only if every stack present can
// be; a stack left out would serve requests nobody sees.
struct GoHttp2ProbePlan {
  std::string go_version;
  std::string xnet_version;
  std::string grpc_version;                 // "" when not linked or no module information
  bool module_info = false;                 // false for GOPATH builds
  bool etcd = false;                        // etcd's server code is in the binary
  std::vector<const Http2Stack*> stacks;    // found in the binary, x/net first
  std::vector<GoHttp2ProbeSites> sites;     // one per stack when failure == kNone
  std::optional<Http1ProbeSites> http1;     // net/http's HTTP/1.1 server, when in the binary
  AttachFailure failure = AttachFailure::kNone;
  std::string problem;                      // the refusal, or the caveats
  LayoutGap gap;                            // kMissingField: the type and field
  size_t type_count = 0;                    // type descriptors read
  // etcd: go-grpc-prometheus's interceptors, attached instead of the HTTP/2 stacks when found
  // (sites with file addresses; the attach adds the load bias).
  struct Grpc {
    GrpcProbeSites sites;
    EtcdLayout layout;
  };
  std::optional<Grpc> grpc;
  uint64_t first_load_vaddr = 0;            // of the first PT_LOAD, for the load bias
  std::string stack_names() const;          // "x/net,std"; "grpc" for the interceptor
};
// `cancelled`, when given, is checked between the planning phases: once it is true the plan
// returns early, refused as attach_failed ("planning cancelled"), to be thrown away.
GoHttp2ProbePlan PlanGoHttp2Probes(const GoBinary& binary,
                                   const std::atomic<bool>* cancelled = nullptr);

// The probes read a function's arguments from registers (Go's register ABI, amd64: receiver in
// RAX, then RBX, RCX, ...) and its results at RET (RAX). That holds only while the function keeps
// its signature: its _func.args (bytes of the receiver's and arguments' spill area) must be
// `args`. An error (kUnsupported) says why not.
Result<bool> CheckFunctionShape(const GoFunction& fn, int32_t args, const char* signature);
GoHttp2ProbePlan PlanGoHttp2Probes(const std::string& exe_path,
                                   const std::atomic<bool>* cancelled = nullptr);

// Plans one process's probes; `cancelled` turns true once the plan is no longer wanted.
using TargetPlanFunction =
    std::function<GoHttp2ProbePlan(const TargetProcess&, const std::atomic<bool>& cancelled)>;

struct TargetManagerOptions {
  std::vector<std::string> names;  // executable names to find (default kube-apiserver, etcd)
  std::vector<pid_t> pids;         // explicit PIDs (--pid); when set, names are not scanned
  // Where processes and plans come from; empty: /proc and PlanGoHttp2Probes (the agent's).
  // Tests give their own to drive the manager without processes or binaries.
  std::function<std::vector<TargetProcess>()> find;
  std::function<bool(pid_t, TargetProcess*)> read;  // one process's identity now; false if gone
  TargetPlanFunction plan;
};

class TargetManager {
 public:
  using ChangeCallback = std::function<void(const TargetStatus&, bool present)>;

  // `probes` may be null only where no plan can succeed (tests whose plans are all refusals).
  TargetManager(GoHttpProbes* probes, TargetManagerOptions options, ChangeCallback on_change);
  ~TargetManager();

  // Rescans /proc: detaches exited targets at once and hands new ones (and PIDs whose binary
  // changed) to the planner thread. Never waits for a plan: cheap enough to call every second.
  void Refresh();
  // Attaches the targets whose plans are done and reports them through the change callback.
  // Never blocks on a plan; the attach itself takes ~30 ms for a target's 11 uprobes here (the
  // plan of a big binary, 0.1-0.3 s or more). Call it as often as the ring buffer is drained.
  // True when targets() or planning() changed.
  bool Collect();
  const std::map<pid_t, TargetStatus>& targets() const { return targets_; }
  // Targets found whose binaries are being planned (not in targets() yet).
  const std::map<pid_t, TargetProcess>& planning() const { return planning_; }
  size_t attached_count() const;
  // "" when every target found is attached; else which are refused and why, and which are
  // still being planned (for /readyz).
  std::string NotReadyReason() const;

 private:
  TargetStatus Attach(const TargetProcess& process, const GoHttp2ProbePlan& plan);
  TargetStatus AttachGrpc(const TargetProcess& process, const GoHttp2ProbePlan& plan, TargetStatus s);
  void Remove(std::map<pid_t, TargetStatus>::iterator it);
  void StartPlanning(const TargetProcess& process);

  GoHttpProbes* probes_;
  TargetManagerOptions options_;
  ChangeCallback on_change_;
  std::map<pid_t, TargetStatus> targets_;
  std::map<pid_t, TargetProcess> planning_;  // submitted, result not taken yet
  std::unique_ptr<TargetPlanner> planner_;
};

}  // namespace stormwatch
