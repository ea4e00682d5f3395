// Integer keys for detector and metric state: the strings that name a request's client, resource
// and object hashed once per record instead of concatenated and hashed again by every detector.
// The hash is keyed with a per-process secret (TableHash): names are client-chosen, and without
// the key no one can make two clients' or objects' state share one key. 64 bits: among a million
// live keys a chance collision has odds of about 1 in 36 million million.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "agent/core/request_record.h"

namespace stormwatch {

// The keyed hash of `fields` joined by \x1f (which no name, user or resource contains).
uint64_t HashFields(std::initializer_list<std::string_view> fields);

// One key of two (order matters): for state keyed by, say, client and resource.
inline uint64_t CombineKeys(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL);
  x ^= x >> 33;  // murmur3's finaliser: every input bit moves every output bit
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// The keys of `r`'s identity and RequestInfo.
RecordKeys RecordKeysOf(const RequestRecord& r);

// `id` made shared, with its keys (Identity::user_key, ::client_key) computed once.
IdentityRef ShareIdentity(Identity id);

// `r`'s keys: as the pipeline set them, or computed now (records built by hand, in tests).
inline RecordKeys KeysOf(const RequestRecord& r) { return r.keys.set ? r.keys : RecordKeysOf(r); }

}  // namespace stormwatch
