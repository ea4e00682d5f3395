// stormwatch: eBPF agent that says who is hammering the Kubernetes API server, how, and what
// to change. See README.md for the architecture.
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdio>
#include <string_view>

#include "agent/agent.h"
#include "agent/config/config_file.h"
#include "agent/options.h"
#include "agent/replay.h"

namespace {
std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }
}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "replay") {
    auto replay = stormwatch::ParseReplayOptions(argc, argv);
    if (!replay) {
      std::fprintf(stderr, "stormwatch replay: %s\n", replay.error().c_str());
      return 2;
    }
    return stormwatch::RunReplay(*replay);
  }
  if (argc == 2 && std::string_view(argv[1]) == "config-schema") {
    std::fputs(stormwatch::ConfigJsonSchema().c_str(), stdout);
    return 0;
  }
  auto options = stormwatch::ParseAgentOptions(argc, argv);
  if (!options) {
    std::fprintf(stderr, "stormwatch: %s\n", options.error().c_str());
    return 2;
  }
  if (options->show_help) {
    std::fputs(stormwatch::AgentUsage().c_str(), stdout);
    return 0;
  }
  if (options->show_version) {
    std::puts("stormwatch 0.1.0");
    return 0;
  }
  // Logs go to stderr; stdout carries only alert lines.
  auto logger = spdlog::stderr_color_mt("stormwatch");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(options->log_level));

  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  return stormwatch::RunAgent(*options, g_stop);
}
