#include "exporters/client_cap.h"

#include <algorithm>
#include <cstddef>

namespace stormwatch {

SpaceSaving::SpaceSaving(size_t capacity) : slots_(capacity) {
  free_.reserve(capacity);
  for (size_t i = capacity; i > 0; --i) free_.push_back(i - 1);
}

void SpaceSaving::Add(const std::string& key, uint64_t amount) {
  if (auto it = index_.find(key); it != index_.end()) {
    Slot& slot = slots_[it->second];
    by_count_.erase({slot.count, it->second});
    slot.count += amount;
    by_count_.insert({slot.count, it->second});
    return;
  }
  size_t i;
  uint64_t error = 0;
  if (!free_.empty()) {
    i = free_.back();
    free_.pop_back();
  } else if (!by_count_.empty()) {
    // Full: the newcomer inherits the smallest count as its possible over-estimate.
    i = by_count_.begin()->second;
    by_count_.erase(by_count_.begin());
    index_.erase(slots_[i].key);
    error = slots_[i].count;
  } else {
    return;  // capacity 0
  }
  slots_[i] = Slot{key, error + amount, error};
  index_.emplace(key, i);
  by_count_.insert({slots_[i].count, i});
}

void SpaceSaving::Erase(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  size_t i = it->second;
  by_count_.erase({slots_[i].count, i});
  index_.erase(it);
  slots_[i] = Slot{};
  free_.push_back(i);
}

uint64_t SpaceSaving::Guaranteed(const std::string& key) const {
  auto it = index_.find(key);
  if (it == index_.end()) return 0;
  const Slot& slot = slots_[it->second];
  return slot.count - slot.error;
}

std::vector<std::pair<std::string, uint64_t>> SpaceSaving::Top(size_t n) const {
  std::vector<std::pair<std::string, uint64_t>> top;
  for (const auto& [key, i] : index_) {
    if (uint64_t g = slots_[i].count - slots_[i].error; g > 0) top.emplace_back(key, g);
  }
  auto heavier = [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  };
  if (top.size() > n) {
    std::partial_sort(top.begin(), top.begin() + static_cast<std::ptrdiff_t>(n), top.end(), heavier);
    top.resize(n);
  } else {
    std::sort(top.begin(), top.end(), heavier);
  }
  return top;
}

void SpaceSaving::Decay() {
  by_count_.clear();
  for (auto it = index_.begin(); it != index_.end();) {
    Slot& slot = slots_[it->second];
    slot.count /= 2;
    slot.error /= 2;
    if (slot.count == 0) {
      free_.push_back(it->second);
      slot = Slot{};
      it = index_.erase(it);
    } else {
      by_count_.insert({slot.count, it->second});
      ++it;
    }
  }
}

// Room for four folded candidates per slot keeps heavy hitters from being pushed out of the
// sketch by a crowd of one-off clients between two Compact calls.
ClientCap::ClientCap(size_t max_clients, int64_t idle_ns)
    : max_clients_(max_clients), idle_ns_(idle_ns), folded_(4 * max_clients) {}

void ClientCap::Admit(const std::string& client, uint64_t recent) {
  admitted_.emplace(client, Activity{.recent = recent});
}

bool ClientCap::Admit(const std::string& client, bool is_request) {
  if (client == kOtherClient) return true;
  if (auto it = admitted_.find(client); it != admitted_.end()) {
    it->second.recent += is_request;
    it->second.seen = true;
    return true;
  }
  if (auto it = reserved_.find(client); it != reserved_.end()) {
    reserved_.erase(it);
    // Carries its folded count over, so it is compared with admitted clients fairly.
    Admit(client, folded_.Guaranteed(client) + is_request);
    folded_.Erase(client);
    return true;
  }
  if (admitted_.size() + reserved_.size() < max_clients_) {
    Admit(client, uint64_t{is_request});
    return true;
  }
  if (is_request) folded_.Add(client);
  return false;
}

std::vector<std::string> ClientCap::Compact(int64_t now_ns) {
  std::vector<std::string> ended;
  for (auto it = admitted_.begin(); it != admitted_.end();) {
    Activity& a = it->second;
    if (a.seen) {
      a.seen = false;
      a.last_seen_ns = now_ns;
    } else if (now_ns - a.last_seen_ns >= idle_ns_) {
      ended.push_back(it->first);
      it = admitted_.erase(it);
      continue;
    }
    ++it;
  }

  reserved_.clear();
  std::vector<std::pair<uint64_t, std::string>> least_active;
  least_active.reserve(admitted_.size());
  for (const auto& [client, a] : admitted_) least_active.emplace_back(a.recent, client);
  std::sort(least_active.begin(), least_active.end());
  size_t next_victim = 0;
  for (const auto& [client, requests] : folded_.Top(max_clients_)) {
    if (admitted_.size() + reserved_.size() < max_clients_) {
      reserved_.insert(client);
      continue;
    }
    if (next_victim == least_active.size()) break;
    const auto& [victim_requests, victim] = least_active[next_victim];
    // Candidates come heaviest first and victims least active first: once one fails, all do.
    if (requests < kMinDisplaceRequests || requests < kDisplaceFactor * victim_requests) break;
    ended.push_back(victim);
    admitted_.erase(victim);
    reserved_.insert(client);
    ++next_victim;
  }

  for (auto& [client, a] : admitted_) a.recent /= 2;
  folded_.Decay();
  return ended;
}

}  // namespace stormwatch
