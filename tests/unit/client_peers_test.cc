// Where each client connects from (agent/pipeline/client_peers.h): exact counts per peer IP,
// the bound on peers per client (a heavy IP survives many light ones), the bound on clients
// (a full table takes a newcomer only when it is seen more often than its least recent client).
#include "agent/pipeline/client_peers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <set>
#include <string>
#include <vector>

namespace stormwatch {
namespace {

constexpr int64_t kSec = 1000000000;

TEST(ClientPeers, CountsPerPeerIpAndKeepsTheLatestConnection) {
  ClientPeers peers;
  for (int i = 0; i < 30; ++i) peers.Observe("sa:a", "10.0.0.1:" + std::to_string(40000 + i), "10.0.0.9:6443", i);
  for (int i = 0; i < 5; ++i) peers.Observe("sa:a", "[fd00::5]:41000", "[fd00::9]:6443", 100 + i);
  peers.Observe("sa:a", "", "", 200);  // address unknown: counted for the client only
  peers.Observe("sa:a", "not-an-endpoint", "", 201);  // not an address: the same
  peers.Observe("sa:b", "10.0.0.2:1", "10.0.0.9:6443", 300);
  EXPECT_EQ(peers.TopPeers("sa:a"), nlohmann::json::parse(R"([
      {"ip": "10.0.0.1", "requests": 30, "last_peer": "10.0.0.1:40029", "last_local": "10.0.0.9:6443"},
      {"ip": "fd00::5", "requests": 5, "last_peer": "[fd00::5]:41000", "last_local": "[fd00::9]:6443"}])"));
  EXPECT_EQ(peers.TopPeers("sa:a", 1).size(), 1u);
  EXPECT_EQ(peers.TopPeers("nobody"), nlohmann::json::array());

  nlohmann::json snapshot = peers.Snapshot(10 * kSec + 300);
  ASSERT_EQ(snapshot.size(), 2u);
  EXPECT_EQ(snapshot[0]["client"], "sa:a");
  EXPECT_EQ(snapshot[0]["requests"], 37);
  EXPECT_EQ(snapshot[1]["client"], "sa:b");
  EXPECT_DOUBLE_EQ(snapshot[1]["seconds_since_last"].get<double>(), 10.0);
}

// A client's requests from the IP of its previous one are counted with the client and added to
// its peers in one step when the IP changes or the peers are read: reads in between, and IPs
// that alternate, count each request once, with the latest connection of each IP.
TEST(ClientPeers, PeersReadBetweenRequestsCountEachRequestOnce) {
  ClientPeers peers;
  auto observe = [&](const char* peer, int64_t at) {
    peers.Observe("sa:a", peer, "10.0.0.9:6443", at);
  };
  for (int i = 0; i < 3; ++i) observe("10.0.0.1:1000", i);
  EXPECT_EQ(peers.TopPeers("sa:a")[0]["requests"], 3);
  observe("10.0.0.1:1001", 3);
  EXPECT_EQ(peers.TopPeers("sa:a")[0]["requests"], 4);
  EXPECT_EQ(peers.TopPeers("sa:a")[0]["requests"], 4);  // a second read adds nothing
  observe("10.0.0.2:2000", 4);
  observe("10.0.0.1:1002", 5);
  observe("10.0.0.2:2001", 6);
  observe("10.0.0.2:2002", 7);
  EXPECT_EQ(peers.TopPeers("sa:a"), nlohmann::json::parse(R"([
      {"ip": "10.0.0.1", "requests": 5, "last_peer": "10.0.0.1:1002", "last_local": "10.0.0.9:6443"},
      {"ip": "10.0.0.2", "requests": 3, "last_peer": "10.0.0.2:2002", "last_local": "10.0.0.9:6443"}])"));
  EXPECT_EQ(peers.Snapshot(kSec)[0]["peers"][1]["requests"], 3);
}

TEST(ClientPeers, AHeavyPeerSurvivesManyLightOnes) {
  ClientPeers peers;
  for (int i = 0; i < 1000; ++i) peers.Observe("sa:a", "10.1.0.1:1", "", i);
  // 200 pods with 2 requests each churn through the other slots.
  for (int pod = 0; pod < 200; ++pod) {
    std::string ip = "10.2." + std::to_string(pod / 250) + "." + std::to_string(pod % 250 + 1);
    peers.Observe("sa:a", ip + ":5", "", 2000 + pod);
    peers.Observe("sa:a", ip + ":5", "", 2000 + pod);
  }
  nlohmann::json top = peers.TopPeers("sa:a", ClientPeers::kPeersPerClient + 5);
  ASSERT_EQ(top.size(), ClientPeers::kPeersPerClient);
  EXPECT_EQ(top[0]["ip"], "10.1.0.1");
  EXPECT_EQ(top[0]["requests"], 1000);
  // The last pod seen holds a slot; its count is an upper bound (it inherited an evicted one).
  bool last_pod_kept = false;
  for (const auto& p : top) last_pod_kept |= p["ip"] == "10.2.0.200";
  EXPECT_TRUE(last_pod_kept) << top.dump();
}

// Client names "sa:<n>" whose admission estimates are exact in a table of `capacity`, whatever
// the process's hash key: no two share their first-way counter (FrequencySketch reads a key's
// 64-byte block from its low bits, the counter of each way from bits 32-47), and a counter only
// its key increments always holds that key's count. names[i] is the i-th such name.
std::vector<std::string> NamesApart(size_t count, size_t capacity) {
  const uint64_t blocks = std::bit_ceil(std::max<size_t>(capacity / 4, 1));
  std::set<std::pair<uint64_t, uint64_t>> taken;
  std::vector<std::string> names;
  for (int n = 0; names.size() < count; ++n) {
    const std::string name = "sa:" + std::to_string(n);
    const uint64_t key = ClientPeers::KeyOf(name);
    if (taken.insert({key & (blocks - 1), (key >> 32) & 15}).second) names.push_back(name);
  }
  return names;
}

void ObserveNamed(ClientPeers& peers, const std::string& name, int64_t now_ns) {
  peers.Observe(ClientPeers::KeyOf(name), name, ParseTcpEndpoint("10.0.0.1:1"), std::nullopt,
                now_ns);
}

TEST(ClientPeers, AFullTableTakesANewcomerOnlyWhenSeenMoreOftenThanItsLeastRecent) {
  ClientPeers peers(3);
  const auto sa = NamesApart(4, 3);
  for (int c = 0; c < 3; ++c) ObserveNamed(peers, sa[c], c);
  // Full: sa[3], seen once, is no heavier than sa[0] (the least recent, seen once).
  ObserveNamed(peers, sa[3], 3);
  EXPECT_EQ(peers.Snapshot(10).size(), 3u);
  EXPECT_EQ(peers.evictions(), 0u);
  EXPECT_EQ(peers.not_admitted(), 1u);
  EXPECT_EQ(peers.TopPeers(sa[3]), nlohmann::json::array());
  // Seen twice: it takes sa[0]'s place, counted from there.
  ObserveNamed(peers, sa[3], 4);
  EXPECT_EQ(peers.evictions(), 1u);
  EXPECT_EQ(peers.not_admitted(), 1u);
  EXPECT_EQ(peers.TopPeers(sa[0]), nlohmann::json::array());
  ASSERT_EQ(peers.TopPeers(sa[3]).size(), 1u);
  EXPECT_EQ(peers.TopPeers(sa[3])[0]["requests"], 1);
  EXPECT_EQ(peers.TopPeers(sa[1]).size(), 1u);
  EXPECT_EQ(peers.total_requests(), 5u);
  // `stormwatch top` is told how many requests came from clients it cannot list.
  const nlohmann::json doc = peers.TopDocument(5);
  EXPECT_EQ(doc["requests"], 5);
  EXPECT_EQ(doc["untracked_requests"], 1);
}

// More live clients than entries, all alike (round robin): an LRU alone would hand an entry to
// a new client on 995 of these 1,000 requests; the table mostly keeps the clients it has (a
// newcomer gets in only just after an ageing, whose halving rounds its count up against the
// least recent's), and every request is counted.
TEST(ClientPeers, AlikeClientsBeyondTheBoundRarelyTurnTheTableOver) {
  ClientPeers peers(5);  // ageing every 50 additions: estimates halve 20 times here
  const auto sa = NamesApart(10, 5);
  for (int i = 0; i < 1000; ++i) ObserveNamed(peers, sa[i % 10], i);
  EXPECT_LT(peers.evictions(), 200u);
  EXPECT_GT(peers.not_admitted(), 400u);
  EXPECT_EQ(peers.total_requests(), 1000u);
  EXPECT_EQ(peers.Snapshot(1000).size(), 5u);
}

// A client that turns heavy among steady ones gets an entry within a few of its requests: the
// storm's evidence can name its peers.
TEST(ClientPeers, AHeavyNewcomerGetsInAmongSteadyClients) {
  ClientPeers peers(15);  // ageing every 150 additions: none here
  const auto sa = NamesApart(16, 15);
  int64_t t = 0;
  for (int round = 0; round < 5; ++round) {
    for (int c = 0; c < 15; ++c) ObserveNamed(peers, sa[c], ++t);
  }
  int requests = 0;
  while (peers.TopPeers(sa[15]).empty()) {
    ASSERT_LT(requests, 30);
    ObserveNamed(peers, sa[15], ++t);
    ++requests;
  }
  EXPECT_EQ(requests, 6);  // one more than the least recent client's 5
  EXPECT_EQ(peers.evictions(), 1u);
  EXPECT_EQ(peers.not_admitted(), 5u);
  EXPECT_EQ(peers.TopPeers(sa[0]), nlohmann::json::array());  // the least recent made room
}

TEST(ClientPeers, AClientTakingAnEvictedOnesPlaceStartsFromNothing) {
  ClientPeers peers(1);
  const std::string exempt = "exempt";
  const auto names = NamesApart(2, 1);
  const uint64_t a = ClientPeers::KeyOf(names[0]), b = ClientPeers::KeyOf(names[1]);
  for (int i = 0; i < 3; ++i) {
    peers.Observe(a, names[0], ParseTcpEndpoint("10.0.0." + std::to_string(i) + ":1"), ParseTcpEndpoint("10.0.0.9:6443"), kSec,
                  {.list = true, .response_bytes = 100, .status = 409, .priority_level = &exempt});
  }
  // sa:b, once seen more often than sa:a, takes its place (and its buffers): nothing of
  // sa:a's may show.
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(peers.evictions(), 0u);
    peers.Observe(b, names[1], ParseTcpEndpoint("10.1.0.1:2"), ParseTcpEndpoint("10.0.0.9:6443"), 2 * kSec, {.status = 200});
  }
  EXPECT_EQ(peers.evictions(), 1u);
  EXPECT_EQ(peers.not_admitted(), 3u);
  EXPECT_EQ(peers.TopPeers(names[0]), nlohmann::json::array());
  const nlohmann::json top = peers.TopSnapshot(2 * kSec);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0]["client"], names[1]);
  EXPECT_EQ(top[0]["requests"], 1);
  EXPECT_EQ(top[0]["lists"], 0);
  EXPECT_EQ(top[0]["list_bytes"], 0);
  EXPECT_EQ(top[0]["conflicts"], 0);
  EXPECT_EQ(top[0]["priority_level"], "");
  EXPECT_EQ(peers.TopPeers(names[1]),
            nlohmann::json::parse(R"([{"ip":"10.1.0.1","requests":1,"last_peer":"10.1.0.1:2",)"
                                  R"("last_local":"10.0.0.9:6443"}])"));
}

TEST(ClientPeers, TopSnapshotCountsListsConflictsThrottlesAndApfPerClient) {
  ClientPeers peers;
  const std::string workload_low = "workload-low", exempt = "exempt", none;
  const uint64_t a = ClientPeers::KeyOf("sa:a"), b = ClientPeers::KeyOf("sa:b"),
                 c = ClientPeers::KeyOf("sa:c");
  // sa:a: 3 LISTs of 1000 bytes, 2 GETs; then a 409 and two 429s at workload-low.
  for (int i = 0; i < 3; ++i) {
    peers.Observe(a, "sa:a", ParseTcpEndpoint("10.0.0.1:1"), std::nullopt, 1 * kSec,
                  {.list = true, .response_bytes = 1000, .status = 200, .priority_level = &exempt});
  }
  for (int i = 0; i < 2; ++i) peers.Observe(a, "sa:a", std::nullopt, std::nullopt, 1 * kSec, {.response_bytes = 7, .status = 200});
  peers.Observe(a, "sa:a", std::nullopt, std::nullopt, 2 * kSec, {.status = 409, .priority_level = &workload_low});
  for (int i = 0; i < 2; ++i) peers.Observe(a, "sa:a", std::nullopt, std::nullopt, 2 * kSec, {.status = 429, .priority_level = &none});
  // sa:b: 10 GETs long ago (quiet now); sa:c: 4 GETs.
  for (int i = 0; i < 10; ++i) peers.Observe(b, "sa:b", std::nullopt, std::nullopt, 0, {.status = 200});
  for (int i = 0; i < 4; ++i) peers.Observe(c, "sa:c", std::nullopt, std::nullopt, 40 * kSec, {.status = 200});
  EXPECT_EQ(peers.total_requests(), 22u);

  // At 41 s, seen in the last 30 s: only sa:c (sa:a's last request was at 2 s, sa:b's at 0).
  nlohmann::json top = peers.TopSnapshot(41 * kSec);
  ASSERT_EQ(top.size(), 1u) << top.dump();
  EXPECT_EQ(top[0]["client"], "sa:c");
  // With a window that holds everyone: busiest since the previous call first (sa:c's 4 were
  // before it: 0 since), then by requests.
  peers.Observe(c, "sa:c", std::nullopt, std::nullopt, 41 * kSec, {.status = 200});
  top = peers.TopSnapshot(42 * kSec, 100, 100 * kSec);
  ASSERT_EQ(top.size(), 3u) << top.dump();
  EXPECT_EQ(top[0]["client"], "sa:c");  // 1 request since the previous snapshot
  EXPECT_EQ(top[0]["requests"], 5);
  EXPECT_EQ(top[1], nlohmann::json::parse(R"({"client": "sa:b", "requests": 10, "lists": 0,
      "list_bytes": 0, "conflicts": 0, "throttled": 0, "priority_level": "",
      "seconds_since_last": 42.0})"));
  // The latest named level is kept (a 429 without one does not erase it).
  EXPECT_EQ(top[2], nlohmann::json::parse(R"({"client": "sa:a", "requests": 8, "lists": 3,
      "list_bytes": 3000, "conflicts": 1, "throttled": 2, "priority_level": "workload-low",
      "seconds_since_last": 40.0})"));
  // The limit keeps the busiest.
  top = peers.TopSnapshot(42 * kSec, 1, 100 * kSec);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0]["client"], "sa:b");
}

}  // namespace
}  // namespace stormwatch
