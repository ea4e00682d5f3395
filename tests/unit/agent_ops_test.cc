// The agent as an operated process: its process_* series, build info, kernel floor, JSON logs
// and the debug/log options.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <spdlog/details/log_msg.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "agent/build_info.h"
#include "agent/capture/kernel_check.h"
#include "agent/config/config_file.h"
#include "agent/log_format.h"
#include "agent/options.h"
#include "exporters/process_collector.h"
#include "exporters/prometheus_exporter.h"

namespace stormwatch {
namespace {

double NowSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

// --- process_* ---

TEST(ProcessCollectorTest, OpenFdsRiseByOneWithAFile) {
  auto before = ReadProcessStats("/proc/self");
  ASSERT_TRUE(before);
  int fd = open("/proc/self/stat", O_RDONLY);
  ASSERT_GE(fd, 0);
  auto during = ReadProcessStats("/proc/self");
  close(fd);
  auto after = ReadProcessStats("/proc/self");
  ASSERT_TRUE(during && after);
  EXPECT_EQ(during->open_fds, before->open_fds + 1);
  EXPECT_EQ(after->open_fds, before->open_fds);
  rlimit lim{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &lim), 0);
  EXPECT_EQ(before->max_fds, static_cast<double>(lim.rlim_cur));
}

TEST(ProcessCollectorTest, ResidentMemoryFollowsTouchedPages) {
  auto before = ReadProcessStats("/proc/self");
  ASSERT_TRUE(before);
  constexpr size_t kBytes = 64u << 20;
  std::vector<char> block(kBytes);
  std::memset(block.data(), 1, block.size());  // touched: resident
  auto after = ReadProcessStats("/proc/self");
  ASSERT_TRUE(after);
  EXPECT_GE(after->resident_bytes - before->resident_bytes, 0.9 * kBytes);
  EXPECT_GE(after->virtual_bytes - before->virtual_bytes, 0.9 * kBytes);
  EXPECT_GE(after->virtual_bytes, after->resident_bytes);
  EXPECT_EQ(block[kBytes - 1], 1);
}

TEST(ProcessCollectorTest, StartTimeAndCpuOfAFreshChild) {
  // A child started now, burning 0.4 s of CPU then waiting to be read.
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  double forked_at = NowSeconds();
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // CPU time, not wall time: on a busy machine 0.4 s of wall time may be far less CPU.
    timespec cpu{};
    volatile uint64_t spin = 0;
    do {
      for (int i = 0; i < 100000; ++i) spin = spin + 1;
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
    } while (cpu.tv_sec == 0 && cpu.tv_nsec < 400'000'000);
    (void)!write(ready[1], "x", 1);
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  auto s = ReadProcessStats("/proc/" + std::to_string(child));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  close(ready[0]);
  close(ready[1]);
  ASSERT_TRUE(s);
  EXPECT_NEAR(s->start_time_seconds, forked_at, 0.1);  // 1/CLK_TCK precision, not btime's 1 s
  EXPECT_GE(s->cpu_seconds, 0.39);  // a forked child's CPU time starts at 0
  EXPECT_LE(s->cpu_seconds, 0.6);
}

TEST(ProcessCollectorTest, FamiliesHaveThePrometheusNamesAndTypes) {
  auto families = ProcessCollector().Collect();
  std::map<std::string, prometheus::MetricType> got;
  for (const auto& f : families) got[f.name] = f.type;
  using T = prometheus::MetricType;
  EXPECT_EQ(got, (std::map<std::string, T>{{"process_cpu_seconds_total", T::Counter},
                                           {"process_resident_memory_bytes", T::Gauge},
                                           {"process_virtual_memory_bytes", T::Gauge},
                                           {"process_start_time_seconds", T::Gauge},
                                           {"process_open_fds", T::Gauge},
                                           {"process_max_fds", T::Gauge}}));
  EXPECT_TRUE(ProcessCollector("/proc/nonexistent").Collect().empty());
}

// --- the scrape: registry + process_* + build info, no exposer_* ---

TEST(MetricsEndpointTest, ScrapeHasBuildInfoAndProcessSeriesAndNoExposerSeries) {
  PrometheusExporter e;
  e.SetBuildInfo(BuildInfoLabels());
  std::string text = e.Scrape();
  EXPECT_NE(text.find("\nprocess_open_fds "), std::string::npos) << text;
  EXPECT_NE(text.find("\nprocess_start_time_seconds "), std::string::npos) << text;
  EXPECT_EQ(text.find("exposer_"), std::string::npos) << text;
  utsname u{};
  uname(&u);
  std::smatch m;
  std::regex line(
      R"re(stormwatch_build_info\{commit="([^"]+)",kernel="([^"]+)",libbpf="(\d+\.\d+)",version="([^"]+)"\} 1)re");
  ASSERT_TRUE(std::regex_search(text, m, line)) << text;
  EXPECT_EQ(m[2], u.release);
  EXPECT_EQ(m[4], StormwatchVersion());
  EXPECT_EQ(m[1], StormwatchCommit());
  EXPECT_NE(std::string(StormwatchCommit()), "");
}

// --- kernel floor ---

TEST(KernelCheckTest, FloorIs517WithBtfOnX86_64) {
  auto problem = [](std::string release, bool btf = true, std::string machine = "x86_64") {
    return KernelProblem({std::move(release), std::move(machine), btf});
  };
  EXPECT_EQ(problem("6.1.0-28-amd64"), "");
  EXPECT_EQ(problem("5.17.0"), "");
  EXPECT_EQ(problem("5.17.0-rc1"), "");
  EXPECT_EQ(problem("6.18.0"), "");
  EXPECT_EQ(problem("10.0"), "");
  EXPECT_EQ(problem("5.10.0-28-amd64"),
            "stormwatch needs Linux >= 5.17 (bpf_loop) with BTF on x86_64; this node has kernel "
            "5.10.0-28-amd64: see README Requirements");
  EXPECT_NE(problem("5.16.9").find("this node has kernel 5.16.9:"), std::string::npos);
  EXPECT_NE(problem("5.10").find("kernel 5.10"), std::string::npos);
  EXPECT_NE(problem("4.19.0").find("kernel 4.19.0"), std::string::npos);
  EXPECT_NE(problem("garbage").find("kernel garbage"), std::string::npos);
  EXPECT_NE(problem("").find("kernel unknown"), std::string::npos);
  EXPECT_EQ(problem("6.1.0-28-arm64", true, "aarch64"),
            "stormwatch needs Linux >= 5.17 (bpf_loop) with BTF on x86_64; this node has machine "
            "aarch64: see README Requirements");
  EXPECT_EQ(problem("6.1.0", false),
            "stormwatch needs Linux >= 5.17 (bpf_loop) with BTF on x86_64; this node has no "
            "/sys/kernel/btf/vmlinux (CONFIG_DEBUG_INFO_BTF): see README Requirements");
  // Everything wrong at once is said at once.
  EXPECT_NE(problem("5.4.0", false, "aarch64")
                .find("kernel 5.4.0, no /sys/kernel/btf/vmlinux (CONFIG_DEBUG_INFO_BTF), machine aarch64"),
            std::string::npos);
}

TEST(KernelCheckTest, ThisKernelReadsUnameUnlessOverridden) {
  utsname u{};
  ASSERT_EQ(uname(&u), 0);
  EXPECT_EQ(ThisKernel().release, u.release);
  EXPECT_EQ(ThisKernel().machine, u.machine);
  EXPECT_EQ(ThisKernel("5.10.0-28-amd64").release, "5.10.0-28-amd64");
  EXPECT_EQ(ThisKernel().btf, access("/sys/kernel/btf/vmlinux", R_OK) == 0);
}

// --- JSON logs ---

TEST(JsonLogTest, EscapesQuotesBackslashesControlBytesAndInvalidUtf8) {
  EXPECT_EQ(JsonEscape("plain"), "plain");
  EXPECT_EQ(JsonEscape(R"(say "hi" \ bye)"), R"(say \"hi\" \\ bye)");
  EXPECT_EQ(JsonEscape("a\nb\rc\td"), R"(a\nb\rc\td)");
  EXPECT_EQ(JsonEscape(std::string("\x01\x1f\x7f", 3)), R"(\u0001\u001f\u007f)");
  EXPECT_EQ(JsonEscape(std::string("nul\0x", 5)), R"(nul\u0000x)");
  EXPECT_EQ(JsonEscape("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(JsonEscape("bad \xff byte"), R"(bad \ufffd byte)");
  EXPECT_EQ(JsonEscape("cut \xc3"), R"(cut \ufffd)");
  EXPECT_EQ(JsonEscape("overlong \xc0\xaf"), R"(overlong \ufffd\ufffd)");
  EXPECT_EQ(JsonEscape("surrogate \xed\xa0\x80"), R"(surrogate \ufffd\ufffd\ufffd)");
  // Whatever bytes come in, the result in quotes parses back to text that keeps the valid parts.
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  auto parsed = nlohmann::json::parse("\"" + JsonEscape(all) + "\"");
  std::string back = parsed.get<std::string>();
  EXPECT_EQ(back.substr(0, 128), all.substr(0, 128));
}

TEST(JsonLogTest, FormatterWritesOneJsonObjectPerLine) {
  auto f = JsonLogFormatter();
  std::string message = "target \"kube-apiserver\" said:\n\tbad\x01 \xff";
  spdlog::details::log_msg msg("stormwatch", spdlog::level::warn, message);
  spdlog::memory_buf_t out;
  f->format(msg, out);
  std::string line(out.data(), out.size());
  ASSERT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  line.pop_back();
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  auto doc = nlohmann::json::parse(line);
  EXPECT_EQ(doc["level"], "warning");
  EXPECT_EQ(doc["logger"], "stormwatch");
  EXPECT_EQ(doc["msg"], "target \"kube-apiserver\" said:\n\tbad\x01 \xef\xbf\xbd");
  EXPECT_TRUE(std::regex_match(doc["time"].get<std::string>(),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")))
      << doc["time"];
  EXPECT_EQ(doc.size(), 4u);
}

// --- options ---

Result<AgentOptions> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "stormwatch");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return ParseAgentOptions(static_cast<int>(argv.size()), argv.data());
}

TEST(AgentOpsOptionsTest, DebugAddressAndLogFormat) {
  auto d = Parse({});
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->debug_address, "127.0.0.1:9849");
  EXPECT_EQ(d->log_format, "text");
  EXPECT_EQ(d->assume_kernel_release, "");
  auto o = Parse({"--debug-address=", "--log-format", "json", "--assume-kernel-release", "5.10.0"});
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->debug_address, "");
  EXPECT_EQ(o->log_format, "json");
  EXPECT_EQ(o->assume_kernel_release, "5.10.0");
  EXPECT_EQ(Parse({"--log-format", "xml"}).error().message, "--log-format: expected text or json");
  EXPECT_EQ(Parse({"--debug-address", "nowhere"}).error().message,
            "--debug-address: expected host:port, got 'nowhere'");
  // The hidden flag stays out of --help.
  EXPECT_EQ(AgentUsage().find("assume-kernel"), std::string::npos);
  EXPECT_NE(AgentUsage().find("--debug-address"), std::string::npos);
  EXPECT_NE(AgentUsage().find("--log-format"), std::string::npos);
}

TEST(AgentOpsOptionsTest, ConfigKeys) {
  auto o = ApplyConfigYaml("debug_address: \"0.0.0.0:9000\"\nlog_format: json\n", "cfg.yaml", {});
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->debug_address, "0.0.0.0:9000");
  EXPECT_EQ(o->log_format, "json");
  auto off = ApplyConfigYaml("debug_address: \"\"\n", "cfg.yaml", {});
  ASSERT_TRUE(off) << off.error().message;
  EXPECT_EQ(off->debug_address, "");
  EXPECT_EQ(ApplyConfigYaml("log_format: yaml\n", "cfg.yaml", {}).error().message,
            "cfg.yaml: log_format: expected text or json (line 1)");
}

}  // namespace
}  // namespace stormwatch
