// Client certificates' subjects (agent/capture/client_cert_reader): CN and O from the DER the
// agent reads from a target's memory.
#include "agent/capture/client_cert_reader.h"

using namespace stormwatch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto subject = ParseCertificateSubject(std::string_view(reinterpret_cast<const char*>(data), size));
  (void)subject;
  return 0;
}
