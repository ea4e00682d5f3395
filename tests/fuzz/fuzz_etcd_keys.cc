// etcd keys and range ends (agent/kube/etcd_keys): kube-apiserver's /registry layout, as etcd's
// gRPC calls carry them. Input: [flags] key "\n--\n" range end "\n--\n" registry prefix.
#include "agent/kube/etcd_keys.h"
#include "tests/fuzz/fuzz_common.h"

using namespace stormwatch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  bool truncated = in.Byte() & 1;
  std::string_view key = in.Field();
  std::string_view end = in.Field();
  std::string_view prefix = in.Rest();
  EtcdKey k = DecodeEtcdKey(key, end, truncated);
  (void)EtcdResourceLabel(k);
  if (!prefix.empty()) {
    EtcdKey p = DecodeEtcdKey(key, end, truncated, prefix);
    (void)EtcdResourceLabel(p);
  }
  return 0;
}
