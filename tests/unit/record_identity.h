// Records built by hand in tests: their identity is shared and immutable, so a test that sets
// its fields one by one edits a copy of its own.
#pragma once


#include "agent/core/request_record.h"

namespace stormwatch {

// The record's identity, copied for this record alone and returned for editing.
inline Identity& EditIdentity(RequestRecord& r) {
  r.identity = IdentityRef::Make(*r.identity);
  // Made here, not const, and referred to by this record alone.
  return const_cast<Identity&>(*r.identity);
}

}  // namespace stormwatch
