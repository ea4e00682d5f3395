#include "exporters/client_cap.h"

#include <algorithm>
#include <cstddef>

namespace stormwatch {

SpaceSaving::SpaceSaving(size_t capacity) : slots_(capacity) {
  free_.reserve(capacity);
  heap_.reserve(capacity);
  for (size_t i = capacity; i > 0; --i) free_.push_back(static_cast<uint32_t>(i - 1));
}

void SpaceSaving::SiftUp(size_t pos) {
  const uint32_t slot = heap_[pos];
  while (pos > 0) {
    const size_t parent = (pos - 1) / 2;
    if (!Before(slot, heap_[parent])) break;
    Place(pos, heap_[parent]);
    pos = parent;
  }
  Place(pos, slot);
}

void SpaceSaving::SiftDown(size_t pos) {
  const uint32_t slot = heap_[pos];
  for (;;) {
    size_t child = 2 * pos + 1;
    if (child >= heap_.size()) break;
    if (child + 1 < heap_.size() && Before(heap_[child + 1], heap_[child])) ++child;
    if (!Before(heap_[child], slot)) break;
    Place(pos, heap_[child]);
    pos = child;
  }
  Place(pos, slot);
}

void SpaceSaving::RemoveFromHeap(uint32_t slot) {
  const size_t pos = slots_[slot].heap_pos;
  const uint32_t last = heap_.back();
  heap_.pop_back();
  slots_[slot].heap_pos = kNotInHeap;
  if (last == slot) return;
  Place(pos, last);
  SiftUp(pos);
  SiftDown(slots_[last].heap_pos);
}

void SpaceSaving::Add(const std::string& key, uint64_t amount) {
  if (auto it = index_.find(key); it != index_.end()) {
    Slot& slot = slots_[it->second];
    slot.count += amount;
    SiftDown(slot.heap_pos);  // a larger count sinks
    return;
  }
  uint32_t i;
  uint64_t error = 0;
  if (!free_.empty()) {
    i = free_.back();
    free_.pop_back();
    heap_.push_back(i);
    slots_[i].heap_pos = static_cast<uint32_t>(heap_.size() - 1);
  } else if (!heap_.empty()) {
    // Full: the newcomer inherits the smallest count as its possible over-estimate.
    i = heap_.front();
    index_.erase(std::string_view(slots_[i].key));
    error = slots_[i].count;
  } else {
    return;  // capacity 0
  }
  Slot& slot = slots_[i];
  slot.key.assign(key);  // reuses the slot's buffer
  slot.count = error + amount;
  slot.error = error;
  index_.emplace(std::string_view(slot.key), i);
  SiftUp(slot.heap_pos);
  SiftDown(slot.heap_pos);
}

void SpaceSaving::Erase(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  const uint32_t i = it->second;
  index_.erase(it);
  RemoveFromHeap(i);
  slots_[i].key.clear();
  slots_[i].count = slots_[i].error = 0;
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
  heap_.clear();
  for (auto it = index_.begin(); it != index_.end();) {
    const uint32_t i = it->second;
    Slot& slot = slots_[i];
    slot.count /= 2;
    slot.error /= 2;
    if (slot.count == 0) {
      index_.erase(it++);
      slot.key.clear();
      slot.error = 0;
      slot.heap_pos = kNotInHeap;
      free_.push_back(i);
    } else {
      heap_.push_back(i);
      ++it;
    }
  }
  // Halving keeps no heap order (counts tie): rebuilt bottom-up.
  for (size_t pos = 0; pos < heap_.size(); ++pos) slots_[heap_[pos]].heap_pos = static_cast<uint32_t>(pos);
  for (size_t pos = heap_.size() / 2; pos-- > 0;) SiftDown(pos);
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
  // Slots are reserved only between a Compact and the reserved clients' next request.
  if (auto it = reserved_.empty() ? reserved_.end() : reserved_.find(client); it != reserved_.end()) {
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
      admitted_.erase(it++);
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
