#include "agent/protocol/request_assembler.h"

#include <charconv>
#include <string_view>

#include <utility>

namespace stormwatch {

RequestAssembler::RequestAssembler(IdentityResolver resolver, AssemblerLimits limits)
    : resolver_(std::move(resolver)), limits_(limits) {}

void RequestAssembler::OnRequest(const H2RequestEvent& ev) {
  std::string_view method, path, content_type, authorization, user_agent;
  for (const HeaderField& f : ev.fields) {
    // HPACK field names are lower case in HTTP/2 (RFC 9113 8.2.1). By length first: one
    // compare per field instead of up to five (client-go sends 8-10 fields per request).
    using namespace std::string_view_literals;
    switch (f.name.size()) {
      case 5:
        if (f.name == ":path"sv) path = f.value;
        break;
      case 7:
        if (f.name == ":method"sv) method = f.value;
        break;
      case 10:
        if (f.name == "user-agent"sv) user_agent = f.value;
        break;
      case 12:
        if (f.name == "content-type"sv) content_type = f.value;
        break;
      case 13:
        if (f.name == "authorization"sv) authorization = f.value;
        break;
      default:
        break;
    }
  }
  if (method.empty()) {
    ++stats_.trailers_ignored;
    return;
  }
  if (ev.truncated()) ++stats_.truncated_headers;

  const Key key{ev.tgid, ev.stream_id, ev.conn};
  if (auto it = pending_.find(key); it != pending_.end()) {
    // Same stream seen again: the first one's response was lost (e.g. reset stream).
    ++stats_.requests_without_response;
    Release(it->second);
  }
  if (pending_.size() >= limits_.max_pending) {
    ++stats_.requests_without_response;
    Release(oldest_);
  }
  RequestRecord& r = slots_[Take(key)].record;
  r.pid = ev.tgid;
  r.conn_id = ev.conn;
  r.local_address = ev.local_address;
  r.peer_address = ev.peer_address;
  r.stream_id = ev.stream_id;
  r.start_ns = ev.ts_ns;
  SetField(r.method, method);
  SetField(r.path, path);
  SetField(r.content_type, content_type);
  // The token is read here and not kept: only the identity it resolves to is.
  ResolvedIdentity resolved = resolver_({.pid = ev.tgid,
                                         .conn = ev.conn,
                                         .client_cert_der = ev.client_cert_der,
                                         .client_cert_der_len = ev.client_cert_der_len},
                                        authorization, user_agent);
  if (resolved.identity) r.identity = std::move(resolved.identity);
  r.credential_fingerprint = resolved.fingerprint;
}

uint32_t RequestAssembler::Take(const Key& key) {
  uint32_t i;
  if (free_.empty()) {
    i = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  } else {
    i = free_.back();
    free_.pop_back();
    slots_[i].record.Clear();  // as a new record, the buffers kept
  }
  Slot& slot = slots_[i];
  slot.key = key;
  slot.older = newest_;
  slot.newer = kNone;
  (newest_ == kNone ? oldest_ : slots_[newest_].newer) = i;
  newest_ = i;
  pending_.emplace(key, i);
  return i;
}

void RequestAssembler::Release(uint32_t i) {
  Slot& slot = slots_[i];
  pending_.erase(slot.key);
  (slot.older == kNone ? oldest_ : slots_[slot.older].newer) = slot.newer;
  (slot.newer == kNone ? newest_ : slots_[slot.newer].older) = slot.older;
  slot.older = slot.newer = kNone;
  free_.push_back(i);
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

RequestRecord* RequestAssembler::OnResponse(const H2ResponseEvent& ev) {
  auto it = pending_.find(Key{ev.tgid, ev.stream_id, ev.conn});
  if (it == pending_.end()) {
    ++stats_.responses_without_request;
    return nullptr;
  }
  const uint32_t i = it->second;
  Release(i);
  RequestRecord& r = slots_[i].record;
  r.end_ns = ev.ts_ns;
  // A handler that wrote no header gets net/http's implicit 200 when it returns.
  r.status = ev.status == 0 ? 200 : static_cast<int>(ev.status);
  r.response_bytes = ev.wrote_bytes > 0 ? static_cast<uint64_t>(ev.wrote_bytes) : 0;
  SetField(r.response.priority_level_uid, ev.priority_level_uid);
  SetField(r.response.flow_schema_uid, ev.flow_schema_uid);
  r.response.retry_after_s = ParseRetryAfter(ev.retry_after);
  r.response_body_prefix = ev.body_prefix;
  return &r;
}

void RequestAssembler::Expire(uint64_t now_ns) {
  while (oldest_ != kNone) {
    const uint64_t start = slots_[oldest_].record.start_ns;
    if (now_ns < start || now_ns - start < limits_.max_age_ns) break;
    ++stats_.requests_without_response;
    Release(oldest_);
  }
}

void RequestAssembler::ForgetProcess(uint32_t tgid) {
  for (uint32_t i = oldest_; i != kNone;) {
    const uint32_t newer = slots_[i].newer;
    if (slots_[i].key.tgid == tgid) {
      Release(i);
      ++stats_.requests_without_response;
    }
    i = newer;
  }
}

}  // namespace stormwatch
