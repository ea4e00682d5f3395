#include "agent/protocol/request_assembler.h"

#include <charconv>

#include <utility>

namespace stormwatch {

RequestAssembler::RequestAssembler(IdentityResolver resolver, AssemblerLimits limits)
    : resolver_(std::move(resolver)), limits_(limits) {}

void RequestAssembler::OnRequest(const H2RequestEvent& ev) {
  RequestRecord r;
  r.pid = ev.tgid;
  r.conn_id = ev.conn;
  r.local_address = ev.local_address;
  r.peer_address = ev.peer_address;
  r.stream_id = ev.stream_id;
  r.start_ns = ev.ts_ns;
  std::string_view authorization, user_agent;
  for (const HeaderField& f : ev.fields) {
    // HPACK field names are lower case in HTTP/2 (RFC 9113 8.2.1).
    if (f.name == ":method") {
      r.method = f.value;
    } else if (f.name == ":path") {
      r.path = f.value;
    } else if (f.name == "content-type") {
      r.content_type = f.value;
    } else if (f.name == "authorization") {
      authorization = f.value;
    } else if (f.name == "user-agent") {
      user_agent = f.value;
    }
  }
  if (r.method.empty()) {
    ++stats_.trailers_ignored;
    return;
  }
  if (ev.truncated()) ++stats_.truncated_headers;
  if (IdentityRef identity = resolver_({.pid = ev.tgid,
                                        .conn = ev.conn,
                                        .client_cert_der = ev.client_cert_der,
                                        .client_cert_der_len = ev.client_cert_der_len},
                                       authorization, user_agent)) {
    r.identity = std::move(identity);
  }

  Key key{ev.tgid, ev.stream_id, ev.conn};
  if (auto it = pending_.find(key); it != pending_.end()) {
    // Same stream seen again: the first one's response was lost (e.g. reset stream).
    ++stats_.requests_without_response;
    order_.erase(it->second.order);
    pending_.erase(it);
  }
  if (pending_.size() >= limits_.max_pending) {
    ++stats_.requests_without_response;
    pending_.erase(order_.front());
    order_.pop_front();
  }
  order_.push_back(key);
  pending_.emplace(key, Pending{std::move(r), std::prev(order_.end())});
}

int ParseRetryAfter(std::string_view value) {
  // kube-apiserver sends delay-seconds; an HTTP-date (never sent by it) is not interpreted.
  int seconds = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
  if (value.empty() || ec != std::errc() || end != value.data() + value.size() || seconds < 0) {
    return -1;
  }
  return seconds;
}

std::optional<RequestRecord> RequestAssembler::OnResponse(const H2ResponseEvent& ev) {
  auto it = pending_.find(Key{ev.tgid, ev.stream_id, ev.conn});
  if (it == pending_.end()) {
    ++stats_.responses_without_request;
    return std::nullopt;
  }
  RequestRecord r = std::move(it->second.record);
  order_.erase(it->second.order);
  pending_.erase(it);
  r.end_ns = ev.ts_ns;
  // A handler that wrote no header gets net/http's implicit 200 when it returns.
  r.status = ev.status == 0 ? 200 : static_cast<int>(ev.status);
  r.response_bytes = ev.wrote_bytes > 0 ? static_cast<uint64_t>(ev.wrote_bytes) : 0;
  r.response.priority_level_uid = ev.priority_level_uid;
  r.response.flow_schema_uid = ev.flow_schema_uid;
  r.response.retry_after_s = ParseRetryAfter(ev.retry_after);
  r.response_body_prefix = ev.body_prefix;
  return r;
}

void RequestAssembler::Expire(uint64_t now_ns) {
  while (!order_.empty()) {
    auto it = pending_.find(order_.front());
    uint64_t start = it->second.record.start_ns;
    if (now_ns < start || now_ns - start < limits_.max_age_ns) break;
    ++stats_.requests_without_response;
    pending_.erase(it);
    order_.pop_front();
  }
}

void RequestAssembler::ForgetProcess(uint32_t tgid) {
  for (auto it = order_.begin(); it != order_.end();) {
    if (it->tgid == tgid) {
      pending_.erase(*it);
      it = order_.erase(it);
      ++stats_.requests_without_response;
    } else {
      ++it;
    }
  }
}

}  // namespace stormwatch
