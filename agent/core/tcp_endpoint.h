// How a connection's end is written in records, evidence and the debug endpoint: "10.0.0.7:443",
// "[fd00::7]:6443". Go keeps an IPv4 peer of a dual-stack listener as ::ffff:a.b.c.d; it is
// written as the IPv4 address it is.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace stormwatch {

// "" when the address is not 4 or 16 bytes (unknown).
std::string FormatTcpEndpoint(std::span<const uint8_t> ip, uint16_t port);

// The IP part of a formatted endpoint: "10.0.0.7", "fd00::7"; "" for "".
std::string EndpointHost(const std::string& endpoint);
std::string_view EndpointHostView(std::string_view endpoint);  // the same, within `endpoint`

}  // namespace stormwatch
