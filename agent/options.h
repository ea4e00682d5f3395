// Command-line options of the stormwatch agent. `--pid` and `--metrics-address` are a contract
// with checks outside the project: keep their names and meaning.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "agent/config/agent_options.h"
#include "agent/core/result.h"

namespace stormwatch {

Result<AgentOptions> ParseAgentOptions(int argc, char** argv);
std::string AgentUsage();

}  // namespace stormwatch
