// Joins the two halves of an HTTP/2 request (decoded headers at processHeaders, the result at
// handlerDone) into one RequestRecord. Pure and single-threaded; bounded state.
//
// Requests in flight wait in slots that are reused, each keeping its record's string buffers,
// found by a flat index and chained oldest first through the slots: once the slots have grown
// to the most requests in flight at once, joining a request allocates nothing.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <cstdint>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/core/request_record.h"
#include "agent/protocol/h2_events.h"

namespace stormwatch {

// Turns credentials into an identity at once, so no token is kept past the event that held it.
// The connection lets it fall back to the connection's client certificate. Shared: the record
// carries it as RequestRecord::identity, so a cached identity is never copied for
// detectors. With it, the credential's fingerprint (RequestRecord::credential_fingerprint).
struct ResolvedIdentity {
  ResolvedIdentity(IdentityRef identity, uint64_t fingerprint = 0)  // NOLINT: an identity converts
      : identity(std::move(identity)), fingerprint(fingerprint) {}
  IdentityRef identity;
  uint64_t fingerprint = 0;
};
using IdentityResolver = std::function<ResolvedIdentity(const RequestConnection& connection,
                                                        std::string_view authorization,
                                                        std::string_view user_agent)>;

// Retry-After as kube-apiserver sends it (delay-seconds); -1 when absent or not a number.
int ParseRetryAfter(std::string_view value);

struct AssemblerLimits {
  size_t max_pending = 65536;                    // in-flight requests (watches included)
  uint64_t max_age_ns = 2 * 3600ull * 1000000000;  // longer than any apiserver watch timeout
  // Decoded identities the resolver keeps (limits.max_identities): a token not among them is
  // decoded again (~12 us); each kept one costs ~850 bytes (memory_bound).
  size_t max_identities = 16384;
};

struct AssemblerStats {
  uint64_t requests_without_response = 0;  // evicted or expired pending requests
  uint64_t responses_without_request = 0;  // e.g. in flight when the agent attached
  uint64_t trailers_ignored = 0;           // HEADERS frames without :method (trailers)
  uint64_t truncated_headers = 0;          // requests whose header fields were cut in BPF
};

class RequestAssembler {
 public:
  RequestAssembler(IdentityResolver resolver, AssemblerLimits limits = {});

  void OnRequest(const H2RequestEvent& ev);
  // The record `ev` completes, the assembler's own: the caller's to read and change until the
  // next call to the assembler. nullptr when no request waits for it.
  RequestRecord* OnResponse(const H2ResponseEvent& ev);
  // Drops pending requests older than max_age (their response will never be matched).
  void Expire(uint64_t now_ns);
  // Forgets every pending request of a process that went away.
  void ForgetProcess(uint32_t tgid);

  size_t pending() const { return pending_.size(); }
  const AssemblerStats& stats() const { return stats_; }

 private:
  struct Key {
    uint32_t tgid;
    uint32_t stream_id;
    uint64_t conn;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>{}(k.conn ^ (uint64_t{k.tgid} << 32) ^ k.stream_id * 0x9E3779B97F4A7C15ull);
    }
  };
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Slot {
    RequestRecord record;  // a request in flight; when free, the buffers for the next one
    Key key{};
    uint32_t older = kNone, newer = kNone;  // arrival order (oldest_ first), for eviction
  };

  // A free slot for `key`'s request (its record as a new one, the buffers kept), the newest.
  uint32_t Take(const Key& key);
  // Frees pending slot `i` (unindexed, unlinked); its record stays readable until the next Take.
  void Release(uint32_t i);

  IdentityResolver resolver_;
  AssemblerLimits limits_;
  std::vector<Slot> slots_;  // grows to the most requests in flight at once
  std::vector<uint32_t> free_;
  absl::flat_hash_map<Key, uint32_t, KeyHash> pending_;  // slot by request
  uint32_t oldest_ = kNone, newest_ = kNone;
  AssemblerStats stats_;
};

}  // namespace stormwatch
