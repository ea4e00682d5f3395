#include "exporters/client_cap.h"

#include <algorithm>
#include <cstddef>
#include <tuple>

#include "agent/kube/record_keys.h"

namespace stormwatch {

ClientName::ClientName(std::string_view label) : label(label), key(HashFields({label})) {}

// Room for four folded candidates per slot keeps heavy hitters from being pushed out of the
// sketch by a crowd of one-off clients between two Compact calls. The frequency sketch is sized
// for the folded clients, far more than the candidates: 16 counters per candidate (8,000 keys'
// worth, 128 KiB, for 500 slots), 4,096 at least, so that ten thousand light ones rarely share
// all four counters with another (256 KiB timed no faster).
ClientCap::ClientCap(size_t max_clients, int64_t idle_ns)
    : max_clients_(max_clients),
      idle_ns_(idle_ns),
      folded_(4 * max_clients),
      seen_(std::max<size_t>(16 * max_clients, 4096)) {}

void ClientCap::AdmitWith(const ClientName& client, uint64_t recent) {
  admitted_.emplace(client.key, Activity{.recent = recent, .label = std::string(client.label)});
}

bool ClientCap::Admit(const ClientName& client, bool is_request) {
  if (!is_request && last_valid_ && client.key == last_key_) return last_admitted_;
  last_admitted_ = Decide(client, is_request);
  last_key_ = client.key;
  last_valid_ = true;
  return last_admitted_;
}

bool ClientCap::Decide(const ClientName& client, bool is_request) {
  if (client.label == kOtherClient) return true;
  if (auto it = admitted_.find(client.key); it != admitted_.end()) {
    it->second.recent += is_request;
    it->second.seen = true;
    return true;
  }
  // Slots are reserved only between a Compact and the reserved clients' next request.
  if (auto it = reserved_.empty() ? reserved_.end() : reserved_.find(client.key); it != reserved_.end()) {
    reserved_.erase(it);
    // Carries its folded count over, so it is compared with admitted clients fairly.
    AdmitWith(client, folded_.Guaranteed(client.key) + is_request);
    folded_.Erase(client.key);
    return true;
  }
  if (admitted_.size() + reserved_.size() < max_clients_) {
    AdmitWith(client, uint64_t{is_request});
    return true;
  }
  if (!is_request) return false;
  const uint8_t seen = seen_.Add(client.key);
  if (const uint64_t* victim = folded_.NextVictim();
      victim && *victim != client.key && seen <= seen_.Estimate(*victim)) {
    return false;  // no heavier lately than the candidate it would replace (see the header)
  }
  folded_.Add(client.key);
  return false;
}

std::vector<std::string> ClientCap::Compact(int64_t now_ns) {
  last_valid_ = false;
  std::vector<std::string> ended;
  for (auto it = admitted_.begin(); it != admitted_.end();) {
    Activity& a = it->second;
    if (a.seen) {
      a.seen = false;
      a.last_seen_ns = now_ns;
    } else if (now_ns - a.last_seen_ns >= idle_ns_) {
      ended.push_back(std::move(a.label));
      admitted_.erase(it++);
      continue;
    }
    ++it;
  }

  reserved_.clear();
  // Least active first; ties by label, so the choice does not depend on the process's hash key.
  std::vector<std::tuple<uint64_t, std::string_view, uint64_t>> least_active;
  least_active.reserve(admitted_.size());
  for (const auto& [key, a] : admitted_) least_active.emplace_back(a.recent, a.label, key);
  std::sort(least_active.begin(), least_active.end());
  size_t next_victim = 0;
  for (const auto& [client, requests] : folded_.Top(max_clients_)) {
    if (admitted_.size() + reserved_.size() < max_clients_) {
      reserved_.insert(client);
      continue;
    }
    if (next_victim == least_active.size()) break;
    const auto& [victim_requests, victim_label, victim] = least_active[next_victim];
    // Candidates come heaviest first and victims least active first: once one fails, all do.
    if (requests < kMinDisplaceRequests || requests < kDisplaceFactor * victim_requests) break;
    ended.emplace_back(victim_label);
    admitted_.erase(victim);  // after the copy: the label is the entry's
    reserved_.insert(client);
    ++next_victim;
  }

  for (auto& [client, a] : admitted_) a.recent /= 2;
  folded_.Decay();
  return ended;
}

}  // namespace stormwatch
