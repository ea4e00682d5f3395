// The running agent: BPF probes + target manager + request pipeline + exporters, driven by one
// thread (poll the ring buffer, once a second refresh targets and run detectors).
#pragma once

#include <atomic>

#include "agent/options.h"

namespace stormwatch {

// Runs until `stop` becomes true. Returns the process exit code.
int RunAgent(const AgentOptions& options, const std::atomic<bool>& stop);

}  // namespace stormwatch
