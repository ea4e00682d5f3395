#include "agent/pipeline/client_peers.h"

#include <algorithm>

#include "agent/kube/identity.h"
#include "agent/kube/record_keys.h"

namespace stormwatch {

uint64_t ClientPeers::KeyOf(const std::string& client) { return HashFields({client}); }

void ClientPeers::Observe(uint64_t client_key, const std::string& client,
                          const std::optional<TcpEndpoint>& peer_end,
                          const std::optional<TcpEndpoint>& local_end, int64_t now_ns,
                          const ClientRequestFacts& facts) {
  ++total_requests_;
  const uint8_t seen = seen_.Add(client_key);
  Client* tracked = clients_.Touch(client_key);
  if (!tracked && clients_.size() >= clients_.capacity() &&
      seen_.Estimate(clients_.Oldest()->first) >= seen) {
    ++not_admitted_;  // full, and the newcomer is no heavier than the client it would evict
    return;
  }
  Client& c = tracked ? *tracked : clients_.FindOrInsert(
      client_key,
      [&] {
        Client fresh;
        fresh.name = client;
        return fresh;
      },
      [](uint64_t, const Client&) {}, [&](Client& reused) { reused.Reset(client); });
  ++c.requests;
  c.last_ns = now_ns;
  if (facts.list) {
    ++c.lists;
    c.list_bytes += facts.response_bytes;
  }
  if (facts.status == 409) ++c.conflicts;
  if (facts.status == 429) ++c.throttled;
  if (facts.priority_level && !facts.priority_level->empty() &&
      c.priority_level != *facts.priority_level) {
    c.priority_level = *facts.priority_level;
  }
  if (!peer_end) return;
  if (c.current_requests > 0 && c.current_ip != peer_end->ip) c.SettlePeers();
  c.current_ip = peer_end->ip;
  ++c.current_requests;
  c.current.peer_port = peer_end->port;
  c.current.local = local_end;
}

nlohmann::json ClientPeers::PeersJson(const Client& c, size_t limit) {
  struct Row {
    std::string ip;
    uint64_t requests;  // Space-Saving's count: an upper bound once the client has had 9+ IPs
    std::string last_peer, last_local;
  };
  std::vector<Row> rows;
  c.SettlePeers();
  c.peers.ForEach([&](const std::array<uint8_t, 16>& ip, uint64_t count, uint64_t,
                      const PeerConnection& pc) {
    rows.push_back({FormatIp(ip), count, FormatTcpEndpoint(ip, pc.peer_port),
                    FormatTcpEndpoint(pc.local)});
  });
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.requests != b.requests ? a.requests > b.requests : a.ip < b.ip;
  });
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < rows.size() && i < limit; ++i) {
    out.push_back({{"ip", rows[i].ip},
                   {"requests", rows[i].requests},
                   {"last_peer", rows[i].last_peer},
                   {"last_local", rows[i].last_local}});
  }
  return out;
}

nlohmann::json ClientPeers::TopPeers(const std::string& client, size_t limit) const {
  const Client* c = clients_.Find(KeyOf(client));
  return c ? PeersJson(*c, limit) : nlohmann::json::array();
}

nlohmann::json ClientPeers::Snapshot(int64_t now_ns, size_t limit) const {
  std::vector<std::pair<const std::string*, const Client*>> sorted;
  for (const auto& [key, c] : clients_) sorted.emplace_back(&c.name, &c);
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.second->requests != b.second->requests ? a.second->requests > b.second->requests
                                                    : *a.first < *b.first;
  });
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < sorted.size() && i < limit; ++i) {
    const Client& c = *sorted[i].second;
    out.push_back({{"client", *sorted[i].first},
                   {"requests", c.requests},
                   {"seconds_since_last", std::max<int64_t>(0, now_ns - c.last_ns) / 1e9},
                   {"peers", PeersJson(c, kPeersPerClient)}});
  }
  return out;
}

nlohmann::json ClientPeers::TopSnapshot(int64_t now_ns, size_t limit, int64_t active_ns) {
  std::vector<Client*> active;
  for (auto& [key, c] : clients_) {
    if (now_ns - c.last_ns <= active_ns) active.push_back(&c);
  }
  std::sort(active.begin(), active.end(), [](const Client* a, const Client* b) {
    const uint64_t ra = a->requests - a->requests_at_top, rb = b->requests - b->requests_at_top;
    if (ra != rb) return ra > rb;
    if (a->requests != b->requests) return a->requests > b->requests;
    return a->name < b->name;
  });
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < active.size() && i < limit; ++i) {
    const Client& c = *active[i];
    out.push_back({{"client", c.name},
                   {"requests", c.requests},
                   {"lists", c.lists},
                   {"list_bytes", c.list_bytes},
                   {"conflicts", c.conflicts},
                   {"throttled", c.throttled},
                   {"priority_level", c.priority_level},
                   {"seconds_since_last", std::max<int64_t>(0, now_ns - c.last_ns) / 1e9}});
  }
  for (auto& [key, c] : clients_) c.requests_at_top = c.requests;
  return out;
}

void ClientPeers::OnRequest(const RequestRecord& r) {
  // KeyOf(client): the user's key, or that of "unknown".
  static const uint64_t kUnknownKey = KeyOf(ClientLabel(Identity{}));
  const std::string& priority_level = r.response.priority_level.empty()
                                          ? r.response.priority_level_uid
                                          : r.response.priority_level;
  Observe(r.identity->user.empty() ? kUnknownKey : r.keys.user, ClientLabel(*r.identity),
          r.peer_address, r.local_address, static_cast<int64_t>(r.end_ns),
          ClientRequestFacts{.list = r.info.verb_kind == KubeVerb::kList,
                             .response_bytes = r.response_bytes,
                             .status = r.status,
                             .priority_level = &priority_level});
}

void ClientPeers::OnStormTransition(const StormTransition& t) {
  const StormEvidence& e = t.evidence;
  const std::string& client = ClientLabel(e.identity);
  const std::string storm = e.resource.empty()
                                ? e.storm
                                : e.storm + " " + (e.api_group.empty() ? e.resource
                                                                       : e.resource + "." + e.api_group);
  if (t.state == StormState::kFiring) {
    active_storms_[client].insert(storm);
  } else if (auto it = active_storms_.find(client); it != active_storms_.end()) {
    it->second.erase(storm);
    if (it->second.empty()) active_storms_.erase(it);
  }
}

nlohmann::json ClientPeers::TopDocument(int64_t now_ns) {
  nlohmann::json clients = TopSnapshot(now_ns);
  for (nlohmann::json& c : clients) {
    nlohmann::json storms = nlohmann::json::array();
    if (auto it = active_storms_.find(c["client"].get<std::string>()); it != active_storms_.end()) {
      for (const std::string& s : it->second) storms.push_back(s);
    }
    c["storms"] = std::move(storms);
  }
  // Storms of clients not in the list (quiet now, or beyond its limit) are still shown.
  nlohmann::json storms = nlohmann::json::object();
  for (const auto& [client, set] : active_storms_) storms[client] = set;
  return {{"monotonic_s", now_ns / 1e9},
          {"requests", total_requests()},
          {"untracked_requests", not_admitted()},
          {"clients", std::move(clients)},
          {"active_storms", std::move(storms)}};
}

}  // namespace stormwatch
