// Where each client connects from. Identities say who; when one service account runs in a
// hundred pods, or a request is anonymous, the peer IP says which pod or node to look at.
// Per client label, the peer IPs its requests came from: at most kPeersPerClient, in the
// agent's Space-Saving sketch (a new IP takes the least-counted slot and inherits its count, so
// a heavy IP is never lost to many light ones). Clients are bounded: while there is room every
// client gets an entry; once the table is full a newcomer takes the least recent client's
// place only when it has been seen more often lately (FrequencySketch: TinyLFU's admission).
// With more live clients than entries (10,000 service accounts against 4,096) an LRU alone
// would hand an entry to a new client on nearly every request, counting nothing for long and
// touching a cold entry each time; this way the tracked clients stay, the others are counted in
// total_requests() only, and a client that turns heavy (a storm) gets in within a few requests.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/analysis/record_sink.h"
#include "agent/core/bounded_lru.h"
#include "agent/core/frequency_sketch.h"
#include "agent/core/space_saving.h"
#include "agent/core/tcp_endpoint.h"

namespace stormwatch {

// What `stormwatch top` shows of a request, counted per client where ClientPeers already
// finds the client (no lookup of its own on the per-request path).
struct ClientRequestFacts {
  bool list = false;            // verb LIST
  uint64_t response_bytes = 0;  // counted for LISTs
  int status = 0;               // 409 and 429 counted
  // The APF priority level the request was served at (name, or UID when unnamed); "" = none.
  const std::string* priority_level = nullptr;
};

// As a sink of the pipeline it also keeps which storms are active per client, for `top`.
class ClientPeers final : public RecordSink {
 public:
  static constexpr size_t kPeersPerClient = 8;

  explicit ClientPeers(size_t max_clients = 4096) : clients_(max_clients, Recency::kApproximate), seen_(max_clients) {}

  // One request of `client` from `peer` to `local` (an unknown peer counts the request only).
  // The per-request path: the client's key (KeyOf(client)) is known already.
  void Observe(uint64_t client_key, const std::string& client,
               const std::optional<TcpEndpoint>& peer, const std::optional<TcpEndpoint>& local,
               int64_t now_ns, const ClientRequestFacts& facts = {});
  // The same with the ends as text ("10.0.0.7:40000", as FormatTcpEndpoint writes them; ""
  // or other text: unknown).
  void Observe(const std::string& client, std::string_view peer_address,
               std::string_view local_address, int64_t now_ns) {
    Observe(KeyOf(client), client, ParseTcpEndpoint(peer_address), ParseTcpEndpoint(local_address),
            now_ns);
  }
  static uint64_t KeyOf(const std::string& client);

  // The sink: each finished request is observed with what `top` shows of it; storm
  // transitions keep the active storms per client.
  void OnRequest(const RequestRecord& r) override;
  void OnStormTransition(const StormTransition& t) override;

  // The client's peers, most requests first, at most `limit`:
  // [{"ip": "10.244.1.7", "requests": 120, "last_peer": "10.244.1.7:51234",
  //   "last_local": "10.0.0.2:6443"}] (last_*: the latest request's connection).
  nlohmann::json TopPeers(const std::string& client, size_t limit = 5) const;

  // The `limit` clients with the most requests, for /debug/clients: [{"client", "requests",
  // "seconds_since_last", "peers": TopPeers}].
  nlohmann::json Snapshot(int64_t now_ns, size_t limit = 100) const;

  // For /debug/top (`stormwatch top`): cumulative counters of the clients seen in the last
  // `active_ns`, the busiest since the previous call first, at most `limit`:
  // [{"client", "requests", "lists", "list_bytes", "conflicts", "throttled", "priority_level",
  //   "seconds_since_last"}]. Counters only grow while the client is tracked (an evicted client
  // starts again at 0): rates are their deltas, computed by the reader. Called once a second.
  nlohmann::json TopSnapshot(int64_t now_ns, size_t limit = 500,
                             int64_t active_ns = 30'000'000'000);
  // The /debug/top document: {"monotonic_s": the snapshot's time, "requests":
  // total_requests(), "untracked_requests": not_admitted(), "clients": TopSnapshot's, each with
  // "storms": ["list_storm configmaps", ...] (active), "active_storms": {client: [...]}}.
  nlohmann::json TopDocument(int64_t now_ns);
  // Requests of every client ever observed (cumulative, evicted ones included).
  uint64_t total_requests() const { return total_requests_; }

  uint64_t evictions() const { return clients_.evictions(); }
  // Requests of clients that did not get an entry (the table full, the client seen no more
  // often lately than the least recent tracked one).
  uint64_t not_admitted() const { return not_admitted_; }

 private:
  // What is kept per peer IP besides its count: the latest request's connection, as bytes
  // (written as text only when asked: most entries are never shown, and text would be copied
  // on every request that changes it).
  struct PeerConnection {
    uint16_t peer_port = 0;
    std::optional<TcpEndpoint> local;
  };
  struct Client {
    // What every request of the client reads or writes first, together: at 10,000 clients
    // each line of an entry is a cache miss of its own.
    uint64_t requests = 0;
    int64_t last_ns = 0;
    // The latest requests' peer IP, counted here while it stays the same and added to `peers`
    // in one step (Space-Saving's Add of a count) when another IP comes or the peers are read.
    // Most clients keep their connection: their sketch slot, a line of its own, is then written
    // once per change of IP instead of once per request. Mutable: settling them into `peers`
    // changes how the counts are held, not what they are.
    mutable std::array<uint8_t, 16> current_ip{};
    mutable uint64_t current_requests = 0;  // 0: nothing to settle
    mutable PeerConnection current;
    std::string priority_level;  // the latest request's that had one
    // For TopSnapshot.
    uint64_t lists = 0, list_bytes = 0, conflicts = 0, throttled = 0;
    uint64_t requests_at_top = 0;  // `requests` at the previous TopSnapshot
    std::string name;
    mutable SpaceSaving<PeerConnection, std::array<uint8_t, 16>> peers{kPeersPerClient};  // by IP

    // The current IP's requests added to `peers`.
    void SettlePeers() const {
      if (current_requests == 0) return;
      *peers.Add(current_ip, current_requests) = current;
      current_requests = 0;
    }
    // As a new Client named `client`, its buffers kept (BoundedLru's reuse of an evicted one).
    void Reset(const std::string& client) {
      name.assign(client);
      requests = 0;
      last_ns = 0;
      current_requests = 0;
      peers.Clear();
      lists = list_bytes = conflicts = throttled = 0;
      priority_level.clear();
      requests_at_top = 0;
    }
  };
  static nlohmann::json PeersJson(const Client& c, size_t limit);

  BoundedLru<uint64_t, Client> clients_;  // by KeyOf(name)
  FrequencySketch seen_;  // every client's requests lately, tracked or not: who gets an entry
  uint64_t total_requests_ = 0;
  uint64_t not_admitted_ = 0;
  // Firing storms per client label ("storm resource.group"), from the transitions (the
  // detectors bound how many fire).
  std::map<std::string, std::set<std::string>> active_storms_;
};

}  // namespace stormwatch
