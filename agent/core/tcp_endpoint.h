// How a connection's end is written in records, evidence and the debug endpoint: "10.0.0.7:443",
// "[fd00::7]:6443". Go keeps an IPv4 peer of a dual-stack listener as ::ffff:a.b.c.d; it is
// written as the IPv4 address it is.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace stormwatch {

// "" when the address is not 4 or 16 bytes (unknown).
std::string FormatTcpEndpoint(std::span<const uint8_t> ip, uint16_t port);

// An endpoint as bytes, as records carry it (written as text only where shown or stored): an
// IPv4 address as ::ffff:a.b.c.d (Go's form; written back as a.b.c.d).
struct TcpEndpoint {
  std::array<uint8_t, 16> ip{};
  uint16_t port = 0;
  bool operator==(const TcpEndpoint&) const = default;
};
// `ip` (4 or 16 bytes) and `port` as an endpoint; nullopt for any other length (unknown).
std::optional<TcpEndpoint> TcpEndpointOf(std::span<const uint8_t> ip, uint16_t port);
// FormatTcpEndpoint's text read back ("10.0.0.7:443", "[fd00::7]:6443"); nullopt for
// anything else.
std::optional<TcpEndpoint> ParseTcpEndpoint(std::string_view text);
inline std::string FormatTcpEndpoint(const TcpEndpoint& e) { return FormatTcpEndpoint(e.ip, e.port); }
// The same for an endpoint that may be unknown: "" then.
inline std::string FormatTcpEndpoint(const std::optional<TcpEndpoint>& e) {
  return e ? FormatTcpEndpoint(*e) : std::string();
}
// The IP alone: "10.0.0.7", "fd00::7".
std::string FormatIp(const std::array<uint8_t, 16>& ip);

}  // namespace stormwatch
