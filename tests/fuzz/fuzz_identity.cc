// Identity from an Authorization header and a User-Agent (agent/kube/identity): bearer tokens,
// JWT claims (base64url, JSON), and the user agent's component. Input: authorization
// "\n--\n" user agent.
#include "agent/kube/identity.h"
#include "tests/fuzz/fuzz_common.h"

using namespace stormwatch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  std::string_view authorization = in.Field();
  std::string_view user_agent = in.Rest();
  Identity id = IdentityFromHeaders(authorization, user_agent);
  (void)id;
  std::string out;
  Base64UrlDecode(authorization, out);
  return 0;
}
