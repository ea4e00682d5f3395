// The start of a response body, JSON (agent/kube/object_facts.cc): metadata.generation,
// deletionTimestamp, finalizers, resourceVersion and the rest of ResponseFacts.
#include "agent/kube/object_facts.h"

using namespace stormwatch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ResponseFacts facts;
  BodyFacts result = ParseObjectFacts(std::string_view(reinterpret_cast<const char*>(data), size), &facts);
  (void)BodyEncodingName(result.encoding);
  (void)BodyFactsResultName(result.result);
  return 0;
}
