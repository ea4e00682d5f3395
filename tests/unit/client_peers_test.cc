// Where each client connects from (agent/pipeline/client_peers.h): exact counts per peer IP,
// the bound on peers per client (a heavy IP survives many light ones), the bound on clients.
#include "agent/pipeline/client_peers.h"

#include <gtest/gtest.h>

namespace stormwatch {
namespace {

constexpr int64_t kSec = 1000000000;

TEST(ClientPeers, CountsPerPeerIpAndKeepsTheLatestConnection) {
  ClientPeers peers;
  for (int i = 0; i < 30; ++i) peers.Observe("sa:a", "10.0.0.1:" + std::to_string(40000 + i), "10.0.0.9:6443", i);
  for (int i = 0; i < 5; ++i) peers.Observe("sa:a", "[fd00::5]:41000", "[fd00::9]:6443", 100 + i);
  peers.Observe("sa:a", "", "", 200);  // address unknown: counted for the client only
  peers.Observe("sa:b", "10.0.0.2:1", "10.0.0.9:6443", 300);
  EXPECT_EQ(peers.TopPeers("sa:a"), nlohmann::json::parse(R"([
      {"ip": "10.0.0.1", "requests": 30, "last_peer": "10.0.0.1:40029", "last_local": "10.0.0.9:6443"},
      {"ip": "fd00::5", "requests": 5, "last_peer": "[fd00::5]:41000", "last_local": "[fd00::9]:6443"}])"));
  EXPECT_EQ(peers.TopPeers("sa:a", 1).size(), 1u);
  EXPECT_EQ(peers.TopPeers("nobody"), nlohmann::json::array());

  nlohmann::json snapshot = peers.Snapshot(10 * kSec + 300);
  ASSERT_EQ(snapshot.size(), 2u);
  EXPECT_EQ(snapshot[0]["client"], "sa:a");
  EXPECT_EQ(snapshot[0]["requests"], 36);
  EXPECT_EQ(snapshot[1]["client"], "sa:b");
  EXPECT_DOUBLE_EQ(snapshot[1]["seconds_since_last"].get<double>(), 10.0);
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

TEST(ClientPeers, ClientsAreBoundedLeastRecentFirst) {
  ClientPeers peers(3);
  for (int c = 0; c < 5; ++c) peers.Observe("sa:" + std::to_string(c), "10.0.0.1:1", "", c);
  EXPECT_EQ(peers.Snapshot(10).size(), 3u);
  EXPECT_EQ(peers.evictions(), 2u);
  EXPECT_EQ(peers.TopPeers("sa:0"), nlohmann::json::array());
  EXPECT_EQ(peers.TopPeers("sa:4").size(), 1u);
}

}  // namespace
}  // namespace stormwatch
