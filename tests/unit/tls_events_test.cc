// Decoding of the HTTP/1.1-over-TLS events: views of the captured bytes, and every lying
// length rejected instead of read past.
#include "agent/protocol/tls_events.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "bpf/events.h"
#include "tests/unit/event_bytes.h"

namespace stormwatch {
namespace {

// The record as the BPF program submits it: the fixed part, then `captured` bytes of data.
std::vector<uint8_t> DataBytes(uint32_t direction, uint32_t total_len, const std::string& data,
                               const std::string& tail) {
  sw_tls_data fixed{};
  fixed.hdr = {SW_EV_TLS_DATA, 7, 1234, 0xc000abc000, 0, 2};
  fixed.direction = direction;
  fixed.total_len = total_len;
  fixed.captured = data.size();
  fixed.tail_len = tail.size();
  std::memcpy(fixed.tail, tail.data(), tail.size());
  return EventBytes(fixed, offsetof(sw_tls_data, data), data);
}

template <typename T>
void Poke(std::vector<uint8_t>& bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(value));
}

TEST(TlsEvents, DecodesAFullyCapturedRead) {
  auto bytes = DataBytes(SW_TLS_READ, 5, "GET /", "");
  auto ev = DecodeTlsEvent(bytes);
  ASSERT_TRUE(ev.ok()) << ev.error().message;
  const auto& data = std::get<TlsDataEvent>(*ev);
  EXPECT_EQ(data.tgid, 7u);
  EXPECT_EQ(data.ts_ns, 1234u);
  EXPECT_EQ(data.conn, 0xc000abc000u);
  EXPECT_EQ(data.target, 2u);
  EXPECT_EQ(data.direction, TlsDirection::kRead);
  EXPECT_EQ(data.total_len, 5u);
  EXPECT_EQ(data.data, "GET /");
  EXPECT_TRUE(data.tail.empty());
  // A view, not a copy: the plaintext may hold a token.
  EXPECT_EQ(static_cast<const void*>(data.data.data()),
            static_cast<const void*>(bytes.data() + offsetof(sw_tls_data, data)));
}

TEST(TlsEvents, DecodesAPartlyCapturedWriteWithItsTail) {
  std::string prefix(SW_TLS_CAPTURE, 'x');
  auto bytes = DataBytes(SW_TLS_WRITE, 100000, prefix, "\r\n0\r\n\r\n");
  auto ev = DecodeTlsEvent(bytes);
  ASSERT_TRUE(ev.ok()) << ev.error().message;
  const auto& data = std::get<TlsDataEvent>(*ev);
  EXPECT_EQ(data.direction, TlsDirection::kWrite);
  EXPECT_EQ(data.total_len, 100000u);
  EXPECT_EQ(data.data.size(), size_t{SW_TLS_CAPTURE});
  EXPECT_EQ(data.tail, "\r\n0\r\n\r\n");
}

TEST(TlsEvents, IgnoresATailWhenEverythingWasCaptured) {
  auto ev = DecodeTlsEvent(DataBytes(SW_TLS_WRITE, 3, "abc", "bc"));
  ASSERT_TRUE(ev.ok()) << ev.error().message;
  EXPECT_TRUE(std::get<TlsDataEvent>(*ev).tail.empty());
}

TEST(TlsEvents, DecodesClose) {
  sw_tls_close close{};
  close.hdr = {SW_EV_TLS_CLOSE, 9, 77, 0xc0001, 0, 1};
  std::vector<uint8_t> bytes(sizeof(close));
  std::memcpy(bytes.data(), &close, sizeof(close));
  auto ev = DecodeTlsEvent(bytes);
  ASSERT_TRUE(ev.ok()) << ev.error().message;
  const auto& c = std::get<TlsCloseEvent>(*ev);
  EXPECT_EQ(c.tgid, 9u);
  EXPECT_EQ(c.ts_ns, 77u);
  EXPECT_EQ(c.conn, 0xc0001u);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeTlsEvent(std::span(bytes.data(), n)).ok()) << n << " bytes";
  }
}

TEST(TlsEvents, RejectsLyingLengths) {
  auto good = DataBytes(SW_TLS_READ, 4, "GET ", "");
  // Every truncation of the record is an error, never a read past it.
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(DecodeTlsEvent(std::span(good.data(), n)).ok()) << n << " bytes";
  }
  auto bad_direction = good;
  Poke<uint32_t>(bad_direction, offsetof(sw_tls_data, direction), 2);
  EXPECT_FALSE(DecodeTlsEvent(bad_direction).ok());

  auto captured_past_total = good;
  Poke<uint32_t>(captured_past_total, offsetof(sw_tls_data, total_len), 3);
  EXPECT_FALSE(DecodeTlsEvent(captured_past_total).ok());

  auto captured_past_limit = DataBytes(SW_TLS_READ, 10000, std::string(SW_TLS_CAPTURE, 'a'), "");
  captured_past_limit.push_back('a');
  Poke<uint32_t>(captured_past_limit, offsetof(sw_tls_data, captured), SW_TLS_CAPTURE + 1);
  EXPECT_FALSE(DecodeTlsEvent(captured_past_limit).ok());

  auto tail_too_long = DataBytes(SW_TLS_WRITE, 10000, "abc", "");
  Poke<uint32_t>(tail_too_long, offsetof(sw_tls_data, tail_len), SW_TLS_TAIL + 1);
  EXPECT_FALSE(DecodeTlsEvent(tail_too_long).ok());

  auto tail_past_total = DataBytes(SW_TLS_WRITE, 2, "", "abc");
  EXPECT_FALSE(DecodeTlsEvent(tail_past_total).ok());

  std::vector<uint8_t> h2(sizeof(sw_h2_response), 0);
  Poke<uint32_t>(h2, 0, SW_EV_H2_RESPONSE);
  EXPECT_FALSE(DecodeTlsEvent(h2).ok());
}

}  // namespace
}  // namespace stormwatch
