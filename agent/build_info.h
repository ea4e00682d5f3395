// What this agent is: its version and git commit (baked in by CMake at configure time), the
// libbpf it runs with and the kernel it runs on. `stormwatch --version` and
// stormwatch_build_info say the same.
#pragma once

#include <map>
#include <string>

namespace stormwatch {

const char* StormwatchVersion();  // "0.1.0"
const char* StormwatchCommit();   // `git describe --always --dirty`, "unknown" outside git
// version, commit, libbpf ("1.4"), kernel (uname -r).
std::map<std::string, std::string> BuildInfoLabels();

}  // namespace stormwatch
