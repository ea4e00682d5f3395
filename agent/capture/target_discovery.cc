#include "agent/capture/target_discovery.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

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
  std::string stat_line = ReadFirstLine(dir + "/stat");
  if (stat_line.empty()) return false;
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
    if (std::find(names.begin(), names.end(), t.name) != names.end()) found.push_back(std::move(t));
  }
  closedir(dir);
  std::sort(found.begin(), found.end(),
            [](const TargetProcess& a, const TargetProcess& b) { return a.pid < b.pid; });
  return found;
}

}  // namespace stormwatch
