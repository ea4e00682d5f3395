// Finds the processes to trace: by executable name (kube-apiserver, etcd) or by PID.
// Reads /proc only; a process that vanishes mid-scan is skipped, never an error. A live process
// whose /proc entry cannot be read (hidden or emptied in the agent's mount namespace, a
// permission denied) is returned with `unreadable` saying why: a target refused, not unseen.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace stormwatch {

struct TargetProcess {
  pid_t pid = 0;
  std::string name;      // basename of the executable (or comm when exe is unreadable)
  std::string exe_path;  // /proc/PID/exe: reaches the binary inside containers too
  uint64_t dev = 0;      // device and inode of the binary: a new inode is an upgrade
  uint64_t inode = 0;
  uint64_t start_time = 0;  // /proc/PID/stat field 22: tells a reused PID from the old one
  std::string unreadable;   // "" when read; else what could not be read (identity unknown)
};

// The process's identity; false if it is gone. A live process whose stat cannot be read: true,
// with `unreadable` set (and `name` from comm when that is readable).
bool ReadTargetProcess(pid_t pid, TargetProcess* out, const std::string& proc_root = "/proc");

// All processes whose executable basename (or comm, 15 chars) is one of `names`.
std::vector<TargetProcess> FindTargetsByName(const std::vector<std::string>& names,
                                             const std::string& proc_root = "/proc");

}  // namespace stormwatch
