// stormwatch: eBPF agent that says who is hammering the Kubernetes API server, how, and what
// to change. See README.md for the architecture.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <string_view>

#include "agent/agent.h"
#include "agent/build_info.h"
#include "agent/config/config_file.h"
#include "agent/log_format.h"
#include "agent/options.h"
#include "agent/replay.h"
#include "agent/top/top.h"

namespace {
std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }
}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "replay") {
    auto replay = stormwatch::ParseReplayOptions(argc, argv);
    if (!replay) {
      std::fprintf(stderr, "stormwatch replay: %s\n", replay.error().message.c_str());
      return 2;
    }
    return stormwatch::RunReplay(*replay);
  }
  if (argc == 2 && std::string_view(argv[1]) == "config-schema") {
    std::fputs(stormwatch::ConfigJsonSchema().c_str(), stdout);
    return 0;
  }
  if (argc > 1 && std::string_view(argv[1]) == "top") {
    auto top = stormwatch::top::ParseTopOptions(argc, argv);
    if (!top) {
      std::fprintf(stderr, "stormwatch top: %s\n", top.error().message.c_str());
      return 2;
    }
    return stormwatch::top::RunTop(*top);
  }
  auto options = stormwatch::ParseAgentOptions(argc, argv);
  if (!options) {
    std::fprintf(stderr, "stormwatch: %s\n", options.error().message.c_str());
    return 2;
  }
  if (options->show_help) {
    std::fputs(stormwatch::AgentUsage().c_str(), stdout);
    return 0;
  }
  if (options->show_version) {
    std::printf("stormwatch %s\n", stormwatch::StormwatchVersion());
    return 0;
  }
  // Logs go to stderr; stdout carries only alert lines.
  stormwatch::ConfigureLogging(options->log_format, options->log_level);

  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  return stormwatch::RunAgent(*options, g_stop);
}
