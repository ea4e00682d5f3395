// The configuration file (agent/config/config_file): YAML applied over the defaults, then the
// effective configuration written back out.
#include "agent/config/config_file.h"

using namespace stormwatch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string yaml(reinterpret_cast<const char*>(data), size);
  auto options = ApplyConfigYaml(yaml, "fuzz.yaml", AgentOptions{});
  if (options) (void)EffectiveConfigYaml(*options);
  return 0;
}
