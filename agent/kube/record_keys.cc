#include "agent/kube/record_keys.h"

#include <string>

#include "agent/kube/identity.h"

namespace stormwatch {

uint64_t HashFields(std::initializer_list<std::string_view> fields) {
  // One buffer per thread, grown once: no allocation per record.
  thread_local std::string joined;
  joined.clear();
  for (std::string_view f : fields) {
    joined.append(f);
    joined.push_back('\x1f');
  }
  return KeyedHash(joined);
}

RecordKeys RecordKeysOf(const RequestRecord& r) {
  RecordKeys k;
  k.user = HashFields({r.identity.user});
  k.client = CombineKeys(k.user, HashFields({r.identity.pod_name}));
  k.resource = HashFields({r.info.api_group, r.info.resource});
  k.object = CombineKeys(k.resource, HashFields({r.info.namespace_, r.info.name}));
  k.set = true;
  return k;
}

}  // namespace stormwatch
