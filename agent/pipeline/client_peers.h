// Where each client connects from. Identities say who; when one service account runs in a
// hundred pods, or a request is anonymous, the peer IP says which pod or node to look at.
// Per client label, the peer IPs its requests came from: at most kPeersPerClient, kept
// Space-Saving style (a new IP takes the least-counted slot and inherits its count, so a heavy
// IP is never lost to many light ones). Clients are bounded the same way, least recent first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/analysis/bounded_lru.h"

namespace stormwatch {

class ClientPeers {
 public:
  static constexpr size_t kPeersPerClient = 8;

  explicit ClientPeers(size_t max_clients = 4096) : clients_(max_clients) {}

  // One request of `client` from `peer_address` to `local_address` ("ip:port"; an empty peer
  // counts the request only).
  void Observe(const std::string& client, const std::string& peer_address,
               const std::string& local_address, int64_t now_ns) {
    Observe(KeyOf(client), client, peer_address, local_address, now_ns);
  }
  // The same with the client's key (KeyOf(client)) already known: the per-request path.
  void Observe(uint64_t client_key, const std::string& client, const std::string& peer_address,
               const std::string& local_address, int64_t now_ns);
  static uint64_t KeyOf(const std::string& client);

  // The client's peers, most requests first, at most `limit`:
  // [{"ip": "10.244.1.7", "requests": 120, "last_peer": "10.244.1.7:51234",
  //   "last_local": "10.0.0.2:6443"}] (last_*: the latest request's connection).
  nlohmann::json TopPeers(const std::string& client, size_t limit = 5) const;

  // The `limit` clients with the most requests, for /debug/clients: [{"client", "requests",
  // "seconds_since_last", "peers": TopPeers}].
  nlohmann::json Snapshot(int64_t now_ns, size_t limit = 100) const;

  uint64_t evictions() const { return clients_.evictions(); }

 private:
  struct Peer {
    std::string ip;
    std::string last_peer;
    std::string last_local;
    uint64_t requests = 0;
  };
  struct Client {
    std::string name;
    uint64_t requests = 0;
    int64_t last_ns = 0;
    std::vector<Peer> peers;  // <= kPeersPerClient
  };
  static nlohmann::json PeersJson(const Client& c, size_t limit);

  BoundedLru<uint64_t, Client> clients_;  // by KeyOf(name)
};

}  // namespace stormwatch
