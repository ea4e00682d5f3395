// One JSON line per alert transition: identity, evidence and the fix, for the on-call engineer
// and for log pipelines. Never carries a credential or a request body.
#pragma once

#include <cstdint>
#include <string>

#include "agent/analysis/storm.h"

namespace stormwatch {

// `realtime_minus_monotonic_ns` converts the detector's CLOCK_MONOTONIC stamps to wall time.
std::string FormatAlertJson(const StormTransition& t, int64_t realtime_minus_monotonic_ns);

// CLOCK_REALTIME - CLOCK_MONOTONIC, now.
int64_t RealtimeMinusMonotonicNs();

}  // namespace stormwatch
