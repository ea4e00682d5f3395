// `stormwatch top URL...`: a live terminal view of who is hammering the API server now, from
// one agent's /debug/top or several (one per master), refreshed every second; `--once` prints
// one frame (text, or `--json`) for scripts. The model is top_model.h; this is the command.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "agent/core/result.h"
#include "agent/top/top_model.h"

namespace stormwatch::top {

struct TopOptions {
  std::vector<std::string> urls;  // as given; TopUrl() makes each a /debug/top URL
  bool once = false;
  bool json = false;
  double interval_s = 1.0;
  double timeout_s = 2.0;  // per fetch
  SortKey sort = SortKey::kRequests;
  std::string filter;
  bool show_help = false;
};

// argv[1] is "top".
Result<TopOptions> ParseTopOptions(int argc, char** argv);
std::string TopUsage();
// The body of `url`, or why not (connection refused, timeout, HTTP status).
Result<std::string> Fetch(const std::string& url, double timeout_s);
int RunTop(const TopOptions& options);

}  // namespace stormwatch::top
