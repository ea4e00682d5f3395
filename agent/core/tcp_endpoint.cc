#include "agent/core/tcp_endpoint.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>

namespace stormwatch {

namespace {

constexpr std::array<uint8_t, 12> kV4MappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

// `ip` as inet_ntop writes it, an IPv4-mapped address as IPv4; "" when not 4 or 16 bytes.
// v6: set when written as IPv6 (bracketed in an endpoint).
std::string IpText(std::span<const uint8_t> ip, bool* v6) {
  char text[INET6_ADDRSTRLEN] = {};
  if (ip.size() == 16 && std::equal(kV4MappedPrefix.begin(), kV4MappedPrefix.end(), ip.begin())) {
    ip = ip.subspan(12);
  }
  *v6 = ip.size() == 16;
  if (ip.size() != 4 && ip.size() != 16) return "";
  inet_ntop(*v6 ? AF_INET6 : AF_INET, ip.data(), text, sizeof(text));
  return text;
}

}  // namespace

std::string FormatTcpEndpoint(std::span<const uint8_t> ip, uint16_t port) {
  bool v6 = false;
  std::string host = IpText(ip, &v6);
  if (host.empty()) return "";
  return v6 ? "[" + host + "]:" + std::to_string(port) : host + ":" + std::to_string(port);
}

std::string FormatIp(const std::array<uint8_t, 16>& ip) {
  bool v6 = false;
  return IpText(ip, &v6);
}

std::optional<TcpEndpoint> TcpEndpointOf(std::span<const uint8_t> ip, uint16_t port) {
  TcpEndpoint e;
  e.port = port;
  if (ip.size() == 16) {
    std::copy(ip.begin(), ip.end(), e.ip.begin());
  } else if (ip.size() == 4) {
    std::copy(kV4MappedPrefix.begin(), kV4MappedPrefix.end(), e.ip.begin());
    std::copy(ip.begin(), ip.end(), e.ip.begin() + 12);
  } else {
    return std::nullopt;
  }
  return e;
}

std::optional<TcpEndpoint> ParseTcpEndpoint(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view host = text.substr(0, colon);
  const std::string_view port = text.substr(colon + 1);
  const bool v6 = host.starts_with('[');
  if (v6) {
    if (!host.ends_with(']')) return std::nullopt;
    host = host.substr(1, host.size() - 2);
  }
  TcpEndpoint e;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), e.port);
  if (ec != std::errc() || end != port.data() + port.size() || port.empty()) return std::nullopt;
  // inet_pton reads a NUL-terminated string: the host copied on the stack.
  char host_text[INET6_ADDRSTRLEN];
  if (host.size() >= sizeof(host_text)) return std::nullopt;
  std::memcpy(host_text, host.data(), host.size());
  host_text[host.size()] = '\0';
  if (v6) {
    if (inet_pton(AF_INET6, host_text, e.ip.data()) != 1) return std::nullopt;
  } else {
    std::copy(kV4MappedPrefix.begin(), kV4MappedPrefix.end(), e.ip.begin());
    if (inet_pton(AF_INET, host_text, e.ip.data() + 12) != 1) return std::nullopt;
  }
  return e;
}


}  // namespace stormwatch
