// The Alertmanager push against the REAL Alertmanager (Debian's prometheus-alertmanager, run on
// a free port with a null receiver): a firing storm shows up with the chart's alert name,
// labels and annotations and is refreshed; Resolved takes it off the active list. Against a
// dead or hanging endpoint: failures are counted, the queue drops its oldest entries, and
// Stop() keeps its deadline.
#include "exporters/alertmanager_client.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "exporters/alert_log.h"

extern char** environ;

namespace stormwatch {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr char kAlertmanagerBinary[] = "/usr/bin/prometheus-alertmanager";
constexpr int64_t kSec = 1'000'000'000;

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * kSec + ts.tv_nsec;
}

// A listening socket on 127.0.0.1 and its port; never accepts unless asked to.
struct Listener {
  int fd = -1;
  int port = 0;
  Listener() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    bind(fd, reinterpret_cast<sockaddr*>(&addr), len);
    listen(fd, 16);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
  }
  ~Listener() { close(fd); }
};

// A port nothing listens on (the kernel picked it free; it is closed again at once).
int FreePort() { return Listener().port; }

bool PollUntil(std::chrono::milliseconds limit, const std::function<bool()>& done) {
  auto give_up = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// GET `url`: status and body (status 0 when nothing answered).
std::pair<long, std::string> HttpGet(const std::string& url) {
  CURL* curl = curl_easy_init();
  std::string body;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 2000L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION,
                   +[](char* data, size_t size, size_t n, void* out) {
                     static_cast<std::string*>(out)->append(data, size * n);
                     return size * n;
                   });
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  long status = 0;
  if (curl_easy_perform(curl) == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(curl);
  return {status, body};
}

// Seconds since the epoch of an RFC 3339 UTC time as Alertmanager prints it.
double ParseRfc3339(const std::string& text) {
  struct tm tm = {};
  const char* rest = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  double fraction = rest && *rest == '.' ? std::strtod(rest, nullptr) : 0;
  return static_cast<double>(timegm(&tm)) + fraction;
}

std::string Rfc3339Millis(int64_t realtime_ns) {
  time_t secs = realtime_ns / kSec;
  struct tm tm;
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>((realtime_ns / 1000000) % 1000));
  return buf;
}

StormTransition UpdateLoopStorm(StormState state, int64_t since_ns, int64_t at_ns,
                                const std::string& resource = "deployments") {
  StormTransition t;
  t.state = state;
  t.at_ns = at_ns;
  StormEvidence& e = t.evidence;
  e.storm = "update_loop";
  e.severity = "critical";
  e.identity.kind = Identity::Kind::kServiceAccount;
  e.identity.user = "system:serviceaccount:team-a:deployer";
  e.identity.sa_namespace = "team-a";
  e.identity.sa_name = "deployer";
  e.api_group = "apps";
  e.resource = resource;
  e.namespace_ = "team-a";
  e.summary = "system:serviceaccount:team-a:deployer rewrites deployments 42 times/s";
  e.details = {{"resource_writes_per_second", 42.5},
               {"top_objects", json::array({{{"name", "web"}, {"writes_per_second", 40}}})}};
  e.fix = "Write status through the /status subresource.";
  e.since_ns = since_ns;
  e.fired_ns = at_ns;
  return t;
}

class RealAlertmanager : public testing::Test {
 protected:
  void SetUp() override {
    if (access(kAlertmanagerBinary, X_OK) != 0) {
      if (getenv("CI") != nullptr) FAIL() << kAlertmanagerBinary << " missing: run scripts/setup.sh";
      GTEST_SKIP() << kAlertmanagerBinary << " missing (scripts/setup.sh installs it)";
    }
    char dir[] = "/tmp/stormwatch-am-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    std::ofstream(dir_ + "/alertmanager.yml") << "route:\n  receiver: 'null'\n"
                                                 "receivers:\n  - name: 'null'\n";
    port_ = FreePort();
    url_ = "http://127.0.0.1:" + std::to_string(port_);
    std::vector<std::string> args = {
        kAlertmanagerBinary,
        "--config.file=" + dir_ + "/alertmanager.yml",
        "--storage.path=" + dir_ + "/data",
        "--web.listen-address=127.0.0.1:" + std::to_string(port_),
        "--cluster.listen-address=",
        "--log.level=warn"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    std::string log = dir_ + "/alertmanager.log";
    posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&files, 1, 2);
    int rc = posix_spawn(&pid_, kAlertmanagerBinary, &files, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&files);
    ASSERT_EQ(rc, 0);
    ASSERT_TRUE(PollUntil(15s, [&] { return HttpGet(url_ + "/-/ready").first == 200; }))
        << "Alertmanager not ready; its log: " << dir_ << "/alertmanager.log";
  }

  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Alerts Alertmanager lists as not resolved (its default filter).
  json ActiveAlerts() {
    auto [status, body] = HttpGet(url_ + "/api/v2/alerts");
    if (status != 200) return json::array();
    return json::parse(body);
  }

  std::string dir_, url_;
  int port_ = 0;
  pid_t pid_ = 0;
};

TEST(AlertName, MatchesTheChartsAlertCatalog) {
  YAML::Node catalog =
      YAML::LoadFile(std::string(STORMWATCH_SOURCE_DIR) + "/helm/stormwatch/files/alerts.yaml");
  ASSERT_EQ(catalog["storms"].size(), 8u);
  for (const YAML::Node& storm : catalog["storms"]) {
    EXPECT_EQ(AlertName(storm["storm"].as<std::string>()), storm["alert"].as<std::string>());
  }
}

TEST_F(RealAlertmanager, FiringStormShowsUpAndResolvedTakesItOff) {
  AlertmanagerConfig config;
  config.url = url_ + "/";  // a trailing slash is tolerated
  config.labels = {{"cluster", "test-cluster"}};
  config.runbook_base_url = "https://runbooks.example/stormwatch";
  config.generator_url = "http://master-1:9847/metrics";
  int64_t offset = RealtimeMinusMonotonicNs();
  AlertmanagerClient client(config, offset);

  int64_t now = MonotonicNs();
  StormTransition firing = UpdateLoopStorm(StormState::kFiring, now - 12 * kSec, now);
  client.OnTransition(firing);

  json alert;
  ASSERT_TRUE(PollUntil(10s, [&] {
    json alerts = ActiveAlerts();
    if (alerts.size() != 1 || alerts[0]["status"]["state"] != "active") return false;
    alert = alerts[0];
    return true;
  })) << ActiveAlerts().dump();
  EXPECT_EQ(alert["labels"], json({{"alertname", "StormwatchUpdateLoop"},
                                   {"storm", "update_loop"},
                                   {"severity", "critical"},
                                   {"client", "system:serviceaccount:team-a:deployer"},
                                   {"group", "apps"},
                                   {"resource", "deployments"},
                                   {"namespace", "team-a"},
                                   {"cluster", "test-cluster"}}));
  EXPECT_EQ(alert["annotations"],
            json({{"summary", firing.evidence.summary},
                  {"description", "Write status through the /status subresource."},
                  {"evidence",
                   R"({"resource_writes_per_second":42.5,"top_objects":[{"name":"web","writes_per_second":40}]})"},
                  {"runbook_url", "https://runbooks.example/stormwatch/update_loop.md"}}));
  EXPECT_EQ(alert["startsAt"], Rfc3339Millis(now - 12 * kSec + offset));
  EXPECT_EQ(alert["generatorURL"], "http://master-1:9847/metrics");
  // Expires kResendsBeforeExpiry resend intervals (4 x 60 s) from now unless refreshed.
  double expires_in = ParseRfc3339(alert["endsAt"]) - static_cast<double>(time(nullptr));
  EXPECT_GT(expires_in, 230);
  EXPECT_LT(expires_in, 250);

  client.OnTransition(UpdateLoopStorm(StormState::kResolved, now - 12 * kSec, MonotonicNs()));
  EXPECT_TRUE(PollUntil(10s, [&] { return ActiveAlerts().empty(); })) << ActiveAlerts().dump();
  client.Stop();
  EXPECT_EQ(client.sent(), 2u);  // the firing alert, then its resolution
  EXPECT_EQ(client.failed(), 0u);
  EXPECT_EQ(client.dropped(), 0u);
}

TEST_F(RealAlertmanager, FiringAlertIsRefreshedEveryResendInterval) {
  AlertmanagerConfig config;
  config.url = url_;
  config.default_namespace = "stormwatch";
  config.resend_interval = 200ms;
  AlertmanagerClient client(config, RealtimeMinusMonotonicNs());
  int64_t now = MonotonicNs();
  client.OnTransition(UpdateLoopStorm(StormState::kFiring, now - 10 * kSec, now));
  ASSERT_TRUE(PollUntil(5s, [&] { return client.sent() >= 4; })) << client.sent();
  // Re-sent, not duplicated; and it lives kResendsBeforeExpiry x 200 ms past each refresh.
  json alerts = ActiveAlerts();
  ASSERT_EQ(alerts.size(), 1u) << alerts.dump();
  double expires_in = ParseRfc3339(alerts[0]["endsAt"]) -
                      std::chrono::duration<double>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_GT(expires_in, 0.3);
  EXPECT_LT(expires_in, 0.9);
  // A second storm of the same client on another resource is another alert; one without a
  // namespace of its own carries the agent's (as the chart's rules give it the release's).
  StormTransition wide = UpdateLoopStorm(StormState::kFiring, now - 5 * kSec, now, "statefulsets");
  wide.evidence.namespace_.clear();
  client.OnTransition(wide);
  EXPECT_TRUE(PollUntil(5s, [&] { return ActiveAlerts().size() == 2; })) << ActiveAlerts().dump();
  for (const json& a : ActiveAlerts()) {
    EXPECT_EQ(a["labels"]["namespace"], a["labels"]["resource"] == "statefulsets" ? "stormwatch" : "team-a")
        << a.dump();
  }
  client.Stop();
  EXPECT_EQ(client.failed(), 0u);
}

TEST(AlertmanagerClient, DeadUrlCountsFailuresAndStopKeepsItsDeadline) {
  AlertmanagerConfig config;
  config.url = "http://127.0.0.1:" + std::to_string(FreePort());
  config.retry_backoff = 20ms;
  AlertmanagerClient client(config, RealtimeMinusMonotonicNs());
  int64_t now = MonotonicNs();
  client.OnTransition(UpdateLoopStorm(StormState::kFiring, now - 10 * kSec, now));
  // Retried with backoff 20, 40, 80 ms...: at least 3 attempts within a few seconds.
  EXPECT_TRUE(PollUntil(5s, [&] { return client.failed() >= 3; })) << client.failed();
  auto before = std::chrono::steady_clock::now();
  client.Stop(300ms);
  auto took = std::chrono::steady_clock::now() - before;
  EXPECT_LT(took, 500ms);  // the deadline, plus one 50 ms poll slice and scheduling
  EXPECT_EQ(client.sent(), 0u);
  EXPECT_EQ(client.dropped(), 0u);
}

// An endpoint that accepts the connection and never answers: the sender is stuck in a POST, so
// transitions pile up in the queue (oldest dropped), and Stop() abandons the POST on time.
TEST(AlertmanagerClient, HangingEndpointFillsTheQueueAndStopAbandonsThePost) {
  Listener hanging;
  AlertmanagerConfig config;
  config.url = "http://127.0.0.1:" + std::to_string(hanging.port);
  config.timeout = 30s;
  config.max_queue = 2;
  AlertmanagerClient client(config, RealtimeMinusMonotonicNs());
  int64_t now = MonotonicNs();
  client.OnTransition(UpdateLoopStorm(StormState::kFiring, now - 10 * kSec, now, "r0"));
  // The connection arrives only once the sender took the first transition off the queue.
  int conn = accept(hanging.fd, nullptr, nullptr);
  ASSERT_GE(conn, 0);
  for (int i = 1; i <= 5; ++i) {
    client.OnTransition(
        UpdateLoopStorm(StormState::kFiring, now - 10 * kSec, now, "r" + std::to_string(i)));
  }
  EXPECT_EQ(client.dropped(), 3u);  // r1..r3; r4 and r5 wait
  auto before = std::chrono::steady_clock::now();
  client.Stop(300ms);
  auto took = std::chrono::steady_clock::now() - before;
  EXPECT_GE(took, 250ms);  // it did try to flush until the deadline
  EXPECT_LT(took, 500ms);  // the deadline, plus one 50 ms poll slice and scheduling
  EXPECT_EQ(client.failed(), 1u);  // the abandoned POST
  EXPECT_EQ(client.sent(), 0u);
  close(conn);
}

}  // namespace
}  // namespace stormwatch
