#include "agent/capture/target_discovery.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace stormwatch {
namespace {

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string Basename(const std::string& path) {
  auto slash = path.rfind('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  // A binary replaced on disk while running shows as "name (deleted)".
  constexpr std::string_view kDeleted = " (deleted)";
  if (base.size() > kDeleted.size() && base.ends_with(kDeleted)) base.resize(base.size() - kDeleted.size());
  return base;
}

// The first line of a /proc file, or why there is none ("" when read).
std::string ReadFirstLineOrWhy(const std::string& path, std::string* line) {
  std::ifstream in(path);
  if (!in) return std::strerror(errno);
  if (!std::getline(in, *line) || line->empty()) return "empty";
  return "";
}

// Still there: a process that exited between the scan and the read is not an error.
bool Alive(pid_t pid, const std::string& proc_root, const std::string& dir) {
  if (proc_root != "/proc") return access(dir.c_str(), F_OK) == 0;  // a test's own tree
  return kill(pid, 0) == 0 || errno == EPERM;
}

uint64_t StartTime(const std::string& stat_line) {
  // Field 2 (comm) may hold spaces and parentheses: parse after the last ')'.
  auto close = stat_line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat_line.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

}  // namespace

bool ReadTargetProcess(pid_t pid, TargetProcess* out, const std::string& proc_root) {
  std::string dir = proc_root + "/" + std::to_string(pid);
  TargetProcess t;
  t.pid = pid;
  t.exe_path = dir + "/exe";
  std::string stat_line;
  if (std::string why = ReadFirstLineOrWhy(dir + "/stat", &stat_line); !why.empty()) {
    if (!Alive(pid, proc_root, dir)) return false;
    t.name = ReadFirstLine(dir + "/comm");
    t.unreadable = "cannot read " + dir + "/stat: " + why;
    *out = std::move(t);
    return true;
  }
  // Exited, not yet reaped by its parent (a zombie has no exe any more): gone.
  if (auto close = stat_line.rfind(')'); close != std::string::npos && close + 2 < stat_line.size() &&
                                          (stat_line[close + 2] == 'Z' || stat_line[close + 2] == 'X')) {
    return false;
  }
  t.start_time = StartTime(stat_line);
  char buf[4096];
  ssize_t n = readlink(t.exe_path.c_str(), buf, sizeof(buf) - 1);
  if (n > 0) {
    t.name = Basename(std::string(buf, n));
  } else {
    t.name = ReadFirstLine(dir + "/comm");  // kernel threads and unreadable exe
  }
  struct stat st;
  if (stat(t.exe_path.c_str(), &st) == 0) {
    t.dev = st.st_dev;
    t.inode = st.st_ino;
  }
  *out = std::move(t);
  return true;
}

std::vector<TargetProcess> FindTargetsByName(const std::vector<std::string>& names,
                                             const std::string& proc_root) {
  std::vector<TargetProcess> found;
  DIR* dir = opendir(proc_root.c_str());
  if (!dir) return found;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    std::string comm = ReadFirstLine(proc_root + "/" + e->d_name + "/comm");
    // comm is the first 15 bytes of the executable's name: a cheap filter before readlink.
    bool maybe = std::any_of(names.begin(), names.end(), [&](const std::string& n) {
      return comm == n.substr(0, 15);
    });
    if (!maybe) continue;
    TargetProcess t;
    if (!ReadTargetProcess(static_cast<pid_t>(pid), &t, proc_root)) continue;
    if (!t.unreadable.empty()) {
      // Only comm to go by: the first name it is the start of.
      for (const std::string& n : names) {
        if (comm == n.substr(0, 15)) {
          t.name = n;
          break;
        }
      }
    }
    if (std::find(names.begin(), names.end(), t.name) != names.end()) found.push_back(std::move(t));
  }
  closedir(dir);
  std::sort(found.begin(), found.end(),
            [](const TargetProcess& a, const TargetProcess& b) { return a.pid < b.pid; });
  return found;
}

}  // namespace stormwatch
