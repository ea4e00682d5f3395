// Command-line parsing: the contract flags, defaults, and clear errors for bad input.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "agent/options.h"

namespace stormwatch {
namespace {

Result<AgentOptions> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "stormwatch");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return ParseAgentOptions(static_cast<int>(args.size()), argv.data());
}

TEST(Options, Defaults) {
  auto o = Parse({});
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_EQ(o->target_names, (std::vector<std::string>{"kube-apiserver", "etcd"}));
  EXPECT_TRUE(o->pids.empty());
  EXPECT_EQ(o->metrics_address, "0.0.0.0:9847");
  EXPECT_EQ(o->health_address, "0.0.0.0:9848");
  EXPECT_EQ(o->detectors.update_loop.object_rate, 5.0);
  EXPECT_EQ(o->detectors.update_loop.object_sustain_s, 10);
  EXPECT_EQ(o->detectors.update_loop.resource_rate, 100.0);
  EXPECT_EQ(o->detectors.update_loop.resource_sustain_s, 3);
  EXPECT_EQ(o->detectors.update_loop.resolve_s, 10);
}

TEST(Options, ContractFlags) {
  auto o = Parse({"--pid", "12,34", "--pid=56", "--metrics-address", "127.0.0.1:1234",
                  "--target", "kube-apiserver", "--update-loop-resource-rate", "50.5",
                  "--update-loop-resolve=30", "--health-address="});
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_EQ(o->pids, (std::vector<pid_t>{12, 34, 56}));
  EXPECT_EQ(o->metrics_address, "127.0.0.1:1234");
  EXPECT_EQ(o->target_names, (std::vector<std::string>{"kube-apiserver"}));
  EXPECT_EQ(o->detectors.update_loop.resource_rate, 50.5);
  EXPECT_EQ(o->detectors.update_loop.resolve_s, 30);
  EXPECT_EQ(o->health_address, "");
}

TEST(Options, BadInputIsRefusedWithTheFlagNamed) {
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  } cases[] = {
      {{"--pid", "abc"}, "--pid"},
      {{"--pid", "-3"}, "--pid"},
      {{"--metrics-address", "9847"}, "--metrics-address"},
      {{"--ring-buffer-bytes", "1000"}, "--ring-buffer-bytes"},
      {{"--update-loop-object-rate", "0"}, "object_rate"},
      {{"--update-loop-resolve", "x"}, "--update-loop-resolve: not a number"},
      {{"--no-such-flag"}, "--no-such-flag"},
      {{"--pid"}, "--pid"},
      {{"stray"}, "stray"},
  };
  for (const Case& c : cases) {
    auto o = Parse(c.args);
    ASSERT_FALSE(o.ok()) << c.args[0];
    EXPECT_NE(o.error().find(c.needle), std::string::npos) << o.error();
  }
}

}  // namespace
}  // namespace stormwatch
