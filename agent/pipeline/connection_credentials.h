// Each connection's last credential the API server authenticated, and who it named: a
// request on the same connection with the same credential (CredentialFingerprint: the token's
// length, its last 32 bytes, the user agent) is named without hashing its whole token.
// client-go sends one token per connection for an hour (until its file is rotated), so nearly
// every request finds its connection's.
//
// Remembered only after the server authenticated a request with it (the response came through
// APF, which runs after authentication, or succeeded; never a 401): a client cannot have its own
// later requests named after claims it wrote into a refused token, and a token the server
// refuses, retried in a loop, is looked up in the identity cache each time, as before. Per
// connection: a refused token that ends as an accepted one does is named after the accepted one
// only on the connection that sent both, i.e. after its own sender.
//
// Bounded: one entry per slot, the slot chosen by the connection (a connection taking another's
// slot pushes it out). A slot holds no token, only the keyed fingerprint. Go reuses a closed
// connection's memory: a new connection at an old one's address is named from its entry only
// if its credential has the same fingerprint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "agent/core/request_record.h"

namespace stormwatch {

class ConnectionCredentials {
 public:
  // `slots` rounded up to a power of two (at least 1).
  explicit ConnectionCredentials(size_t slots);

  // The identity remembered for `conn` of process `pid` under `fingerprint` (not 0), or nullptr.
  const IdentityRef* Find(uint32_t pid, uint64_t conn, uint64_t fingerprint) const {
    const Entry& e = entries_[SlotOf(pid, conn)];
    return e.fingerprint == fingerprint && e.conn == conn && e.pid == pid && fingerprint != 0
               ? &e.identity
               : nullptr;
  }
  // After the server authenticated a request of `conn` with the credential of `fingerprint`.
  void Remember(uint32_t pid, uint64_t conn, uint64_t fingerprint, const IdentityRef& identity);
  // The process went away: its entries are dropped (their identities released).
  void ForgetProcess(uint32_t pid);

  size_t slots() const { return entries_.size(); }
  size_t size() const;  // slots in use

 private:
  struct Entry {
    uint64_t conn = 0;
    uint64_t fingerprint = 0;  // 0: free
    uint32_t pid = 0;
    IdentityRef identity;  // null when free
  };
  size_t SlotOf(uint32_t pid, uint64_t conn) const;

  std::vector<Entry> entries_;
  int shift_;  // 64 - log2(slots): the slot from a multiply's high bits
};

}  // namespace stormwatch
