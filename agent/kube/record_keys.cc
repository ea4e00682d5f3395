#include "agent/kube/record_keys.h"

#include <absl/hash/hash.h>
#include <absl/strings/string_view.h>

#include <algorithm>
#include <array>
#include <string>

#include "agent/core/strings.h"
#include "agent/kube/identity.h"

namespace stormwatch {

namespace {

// HashFields of fields that do not fit on the stack: joined in a buffer of the thread's, grown
// once.
uint64_t HashLongFields(std::initializer_list<std::string_view> fields) {
  size_t size = 0;
  for (std::string_view f : fields) size += f.size() + 1;
  thread_local std::string long_fields;
  long_fields.resize(size);
  char* at = long_fields.data();
  for (std::string_view f : fields) {
    at = AppendShort(at, f);
    *at++ = '\x1f';
  }
  return TableHash(std::string_view(long_fields.data(), size));
}

}  // namespace

uint64_t HashFields(std::initializer_list<std::string_view> fields) {
  // The fields joined on the stack in one pass (names and namespaces are short; this runs
  // several times per request); longer ones again in another buffer. No allocation either way.
  char stack[256];
  char* at = stack;
  for (std::string_view f : fields) {
    if (static_cast<size_t>(stack + sizeof(stack) - at) <= f.size()) return HashLongFields(fields);
    at = AppendShort(at, f);
    *at++ = '\x1f';
  }
  return TableHash(std::string_view(stack, static_cast<size_t>(at - stack)));
}

namespace {

// HashFields({group, resource}), remembered: an API has a few hundred resources and every
// request names one, so the pair is looked up by a cheap hash and compared in full (the key
// is the keyed hash either way) instead of SipHashing it per request. Per thread, bounded:
// 256 pairs, a newer pair taking an older one's place.
uint64_t ResourceKey(std::string_view group, std::string_view resource) {
  struct Entry {
    std::string group, resource;  // buffers kept when another pair takes the place
    uint64_t key = 0;
    bool set = false;
  };
  thread_local std::array<Entry, 256> cache;
  const size_t at = absl::HashOf(absl::string_view(group.data(), group.size()),
                                 absl::string_view(resource.data(), resource.size())) %
                    cache.size();
  Entry& e = cache[at];
  if (e.set && e.resource == resource && e.group == group) return e.key;
  e.key = HashFields({group, resource});
  e.group.assign(group);
  e.resource.assign(resource);
  e.set = true;
  return e.key;
}

}  // namespace

IdentityRef ShareIdentity(Identity id) {
  id.user_key = HashFields({id.user});
  id.client_key = CombineKeys(id.user_key, HashFields({id.pod_name}));
  id.keys_set = true;
  return IdentityRef::Make(std::move(id));
}

RecordKeys RecordKeysOf(const RequestRecord& r) {
  RecordKeys k;
  const Identity& id = *r.identity;
  k.user = id.keys_set ? id.user_key : HashFields({id.user});
  k.client = id.keys_set ? id.client_key : CombineKeys(k.user, HashFields({id.pod_name}));
  k.resource = ResourceKey(r.info.api_group, r.info.resource);
  k.object = CombineKeys(k.resource, HashFields({r.info.namespace_, r.info.name}));
  k.set = true;
  return k;
}

}  // namespace stormwatch
