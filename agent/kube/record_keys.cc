#include "agent/kube/record_keys.h"

#include <algorithm>
#include <string>

#include "agent/kube/identity.h"

namespace stormwatch {

uint64_t HashFields(std::initializer_list<std::string_view> fields) {
  // The fields joined on the stack (names and namespaces are short); longer ones in a buffer
  // of the thread's, grown once: no allocation per record either way.
  size_t size = 0;
  for (std::string_view f : fields) size += f.size() + 1;
  char stack[256];
  thread_local std::string long_fields;
  char* out = stack;
  if (size > sizeof(stack)) {
    long_fields.resize(size);
    out = long_fields.data();
  }
  char* at = out;
  for (std::string_view f : fields) {
    at = std::copy(f.begin(), f.end(), at);
    *at++ = '\x1f';
  }
  return KeyedHash(std::string_view(out, size));
}

IdentityRef ShareIdentity(Identity id) {
  id.user_key = HashFields({id.user});
  id.client_key = CombineKeys(id.user_key, HashFields({id.pod_name}));
  id.keys_set = true;
  return std::make_shared<const Identity>(std::move(id));
}

RecordKeys RecordKeysOf(const RequestRecord& r) {
  RecordKeys k;
  const Identity& id = *r.identity;
  k.user = id.keys_set ? id.user_key : HashFields({id.user});
  k.client = id.keys_set ? id.client_key : CombineKeys(k.user, HashFields({id.pod_name}));
  k.resource = HashFields({r.info.api_group, r.info.resource});
  k.object = CombineKeys(k.resource, HashFields({r.info.namespace_, r.info.name}));
  k.set = true;
  return k;
}

}  // namespace stormwatch
