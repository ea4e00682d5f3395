#include "agent/build_info.h"

#include <bpf/libbpf.h>
#include <sys/utsname.h>

// Set on this file only (CMakeLists.txt), so a new commit recompiles one file.
#ifndef STORMWATCH_VERSION
#define STORMWATCH_VERSION "unknown"
#endif
#ifndef STORMWATCH_COMMIT
#define STORMWATCH_COMMIT "unknown"
#endif

namespace stormwatch {

const char* StormwatchVersion() { return STORMWATCH_VERSION; }
const char* StormwatchCommit() { return STORMWATCH_COMMIT[0] ? STORMWATCH_COMMIT : "unknown"; }

std::map<std::string, std::string> BuildInfoLabels() {
  utsname u{};
  std::string kernel = uname(&u) == 0 ? u.release : "unknown";
  return {{"version", StormwatchVersion()},
          {"commit", StormwatchCommit()},
          {"libbpf", std::to_string(libbpf_major_version()) + "." +
                         std::to_string(libbpf_minor_version())},
          {"kernel", kernel}};
}

}  // namespace stormwatch
