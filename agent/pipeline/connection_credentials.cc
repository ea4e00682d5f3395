#include "agent/pipeline/connection_credentials.h"

#include <algorithm>
#include <bit>

namespace stormwatch {

ConnectionCredentials::ConnectionCredentials(size_t slots)
    : entries_(std::bit_ceil(std::max<size_t>(slots, 1))),
      shift_(64 - std::countr_zero(entries_.size())) {}

size_t ConnectionCredentials::SlotOf(uint32_t pid, uint64_t conn) const {
  // Connections are heap addresses (their low bits alike): multiply-shift spreads them.
  if (shift_ == 64) return 0;
  return static_cast<size_t>(((conn ^ (uint64_t{pid} << 40)) * 0x9E3779B97F4A7C15ull) >> shift_);
}

void ConnectionCredentials::Remember(uint32_t pid, uint64_t conn, uint64_t fingerprint,
                                     const IdentityRef& identity) {
  if (fingerprint == 0) return;
  Entry& e = entries_[SlotOf(pid, conn)];
  if (e.fingerprint == fingerprint && e.conn == conn && e.pid == pid && e.identity == identity) return;
  e.conn = conn;
  e.pid = pid;
  e.fingerprint = fingerprint;
  e.identity = identity;
}

void ConnectionCredentials::ForgetProcess(uint32_t pid) {
  for (Entry& e : entries_) {
    if (e.fingerprint != 0 && e.pid == pid) e = Entry{};
  }
}

size_t ConnectionCredentials::size() const {
  size_t used = 0;
  for (const Entry& e : entries_) used += e.fingerprint != 0;
  return used;
}

}  // namespace stormwatch
