// `stormwatch top`'s model (agent/top/top_model.h) on fixed /debug/top documents: rates from
// two snapshots of each agent over the agents' own clocks, clients merged across agents (an
// agent down, a client seen once, a storming client not in the list), exact order for every
// sort column, the filter, the text rows and the JSON.
#include "agent/top/top_model.h"

#include "agent/top/top.h"

#include <gtest/gtest.h>

namespace stormwatch::top {
namespace {

const std::string kOperator = "system:serviceaccount:apps:operator";
const std::string kScraper = "system:serviceaccount:monitoring:scraper";
const std::string kKubelet = "system:node:worker-1";
const std::string kAdmin = "kubectl-admin";
const std::string kInformer = "system:serviceaccount:ci:informer";
constexpr double kNoon = 1764676800;  // 2025-12-02 12:00:00 UTC
constexpr uint64_t kMiB = 1048576;

nlohmann::json Client(const std::string& name, uint64_t requests, uint64_t lists, uint64_t list_bytes,
                      uint64_t conflicts, uint64_t throttled, const std::string& level,
                      std::vector<std::string> storms = {}) {
  return {{"client", name},       {"requests", requests},     {"lists", lists},
          {"list_bytes", list_bytes}, {"conflicts", conflicts}, {"throttled", throttled},
          {"priority_level", level},  {"seconds_since_last", 0.1}, {"storms", storms}};
}

std::string Doc(const std::string& node, double time, double monotonic, uint64_t requests,
                std::vector<nlohmann::json> clients, nlohmann::json storms = nlohmann::json::object(),
                uint64_t untracked = 0) {
  return nlohmann::json{{"node", node},         {"time", time},       {"monotonic_s", monotonic},
                        {"requests", requests}, {"clients", clients}, {"active_storms", storms},
                        {"untracked_requests", untracked}}
      .dump();
}

// Master 1: 2 s between snapshots; master 2: 1 s; master 3 down.
std::vector<AgentTracker> ThreeAgents() {
  std::vector<AgentTracker> agents{AgentTracker("http://m1:9849/debug/top"),
                                   AgentTracker("http://m2:9849/debug/top"),
                                   AgentTracker("http://m3:9849/debug/top")};
  agents[0].Update(Doc("master-1", kNoon - 2, 100, 1100,
                       {Client(kOperator, 1000, 0, 0, 10, 0, "workload-low"),
                        Client(kScraper, 50, 50, 50 * kMiB, 0, 0, "global-default"),
                        Client(kKubelet, 50, 0, 0, 0, 0, "system")},
                       nlohmann::json::object(), /*untracked=*/10));
  agents[0].Update(Doc("master-1", kNoon, 102, 1600,
                       {Client(kOperator, 1400, 0, 0, 30, 0, "workload-low", {"update_loop configmaps"}),
                        Client(kScraper, 90, 90, 90 * kMiB, 0, 0, "global-default"),
                        Client(kKubelet, 52, 0, 0, 0, 0, "system")},
                       {{kOperator, {"update_loop configmaps"}}}, /*untracked=*/60));
  agents[1].Update(Doc("master-2", kNoon - 0.5, 50, 200,
                       {Client(kOperator, 100, 0, 0, 0, 0, "workload-low"),
                        Client(kKubelet, 100, 0, 0, 0, 0, "node-high")},
                       nlohmann::json::object(), /*untracked=*/5));
  agents[1].Update(Doc("master-2", kNoon + 0.5, 51, 262,
                       {Client(kOperator, 150, 0, 0, 0, 5, "workload-low"),
                        Client(kKubelet, 110, 0, 0, 0, 0, "node-high"),
                        Client(kAdmin, 2, 0, 0, 0, 0, "")},
                       {{kInformer, {"relist_churn pods"}}}, /*untracked=*/5));
  agents[2].Update(Error{"Failed to connect to m3 port 9849: Connection refused"});
  return agents;
}

std::vector<std::string> Clients(const Frame& f) {
  std::vector<std::string> out;
  for (const Row& r : f.rows) out.push_back(r.client);
  return out;
}

TEST(TopModel, RatesPerAgentFromTwoSnapshots) {
  std::vector<AgentTracker> agents = ThreeAgents();
  const auto& m1 = agents[0].rates();
  ASSERT_EQ(m1.size(), 3u);
  EXPECT_DOUBLE_EQ(m1.at(kOperator).requests, 200);  // 400 in 2 s
  EXPECT_DOUBLE_EQ(m1.at(kOperator).conflicts, 10);
  EXPECT_DOUBLE_EQ(m1.at(kScraper).lists, 20);
  EXPECT_DOUBLE_EQ(m1.at(kScraper).list_bytes, 20.0 * kMiB);
  EXPECT_DOUBLE_EQ(*agents[0].total_request_rate(), 250);
  EXPECT_DOUBLE_EQ(*agents[0].untracked_request_rate(), 25);  // 50 in 2 s
  EXPECT_DOUBLE_EQ(*agents[1].untracked_request_rate(), 0);
  // Seen once: no rate yet.
  EXPECT_EQ(agents[1].rates().count(kAdmin), 0u);
  EXPECT_DOUBLE_EQ(agents[1].rates().at(kOperator).throttled, 5);
  EXPECT_FALSE(agents[2].up());
  EXPECT_FALSE(agents[2].snapshot());

  // The same snapshot fetched again (the agent publishes once a second): rates unchanged.
  agents[1].Update(Doc("master-2", kNoon + 0.5, 51, 262, {Client(kOperator, 150, 0, 0, 0, 5, "")}));
  EXPECT_DOUBLE_EQ(agents[1].rates().at(kOperator).requests, 50);
  // Counters that went back (the agent restarted): no rate, the new counters are the base.
  agents[1].Update(Doc("master-2", kNoon + 1.5, 52, 10, {Client(kOperator, 3, 0, 0, 0, 0, "")}));
  EXPECT_EQ(agents[1].rates().count(kOperator), 0u);
  EXPECT_FALSE(agents[1].total_request_rate());
  agents[1].Update(Doc("master-2", kNoon + 2.5, 53, 20, {Client(kOperator, 9, 0, 0, 0, 0, "")}));
  EXPECT_DOUBLE_EQ(agents[1].rates().at(kOperator).requests, 6);
  // Down, then up again: rates over the whole gap.
  agents[1].Update(Error{"timeout"});
  EXPECT_FALSE(agents[1].up());
  EXPECT_EQ(agents[1].error(), "timeout");
  agents[1].Update(Doc("master-2", kNoon + 6.5, 57, 60, {Client(kOperator, 29, 0, 0, 0, 0, "")}));
  EXPECT_DOUBLE_EQ(agents[1].rates().at(kOperator).requests, 5);
  EXPECT_DOUBLE_EQ(*agents[1].total_request_rate(), 10);
  // Not a /debug/top document (say, /debug/clients' array): down, with the reason.
  agents[1].Update(std::string("[]"));
  EXPECT_FALSE(agents[1].up());
  EXPECT_EQ(agents[1].error(), "not a JSON object");
}

TEST(TopModel, MergesClientsAcrossAgents) {
  Frame f = BuildFrame(ThreeAgents(), SortKey::kRequests, "");
  ASSERT_EQ(Clients(f), (std::vector<std::string>{kOperator, kScraper, kKubelet, kAdmin, kInformer}));
  EXPECT_EQ(f.clients_total, 5u);
  const Row& op = f.rows[0];
  EXPECT_TRUE(op.has_rate);
  EXPECT_DOUBLE_EQ(op.rates.requests, 250);  // 200 on master 1 + 50 on master 2
  EXPECT_DOUBLE_EQ(op.rates.conflicts, 10);
  EXPECT_DOUBLE_EQ(op.rates.throttled, 5);
  EXPECT_EQ(op.totals.requests, 1550u);
  EXPECT_EQ(op.totals.conflicts, 30u);
  EXPECT_EQ(op.agents, (std::vector<int>{1, 2}));
  EXPECT_EQ(op.storms, (std::set<std::string>{"update_loop configmaps"}));
  EXPECT_EQ(f.rows[2].priority_levels, (std::set<std::string>{"node-high", "system"}));
  EXPECT_DOUBLE_EQ(f.rows[2].rates.requests, 11);
  EXPECT_FALSE(f.rows[3].has_rate);
  EXPECT_EQ(f.rows[3].totals.requests, 2u);
  // Storming, not listed: its row has the storm and no counters.
  EXPECT_EQ(f.rows[4].storms, (std::set<std::string>{"relist_churn pods"}));
  EXPECT_EQ(f.rows[4].agents, (std::vector<int>{2}));
  // Totals: requests from the agents' own totals (250 + 62/s, unlisted clients included).
  EXPECT_TRUE(f.totals_have_rate);
  EXPECT_DOUBLE_EQ(f.totals.requests, 312);
  // Of which from clients an agent keeps no entry for: 25/s on master 1.
  EXPECT_EQ(f.untracked_requests, 25.0);
  EXPECT_DOUBLE_EQ(f.totals.lists, 20);
  EXPECT_DOUBLE_EQ(f.totals.list_bytes, 20.0 * kMiB);
  EXPECT_DOUBLE_EQ(f.totals.conflicts, 10);
  EXPECT_DOUBLE_EQ(f.totals.throttled, 5);
  EXPECT_DOUBLE_EQ(f.time, kNoon + 0.5);
  ASSERT_EQ(f.agents.size(), 3u);
  EXPECT_TRUE(f.agents[0].up);
  EXPECT_EQ(f.agents[0].node, "master-1");
  EXPECT_FALSE(f.agents[2].up);
}

TEST(TopModel, SortsByEveryColumnHighestFirstTiesByCountThenName) {
  const auto agents = ThreeAgents();
  EXPECT_EQ(Clients(BuildFrame(agents, SortKey::kLists, "")),
            (std::vector<std::string>{kScraper, kAdmin, kKubelet, kOperator, kInformer}));
  EXPECT_EQ(Clients(BuildFrame(agents, SortKey::kListBytes, "")),
            (std::vector<std::string>{kScraper, kAdmin, kKubelet, kOperator, kInformer}));
  EXPECT_EQ(Clients(BuildFrame(agents, SortKey::kConflicts, "")),
            (std::vector<std::string>{kOperator, kAdmin, kKubelet, kInformer, kScraper}));
  EXPECT_EQ(Clients(BuildFrame(agents, SortKey::kThrottled, "")),
            (std::vector<std::string>{kOperator, kAdmin, kKubelet, kInformer, kScraper}));
  EXPECT_EQ(Clients(BuildFrame(agents, SortKey::kClient, "")),
            (std::vector<std::string>{kAdmin, kKubelet, kOperator, kInformer, kScraper}));
  // Keys and column moves.
  EXPECT_EQ(SortKeyFromKey('l'), SortKey::kLists);
  EXPECT_EQ(SortKeyFromKey('b'), SortKey::kListBytes);
  EXPECT_EQ(SortKeyFromKey('c'), SortKey::kConflicts);
  EXPECT_EQ(SortKeyFromKey('t'), SortKey::kThrottled);
  EXPECT_EQ(SortKeyFromKey('x'), std::nullopt);
  EXPECT_EQ(MoveSortKey(SortKey::kRequests, +1), SortKey::kLists);
  EXPECT_EQ(MoveSortKey(SortKey::kRequests, -1), SortKey::kClient);
  EXPECT_EQ(MoveSortKey(SortKey::kClient, -1), SortKey::kClient);
  EXPECT_EQ(MoveSortKey(SortKey::kThrottled, +1), SortKey::kThrottled);
  EXPECT_EQ(SortKeyFromName("list_bytes"), SortKey::kListBytes);
  EXPECT_EQ(SortKeyFromName("bytes"), std::nullopt);
}

TEST(TopModel, FilterKeepsClientsContainingTheTextInAnyCase) {
  Frame f = BuildFrame(ThreeAgents(), SortKey::kRequests, "ServiceAccount");
  EXPECT_EQ(Clients(f), (std::vector<std::string>{kOperator, kScraper, kInformer}));
  EXPECT_EQ(f.clients_total, 5u);
  EXPECT_DOUBLE_EQ(f.totals.requests, 312);  // totals stay those of every client
  EXPECT_TRUE(BuildFrame(ThreeAgents(), SortKey::kRequests, "nobody").rows.empty());
}

TEST(TopModel, FormatsTheFrame) {
  Frame f = BuildFrame(ThreeAgents(), SortKey::kRequests, "");
  std::vector<std::string> lines = FormatFrame(f, 0, 0);
  std::vector<std::string> want = {
      "stormwatch top  2025-12-02 12:00:00 UTC  agents 2/3 up  clients 5  sort requests",
      "total  req/s 312 (25.0 untracked)  LIST/s 20.0  LIST B/s 20.0 MiB  409/s 10.0  429/s 5.0",
      "[1] http://m1:9849/debug/top  up  node master-1",
      "[2] http://m2:9849/debug/top  up  node master-2",
      "[3] http://m3:9849/debug/top  DOWN: Failed to connect to m3 port 9849: Connection refused",
      "",
      "CLIENT                                     REQ/S*   LIST/S   LIST B/S   409/S   429/S  APF              AGENTS  STORMS",
      "system:serviceaccount:apps:operator           250        0          0    10.0     5.0  workload-low     1,2     update_loop configmaps",
      "system:serviceaccount:monitoring:scraper     20.0     20.0   20.0 MiB       0       0  global-default   1       -",
      "system:node:worker-1                         11.0        0          0       0       0  node-high,system 1,2     -",
      "kubectl-admin                                   -        -          -       -       -  -                2       -",
      "system:serviceaccount:ci:informer               -        -          -       -       -  -                2       relist_churn pods",
  };
  EXPECT_EQ(lines, want);

  // 80 columns, 9 lines: the client column shrinks to 12 and names keep their end, lines are
  // cut at 80, the rows that do not fit are counted.
  lines = FormatFrame(BuildFrame(ThreeAgents(), SortKey::kLists, "account"), 80, 9, true);
  ASSERT_EQ(lines.size(), 9u);
  EXPECT_EQ(lines[0], "stormwatch top  2025-12-02 12:00:00 UTC  agents 2/3 up  clients 5  sort lists  f");
  EXPECT_EQ(lines[6].substr(0, 30), "CLIENT          REQ/S  LIST/S*");
  EXPECT_EQ(lines[7].substr(0, 30), "..ng:scraper     20.0     20.0");
  EXPECT_EQ(lines[8], "... 2 more");
  for (const std::string& l : lines) EXPECT_LE(l.size(), 80u) << l;
  // The filter being typed.
  lines = FormatFrame(BuildFrame(ThreeAgents(), SortKey::kLists, "account"), 0, 0, true);
  EXPECT_EQ(lines[0], "stormwatch top  2025-12-02 12:00:00 UTC  agents 2/3 up  clients 5  sort lists"
                      "  filter /account_ (3 shown)");
}

TEST(TopModel, FrameAsJson) {
  nlohmann::json j = FrameJson(BuildFrame(ThreeAgents(), SortKey::kRequests, "operator"));
  EXPECT_EQ(j, nlohmann::json::parse(R"({
    "time": 1764676800.5, "sort": "requests", "filter": "operator", "clients_total": 5,
    "agents": [
      {"url": "http://m1:9849/debug/top", "up": true, "node": "master-1"},
      {"url": "http://m2:9849/debug/top", "up": true, "node": "master-2"},
      {"url": "http://m3:9849/debug/top", "up": false, "node": "",
       "error": "Failed to connect to m3 port 9849: Connection refused"}],
    "totals": {"requests_per_second": 312.0, "lists_per_second": 20.0,
               "list_bytes_per_second": 20971520.0, "conflicts_per_second": 10.0,
               "throttled_per_second": 5.0},
    "untracked_requests_per_second": 25.0,
    "clients": [{"client": "system:serviceaccount:apps:operator",
                 "agents": ["http://m1:9849/debug/top", "http://m2:9849/debug/top"],
                 "requests_per_second": 250.0, "lists_per_second": 0.0,
                 "list_bytes_per_second": 0.0, "conflicts_per_second": 10.0,
                 "throttled_per_second": 5.0,
                 "requests": 1550, "lists": 0, "list_bytes": 0, "conflicts": 30, "throttled": 5,
                 "priority_levels": ["workload-low"], "storms": ["update_loop configmaps"]}]})"))
      << j.dump(2);
  j = FrameJson(BuildFrame(ThreeAgents(), SortKey::kRequests, "admin"));
  EXPECT_TRUE(j["clients"][0]["requests_per_second"].is_null());
}

TEST(TopModel, Urls) {
  EXPECT_EQ(TopUrl("http://127.0.0.1:9849"), "http://127.0.0.1:9849/debug/top");
  EXPECT_EQ(TopUrl("http://127.0.0.1:9849/"), "http://127.0.0.1:9849/debug/top");
  EXPECT_EQ(TopUrl("127.0.0.1:9849"), "http://127.0.0.1:9849/debug/top");
  EXPECT_EQ(TopUrl("http://proxy/agents/m1/debug/top"), "http://proxy/agents/m1/debug/top");
  EXPECT_EQ(FormatRate(0.04), "0");
  EXPECT_EQ(FormatRate(99.94), "99.9");
  EXPECT_EQ(FormatRate(1234), "1234");
  EXPECT_EQ(FormatRate(15300), "15.3k");
  EXPECT_EQ(FormatBytes(1000), "1000 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
}

Result<TopOptions> Parse(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return ParseTopOptions(static_cast<int>(argv.size()), argv.data());
}

TEST(TopOptions, Parses) {
  auto o = Parse({"stormwatch", "top", "--once", "--json", "--sort", "conflicts", "--filter", "op",
                  "--interval", "2.5", "http://a:9849", "b:9849"});
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_TRUE(o->once);
  EXPECT_TRUE(o->json);
  EXPECT_EQ(o->sort, SortKey::kConflicts);
  EXPECT_EQ(o->filter, "op");
  EXPECT_DOUBLE_EQ(o->interval_s, 2.5);
  EXPECT_EQ(o->urls, (std::vector<std::string>{"http://a:9849", "b:9849"}));
  EXPECT_EQ(Parse({"stormwatch", "top"}).error().message,
            "at least one agent URL is needed (e.g. http://127.0.0.1:9849)");
  EXPECT_EQ(Parse({"stormwatch", "top", "--json", "u"}).error().message, "--json needs --once");
  EXPECT_EQ(Parse({"stormwatch", "top", "--sort", "bytes", "u"}).error().message, "--sort: unknown column bytes");
  EXPECT_EQ(Parse({"stormwatch", "top", "--interval", "0", "u"}).error().message,
            "--interval: not a positive number: 0");
  EXPECT_EQ(Parse({"stormwatch", "top", "--bogus", "u"}).error().message, "unknown flag --bogus");
  EXPECT_TRUE(Parse({"stormwatch", "top", "--help"})->show_help);
}

}  // namespace
}  // namespace stormwatch::top
