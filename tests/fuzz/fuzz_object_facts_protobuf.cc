// The start of a response body, Kubernetes protobuf (agent/kube/object_facts_protobuf.cc):
// "k8s\0" + runtime.Unknown wrapping an object's ObjectMeta. The magic is prepended when the
// input lacks it, so the fuzzer's bytes reach the decoder.
#include "agent/kube/object_facts.h"
#include "agent/kube/object_facts_protobuf.h"

using namespace stormwatch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string body(reinterpret_cast<const char*>(data), size);
  if (!IsKubernetesProtobuf(body)) body.insert(0, kKubernetesProtobufMagic);
  ResponseFacts facts;
  (void)ParseProtobufObjectFacts(body, &facts);
  ResponseFacts facts2;
  (void)ParseObjectFacts(body, &facts2);
  return 0;
}
