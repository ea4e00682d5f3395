#include "agent/capture/target_manager.h"

#include <set>

#include "agent/capture/go_binary.h"
#include "agent/capture/go_offsets.h"

namespace stormwatch {

TargetManager::TargetManager(GoHttpProbes* probes, TargetManagerOptions options,
                             ChangeCallback on_change)
    : probes_(probes), options_(std::move(options)), on_change_(std::move(on_change)) {}

TargetManager::~TargetManager() {
  while (!targets_.empty()) Remove(targets_.begin());
}

size_t TargetManager::attached_count() const {
  size_t n = 0;
  for (const auto& [pid, t] : targets_) n += t.attached;
  return n;
}

void TargetManager::Refresh() {
  std::vector<TargetProcess> live;
  if (options_.pids.empty()) {
    live = FindTargetsByName(options_.names);
  } else {
    for (pid_t pid : options_.pids) {
      TargetProcess t;
      if (ReadTargetProcess(pid, &t)) live.push_back(std::move(t));
    }
  }
  std::set<pid_t> seen;
  for (const TargetProcess& p : live) {
    seen.insert(p.pid);
    auto it = targets_.find(p.pid);
    if (it != targets_.end()) {
      const TargetProcess& old = it->second.process;
      if (old.start_time == p.start_time && old.inode == p.inode && old.dev == p.dev) continue;
      Remove(it);  // PID reused, or the process exec'd a new binary
    }
    TargetStatus status = Attach(p);
    on_change_(status, true);
    targets_.emplace(p.pid, std::move(status));
  }
  for (auto it = targets_.begin(); it != targets_.end();) {
    auto next = std::next(it);
    if (!seen.contains(it->first)) Remove(it);
    it = next;
  }
}

void TargetManager::Remove(std::map<pid_t, TargetStatus>::iterator it) {
  if (it->second.attached) probes_->Detach(it->second.slot);
  on_change_(it->second, false);
  targets_.erase(it);
}

TargetStatus TargetManager::Attach(const TargetProcess& process) {
  TargetStatus s;
  s.process = process;
  auto binary = GoBinary::Open(process.exe_path);
  if (!binary) {
    s.problem = "not a readable Go binary: " + binary.error();
    return s;
  }
  s.go_version = binary->go_version();
  if (const GoModule* xnet = binary->build_info().FindModule("golang.org/x/net")) {
    s.xnet_version = xnet->effective_version();
  }
  auto layout = LookupGoHttp2Layout(s.go_version, s.xnet_version);
  if (!layout) {
    s.problem = layout.error();
    return s;
  }
  const Http2Stack& stack = XNetHttp2Stack();
  s.stack = stack.name;
  auto headers_fn = binary->FindFunction(stack.process_headers);
  auto done_fn = binary->FindFunction(stack.handler_done);
  if (!headers_fn || !done_fn) {
    s.problem = "no " + stack.name + " HTTP/2 server in the binary (" +
                (headers_fn ? stack.handler_done : stack.process_headers) + " not found)";
    return s;
  }
  auto headers_site = binary->EntryAfterStackCheckOffset(*headers_fn);
  auto done_site = binary->EntryAfterStackCheckOffset(*done_fn);
  if (!headers_site || !done_site) {
    s.problem = "cannot place entry probes: " +
                (headers_site ? done_site.error() : headers_site.error());
    return s;
  }
  GoHttp2ProbeSites sites{*headers_site, *done_site, layout->offsets};
  auto slot = probes_->Attach(process.pid, process.exe_path, sites);
  if (!slot) {
    s.problem = slot.error();
    return s;
  }
  s.attached = true;
  s.slot = *slot;
  s.problem = layout->note;
  return s;
}

}  // namespace stormwatch
