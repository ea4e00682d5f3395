// etcd 3.5's gogo message structs as the synthetic interceptor events of the unit tests and the
// ring-event fuzz target lay them out (tests/unit/go_layout_test checks the real layout):
// the runtime addresses of their type descriptors, and where the fields the probes copy sit.
#pragma once

#include <cstdint>
#include <memory>

#include "agent/core/etcd_request.h"

namespace stormwatch::testing_etcd {

inline constexpr uint64_t kRangeType = 0x1000, kRangeRespType = 0x2000, kTxnType = 0x3000,
                          kTxnRespType = 0x4000;

inline std::shared_ptr<EtcdMessageTypes> MessageTypes() {
  auto t = std::make_shared<EtcdMessageTypes>();
  t->by_type = {{kRangeType, EtcdMessage::kRangeRequest}, {kRangeRespType, EtcdMessage::kRangeResponse},
                {kTxnType, EtcdMessage::kTxnRequest}, {kTxnRespType, EtcdMessage::kTxnResponse}};
  t->fields.range_limit = 48;
  t->fields.range_revision = 56;
  t->fields.range_serializable = 72;
  t->fields.range_keys_only = 73;
  t->fields.range_count_only = 74;
  t->fields.range_resp_kvs = 8;
  t->fields.range_resp_more = 32;
  t->fields.range_resp_count = 40;
  t->fields.txn_resp_succeeded = 8;
  return t;
}

}  // namespace stormwatch::testing_etcd
