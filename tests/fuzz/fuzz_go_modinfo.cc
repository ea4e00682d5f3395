// Go build info module lines (agent/capture/go_binary: ParseGoModInfo) and Go version strings,
// the text of a binary's .go.buildinfo. Input: Go version "\n--\n" module info.
#include "agent/capture/go_binary.h"
#include "tests/fuzz/fuzz_common.h"

using namespace stormwatch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  std::string_view version = in.Field();
  std::string_view modinfo = in.Rest();
  (void)GoVersion::Parse(version);
  auto info = ParseGoModInfo(version, modinfo);
  if (info) (void)info->FindModule("golang.org/x/net");
  return 0;
}
