// HTTP/1.1 streams (agent/protocol/http1_stream): the bytes of TLS reads and writes of a few
// connections, as the ring buffer hands them to Http1Connections, in any order and split anywhere.
// Input: events of [control byte][u16 length][bytes]; the control byte picks the connection,
// the direction, a close, a lost stretch (total_len beyond the data) and the clock.
#include "agent/protocol/http1_stream.h"
#include "tests/fuzz/fuzz_common.h"

using namespace stormwatch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  uint64_t exchanges = 0;
  Http1Limits limits;
  limits.max_connections = 4;
  limits.max_head_bytes = 2048;
  limits.max_pipelined = 4;
  limits.max_body_prefix = 256;
  Http1Connections conns([&](const Http1Exchange& x) { exchanges += x.path.size() + x.body_prefix.size(); },
                         limits);
  uint64_t now = 1;
  while (!in.empty()) {
    uint8_t control = in.Byte();
    uint64_t conn = 0x1000 + (control & 7);
    now += 1000 * (control >> 6);
    if ((control & 0x38) == 0x38) {
      conns.OnClose(42, conn);
      continue;
    }
    std::string_view bytes = in.Piece(4096);
    TlsDataEvent ev;
    ev.tgid = 42;
    ev.ts_ns = now;
    ev.conn = conn;
    ev.direction = (control & 8) ? TlsDirection::kWrite : TlsDirection::kRead;
    ev.data = bytes;
    ev.total_len = static_cast<uint32_t>(bytes.size());
    if (control & 0x10) {  // a call longer than what was captured: the rest is lost, or a tail
      ev.total_len += in.U16();
      if (control & 0x20) ev.tail = in.Piece(64);
    }
    conns.OnData(ev);
  }
  conns.Expire(now + Http1Limits{}.max_idle_ns + 1);
  return 0;
}
