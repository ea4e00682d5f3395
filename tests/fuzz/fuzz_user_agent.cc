// User-Agent headers (agent/kube/user_agent): "component/version (platform) kubernetes/commit/detail".
#include "agent/kube/user_agent.h"

using namespace stormwatch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  UserAgentInfo info = ParseUserAgent(std::string_view(reinterpret_cast<const char*>(data), size));
  (void)info;
  return 0;
}
