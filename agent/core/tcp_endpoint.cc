#include "agent/core/tcp_endpoint.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>

namespace stormwatch {

std::string FormatTcpEndpoint(std::span<const uint8_t> ip, uint16_t port) {
  static constexpr std::array<uint8_t, 12> kV4MappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  char text[INET6_ADDRSTRLEN] = {};
  if (ip.size() == 16 && std::equal(kV4MappedPrefix.begin(), kV4MappedPrefix.end(), ip.begin())) {
    ip = ip.subspan(12);
  }
  if (ip.size() == 4) {
    inet_ntop(AF_INET, ip.data(), text, sizeof(text));
    return std::string(text) + ":" + std::to_string(port);
  }
  if (ip.size() == 16) {
    inet_ntop(AF_INET6, ip.data(), text, sizeof(text));
    return "[" + std::string(text) + "]:" + std::to_string(port);
  }
  return "";
}

std::string_view EndpointHostView(std::string_view endpoint) {
  size_t colon = endpoint.rfind(':');
  if (colon == std::string_view::npos) return "";
  if (endpoint.starts_with('[')) return endpoint.substr(1, colon - 2);
  return endpoint.substr(0, colon);
}

std::string EndpointHost(const std::string& endpoint) { return std::string(EndpointHostView(endpoint)); }

}  // namespace stormwatch
