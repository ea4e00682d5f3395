// Command-line parsing: the contract flags, defaults, clear errors for bad input, and the
// configuration file with flags overriding it.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
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
  ASSERT_TRUE(o.ok()) << o.error().message;
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
  ASSERT_TRUE(o.ok()) << o.error().message;
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
      {{"--log-level", "verbose"}, "--log-level: expected trace"},
      {{"--alertmanager-url", "127.0.0.1:9093"}, "--alertmanager-url: expected an http://"},
      {{"--config", ""}, "--config: expected a file path"},
      {{"--config", "/nonexistent/sw.yaml"}, "/nonexistent/sw.yaml: cannot read"},
      {{"--no-such-flag"}, "--no-such-flag"},
      {{"--pid"}, "--pid"},
      {{"stray"}, "stray"},
  };
  for (const Case& c : cases) {
    auto o = Parse(c.args);
    ASSERT_FALSE(o.ok()) << c.args[0];
    EXPECT_NE(o.error().message.find(c.needle), std::string::npos) << o.error().message;
  }
}

// A config file in a fresh temporary directory, removed with the test.
class ConfigFileFlag : public testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/stormwatch-options-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/stormwatch.yaml";
  }
  void TearDown() override {
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  void Write(const std::string& yaml) { std::ofstream(path_) << yaml; }
  std::string dir_, path_;
};

constexpr char kFile[] = R"(targets:
  names: [etcd]
  pids: [11]
metrics_address: 127.0.0.1:7000
detectors:
  update_loop: {object_rate: 7, resolve_s: 40}
  list_storm: {sustain_s: 20}
alertmanager: {url: "http://am.example:9093"}
)";

TEST_F(ConfigFileFlag, FileSetsValuesBeyondTheFlags) {
  Write(kFile);
  auto o = Parse({"--config", path_});
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->config_path, path_);
  EXPECT_EQ(o->target_names, (std::vector<std::string>{"etcd"}));
  EXPECT_EQ(o->pids, (std::vector<pid_t>{11}));
  EXPECT_EQ(o->metrics_address, "127.0.0.1:7000");
  EXPECT_EQ(o->detectors.update_loop.object_rate, 7.0);
  EXPECT_EQ(o->detectors.update_loop.resolve_s, 40);
  EXPECT_EQ(o->detectors.list_storm.sustain_s, 20);
  EXPECT_EQ(o->alertmanager.url, "http://am.example:9093");
  EXPECT_EQ(o->health_address, "0.0.0.0:9848");  // not in the file: default
}

TEST_F(ConfigFileFlag, FlagsOverrideTheFileWhateverTheirOrder) {
  Write(kFile);
  std::vector<std::string> overrides = {
      "--target", "kube-apiserver", "--pid", "22,33", "--metrics-address", "127.0.0.1:8000",
      "--update-loop-object-rate", "9", "--alertmanager-url", "http://127.0.0.1:9093"};
  std::vector<std::string> before = overrides, after = {"--config", path_};
  before.insert(before.end(), {"--config", path_});
  after.insert(after.end(), overrides.begin(), overrides.end());
  for (const auto& args : {before, after}) {
    auto o = Parse(args);
    ASSERT_TRUE(o.ok()) << o.error().message;
    EXPECT_EQ(o->target_names, (std::vector<std::string>{"kube-apiserver"}));
    EXPECT_EQ(o->pids, (std::vector<pid_t>{22, 33}));
    EXPECT_EQ(o->metrics_address, "127.0.0.1:8000");
    EXPECT_EQ(o->detectors.update_loop.object_rate, 9.0);
    EXPECT_EQ(o->alertmanager.url, "http://127.0.0.1:9093");
    // What no flag overrode still comes from the file.
    EXPECT_EQ(o->detectors.update_loop.resolve_s, 40);
    EXPECT_EQ(o->detectors.list_storm.sustain_s, 20);
  }
}

TEST_F(ConfigFileFlag, FileErrorsNameFileKeyAndLine) {
  Write("detectors:\n  list_storm:\n    sustian_s: 20\n");
  auto o = Parse({"--config", path_});
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.error().message.rfind(path_ + ": detectors.list_storm.sustian_s: unknown key (line 3)", 0),
            0u)
      << o.error().message;
}

TEST_F(ConfigFileFlag, FlagsAreCheckedAfterTheFile) {
  Write("detectors: {update_loop: {object_rate: 7}}\n");
  auto o = Parse({"--config", path_, "--update-loop-object-rate", "0"});
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.error().message, "update loop detector: object_rate must be > 0");
}

}  // namespace
}  // namespace stormwatch
