#include "agent/capture/gohttp_probes.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/utsname.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "gohttp.skel.h"

namespace stormwatch {
namespace {
constexpr uint32_t kMaxSlots = 256;  // SW_MAX_TARGET_SLOTS in the BPF program

bool KernelAtLeast(int major, int minor) {
  utsname u;
  if (uname(&u) != 0) return false;
  int ma = 0, mi = 0;
  if (std::sscanf(u.release, "%d.%d", &ma, &mi) != 2) return false;
  return ma > major || (ma == major && mi >= minor);
}

// Destroys links all at once, one thread each: each uprobe_multi link waits for an RCU grace
// period as it goes, and waiters of the same grace period are served together (the agent's
// whole exit with two targets' 14 links: 0.2 s). Perf-event uprobes (before Linux 6.6) are
// removed one after the other by the kernel whatever the threads (~0.1 s each).
void DestroyLinks(std::vector<BpfLink> links) {
  if (links.size() <= 1) return;  // the one goes with the vector
  std::vector<std::thread> closers;
  closers.reserve(links.size());
  for (BpfLink& l : links) {
    try {
      closers.emplace_back([link = std::move(l)] {});  // the thread's copy goes as it ends
    } catch (const std::system_error&) {
      l.reset();  // no thread to spare: on this one
    }
  }
  for (std::thread& t : closers) t.join();
}

}  // namespace

void BpfLinkDeleter::operator()(bpf_link* link) const { bpf_link__destroy(link); }
void RingBufferDeleter::operator()(ring_buffer* ring) const { ring_buffer__free(ring); }
void GoHttpProbes::SkeletonDeleter::operator()(gohttp_bpf* skel) const { gohttp_bpf__destroy(skel); }

// An attachment being built: until Commit, leaving (an error, an exception) gives back its
// slots and gRPC message entries; its links go with it.
class GoHttpProbes::AttachmentDraft {
 public:
  AttachmentDraft(GoHttpProbes& probes, pid_t pid) : probes_(probes) { a.pid = pid; }
  ~AttachmentDraft() {
    if (committed_) return;
    for (const sw_grpc_message_key& k : a.message_keys) {
      bpf_map__delete_elem(probes_.skel_->maps.grpc_messages, &k, sizeof(k), 0);
    }
    for (uint32_t s : a.slots) probes_.slot_used_[s] = false;
  }
  AttachmentDraft(const AttachmentDraft&) = delete;
  AttachmentDraft& operator=(const AttachmentDraft&) = delete;
  Attachment a;

 private:
  friend class GoHttpProbes;
  GoHttpProbes& probes_;
  bool committed_ = false;
};

Result<std::unique_ptr<GoHttpProbes>> GoHttpProbes::Load(size_t ring_buffer_bytes,
                                                         EventHandler on_event) {
  std::unique_ptr<GoHttpProbes> p(new GoHttpProbes());
  p->on_event_ = std::move(on_event);
  p->ncpus_ = libbpf_num_possible_cpus();
  if (p->ncpus_ <= 0) return Error{"cannot count possible CPUs", ErrorCode::kSystem};
  p->slot_used_.assign(kMaxSlots, false);

  p->skel_.reset(gohttp_bpf__open());
  if (!p->skel_) return Error{std::string("opening BPF object: ") + std::strerror(errno), ErrorCode::kSystem};
  // Linux 6.6+: one uprobe_multi link per program and target. Removing a uprobe attached through
  // perf_event_open waits for an RCU grace period under a kernel-wide mutex, one uprobe after the
  // other (~0.1 s each here: 2.4 s for two targets' 19 uprobes); a uprobe_multi link removes all
  // its uprobes with one wait, outside that mutex, so links destroyed together take one.
  // STORMWATCH_UPROBE_MULTI=0 keeps the per-uprobe path on a 6.6+ kernel: what 5.17-6.5
  // kernels (Debian 12, Amazon Linux 2023: 6.1) get, so it is tested here too, and a way round
  // a kernel whose uprobe_multi misbehaves.
  const char* multi = std::getenv("STORMWATCH_UPROBE_MULTI");
  p->uprobe_multi_ = KernelAtLeast(6, 6) && !(multi && std::string_view(multi) == "0");
  spdlog::info("uprobes: {}", p->uprobe_multi_ ? "one uprobe_multi link per program and target"
                                               : "one perf event per uprobe");
  if (p->uprobe_multi_) {
    bpf_program* prog;
    bpf_object__for_each_program(prog, p->skel_->obj) {
      bpf_program__set_expected_attach_type(prog, BPF_TRACE_UPROBE_MULTI);
    }
  }
  if (int err = bpf_map__set_max_entries(p->skel_->maps.events, ring_buffer_bytes); err) {
    return Error{"ring buffer size " + std::to_string(ring_buffer_bytes) +
                 " rejected (must be a power of two multiple of the page size)", ErrorCode::kInvalid};
  }
  if (int err = gohttp_bpf__load(p->skel_.get()); err) {
    return Error{std::string("loading BPF programs (need root or CAP_BPF+CAP_PERFMON): ") +
                 std::strerror(-err), ErrorCode::kSystem};
  }
  p->ring_.reset(ring_buffer__new(bpf_map__fd(p->skel_->maps.events),
                                  &GoHttpProbes::OnRingBufferEvent, p.get(), nullptr));
  if (!p->ring_) return Error{std::string("creating ring buffer: ") + std::strerror(errno), ErrorCode::kSystem};
  p->detach_thread_ = std::thread([raw = p.get()] { raw->ReapLinks(); });
  return p;
}

GoHttpProbes::~GoHttpProbes() {
  if (detach_thread_.joinable()) {
    {
      std::lock_guard lock(detach_mutex_);
      stopping_ = true;
    }
    detach_wake_.notify_one();
    detach_thread_.join();  // finishes what was queued
  }
  std::vector<BpfLink> links;
  for (auto& [handle, a] : attachments_) {
    for (BpfLink& l : a.links) links.push_back(std::move(l));
  }
  DestroyLinks(std::move(links));
  // Then the ring buffer and the programs, as the members go (declared in that order).
}

int GoHttpProbes::OnRingBufferEvent(void* ctx, void* data, size_t size) {
  // A C callback: nothing may throw across it.
  auto* self = static_cast<GoHttpProbes*>(ctx);
  try {
    self->on_event_({static_cast<const uint8_t*>(data), size});
  } catch (const std::exception& e) {
    // Counted (stormwatch_capture_lost_total{cause="event_handler_failed"}), logged once.
    if (self->handler_failures_++ == 0) spdlog::error("event dropped: handler failed: {}", e.what());
  } catch (...) {  // not a std::exception: counted the same
    if (self->handler_failures_++ == 0) spdlog::error("event dropped: handler failed");
  }
  return 0;
}

bool GoHttpProbes::AttachUprobe(Attachment& a, bpf_program* prog, pid_t pid,
                                const std::string& binary_path, EntryProbeSite site, uint32_t slot) {
  // The cookie: the offsets slot, and above it the EFLAGS under which the site's stack-check
  // branch goes to morestack (the BPF program then skips the hit: the call re-runs).
  uint64_t cookie = slot | (uint64_t{site.morestack_if_flags} << 32);
  if (uprobe_multi_) {  // attached with the program's other sites by AttachGathered
    auto& [offsets, cookies] = a.sites[prog];
    offsets.push_back(site.offset);
    cookies.push_back(cookie);
    return true;
  }
  LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = cookie, .retprobe = false);
  BpfLink link(bpf_program__attach_uprobe_opts(prog, pid, binary_path.c_str(), site.offset, &opts));
  if (!link) return false;
  a.links.push_back(std::move(link));
  return true;
}

bool GoHttpProbes::AttachGathered(Attachment& a, pid_t pid, const std::string& binary_path) {
  for (auto& [prog, s] : a.sites) {
    auto& [offsets, cookies] = s;
    LIBBPF_OPTS(bpf_uprobe_multi_opts, opts, .offsets = offsets.data(), .cookies = cookies.data(),
                .cnt = offsets.size());
    BpfLink link(bpf_program__attach_uprobe_multi(prog, pid, binary_path.c_str(), nullptr, &opts));
    if (!link) return false;
    a.links.push_back(std::move(link));
  }
  a.sites.clear();
  return true;
}

Result<uint32_t> GoHttpProbes::Attach(pid_t pid, const std::string& binary_path,
                                      const std::vector<GoHttp2ProbeSites>& stacks,
                                      const std::optional<Http1ProbeSites>& http1) {
  if (stacks.empty()) return Error{"no HTTP/2 stack to attach to in " + binary_path, ErrorCode::kNotFound};
  ReleaseDetachedSlots();
  AttachmentDraft draft(*this, pid);
  Attachment& a = draft.a;
  auto failed = [&](const char* what) {
    return Error{std::string(what) + " " + binary_path + " (pid " + std::to_string(pid) +
                 "): " + std::strerror(errno), ErrorCode::kSystem};
  };
  for (const GoHttp2ProbeSites& sites : stacks) {
    auto slot = TakeSlot(a);
    if (!slot) return slot.error();
    if (bpf_map__update_elem(skel_->maps.go_offsets, &*slot, sizeof(*slot), &sites.offsets,
                             sizeof(sites.offsets), BPF_ANY)) {
      return failed("writing HTTP/2 offsets for");
    }
    if (!AttachUprobe(a, skel_->progs.h2_process_headers, pid, binary_path, sites.process_headers, *slot) ||
        !AttachUprobe(a, skel_->progs.h2_handler_done, pid, binary_path, sites.handler_done, *slot)) {
      return failed("attaching uprobes to");
    }
  }
  if (http1) {
    uint32_t slot = a.slots.front();
    bool ok = AttachUprobe(a, skel_->progs.http1_read_enter, pid, binary_path, http1->read_entry, slot) &&
              AttachUprobe(a, skel_->progs.http1_write, pid, binary_path, http1->write_entry, slot) &&
              AttachUprobe(a, skel_->progs.http1_close, pid, binary_path, http1->close_entry, slot);
    for (uint64_t ret : http1->read_return_offsets) {
      ok = ok && AttachUprobe(a, skel_->progs.http1_read_return, pid, binary_path, {ret, 0}, slot);
    }
    if (!ok) return failed("attaching HTTP/1.1 uprobes to");
  }
  if (!AttachGathered(a, pid, binary_path)) return failed("attaching uprobes to");
  return Commit(draft);
}

Result<uint32_t> GoHttpProbes::Commit(AttachmentDraft& draft) {
  uint32_t handle = draft.a.slots.front();
  attachments_[handle] = std::move(draft.a);
  draft.committed_ = true;
  return handle;
}

Result<uint32_t> GoHttpProbes::TakeSlot(Attachment& a) {
  uint32_t slot = 0;
  while (slot < kMaxSlots && slot_used_[slot]) ++slot;
  if (slot == kMaxSlots) return Error{"all " + std::to_string(kMaxSlots) + " probe slots in use", ErrorCode::kLimit};
  slot_used_[slot] = true;
  a.slots.push_back(slot);
  return slot;
}

Result<uint32_t> GoHttpProbes::AttachGrpc(pid_t pid, const std::string& binary_path,
                                          const GrpcProbeSites& sites) {
  ReleaseDetachedSlots();
  AttachmentDraft draft(*this, pid);
  Attachment& a = draft.a;
  auto slot = TakeSlot(a);
  if (!slot) return slot.error();
  if (bpf_map__update_elem(skel_->maps.grpc_offsets, &*slot, sizeof(*slot), &sites.offsets,
                           sizeof(sites.offsets), BPF_ANY)) {
    return Error{std::string("writing gRPC offsets: ") + std::strerror(errno), ErrorCode::kSystem};
  }
  for (const auto& [type, shape] : sites.messages) {
    sw_grpc_message_key k{.slot = *slot, .pad = 0, .type = type};
    if (bpf_map__update_elem(skel_->maps.grpc_messages, &k, sizeof(k), &shape, sizeof(shape), BPF_ANY)) {
      return Error{std::string("writing gRPC message types: ") + std::strerror(errno), ErrorCode::kSystem};
    }
    a.message_keys.push_back(k);
  }
  auto attach_all = [&](bpf_program* prog, const std::vector<EntryProbeSite>& entries) {
    for (const EntryProbeSite& entry : entries) {
      if (!AttachUprobe(a, prog, pid, binary_path, entry, *slot)) return false;
    }
    return true;
  };
  auto attach_returns = [&](bpf_program* prog, const std::vector<uint64_t>& returns) {
    for (uint64_t ret : returns) {
      if (!AttachUprobe(a, prog, pid, binary_path, {ret, 0}, *slot)) return false;
    }
    return true;
  };
  bool ok = attach_all(skel_->progs.grpc_unary_enter, sites.unary_entries) &&
            attach_all(skel_->progs.grpc_stream_enter, sites.stream_entries) &&
            attach_returns(skel_->progs.grpc_unary_return, sites.unary_returns) &&
            attach_returns(skel_->progs.grpc_stream_return, sites.stream_returns) &&
            attach_all(skel_->progs.etcd_watch_create, sites.watch_creates) &&
            attach_all(skel_->progs.etcd_watch_cancel, sites.watch_cancels) &&
            attach_all(skel_->progs.etcd_lease_renew, sites.lease_renews) &&
            attach_returns(skel_->progs.etcd_watch_stream_return, sites.watch_stream_returns) &&
            AttachGathered(a, pid, binary_path);
  if (!ok) {
    return Error{"attaching gRPC uprobes to " + binary_path + " (pid " + std::to_string(pid) +
                 "): " + std::strerror(errno), ErrorCode::kSystem};
  }
  return Commit(draft);
}

void GoHttpProbes::Detach(uint32_t handle) {
  auto it = attachments_.find(handle);
  if (it == attachments_.end()) return;
  // Removed now: the slot is not reused before its links are gone, and a stale entry would
  // only make a gone target's last calls copy a message.
  for (const sw_grpc_message_key& k : it->second.message_keys) {
    bpf_map__delete_elem(skel_->maps.grpc_messages, &k, sizeof(k), 0);
  }
  {
    std::lock_guard lock(detach_mutex_);
    detaching_links_ += it->second.links.size();
    to_detach_.push_back(std::move(it->second));
  }
  attachments_.erase(it);
  detach_wake_.notify_one();
}

void GoHttpProbes::ReapLinks() {
  std::unique_lock lock(detach_mutex_);
  while (true) {
    detach_wake_.wait(lock, [&] { return stopping_ || !to_detach_.empty(); });
    if (to_detach_.empty()) return;  // stopping, nothing left
    // Every attachment queued so far, together (targets exiting at once, or the agent's stop).
    std::deque<Attachment> batch = std::exchange(to_detach_, {});
    bool stopping = stopping_;  // the maps go with the agent
    lock.unlock();
    std::vector<BpfLink> links;
    size_t link_count = 0;
    for (Attachment& a : batch) {
      link_count += a.links.size();
      for (BpfLink& l : a.links) links.push_back(std::move(l));
    }
    DestroyLinks(std::move(links));
    // Their probes are gone: what the BPF programs kept per call or connection of those
    // processes (LRU maps: bounded anyway) would wait for eviction; it goes now.
    if (!stopping) {
      for (const Attachment& a : batch) {
        if (size_t n = ForgetInFlight(a.pid)) {
          spdlog::debug("pid {}: {} HTTP/1.1 call and connection entries removed from BPF maps", a.pid, n);
        }
      }
    }
    lock.lock();
    detaching_links_ -= link_count;
    for (const Attachment& a : batch) {
      detached_slots_.insert(detached_slots_.end(), a.slots.begin(), a.slots.end());
    }
  }
}

size_t GoHttpProbes::ForgetInFlight(pid_t pid) {
  // Both maps' keys start with the process's tgid (struct read_call_key, struct conn_key).
  size_t removed = 0;
  for (bpf_map* map : {skel_->maps.http1_reads, skel_->maps.http1_last_direction}) {
    std::vector<uint8_t> key(bpf_map__key_size(map)), next(key.size());
    std::vector<std::vector<uint8_t>> gone;
    const void* prev = nullptr;
    while (bpf_map__get_next_key(map, prev, next.data(), next.size()) == 0) {
      uint32_t tgid;
      std::memcpy(&tgid, next.data(), sizeof(tgid));
      if (tgid == static_cast<uint32_t>(pid)) gone.push_back(next);
      key.swap(next);
      prev = key.data();
    }
    for (const auto& k : gone) removed += bpf_map__delete_elem(map, k.data(), k.size(), 0) == 0;
  }
  return removed;
}

void GoHttpProbes::ReleaseDetachedSlots() {
  std::lock_guard lock(detach_mutex_);
  for (uint32_t s : detached_slots_) slot_used_[s] = false;
  detached_slots_.clear();
}

size_t GoHttpProbes::detaching_links() const {
  std::lock_guard lock(detach_mutex_);
  return detaching_links_;
}

size_t GoHttpProbes::attached_links() const {
  size_t n = 0;
  for (const auto& [handle, a] : attachments_) n += a.links.size();
  return n;
}

int GoHttpProbes::Poll(int timeout_ms) { return ring_buffer__poll(ring_.get(), timeout_ms); }

int GoHttpProbes::Consume() { return ring_buffer__consume(ring_.get()); }

uint64_t GoHttpProbes::SumPerCpu(int map_fd, uint32_t key) const {
  std::vector<uint64_t> values(ncpus_);
  if (bpf_map_lookup_elem(map_fd, &key, values.data())) return 0;
  uint64_t sum = 0;
  for (uint64_t v : values) sum += v;
  return sum;
}

DropCounts GoHttpProbes::ReadDrops() const {
  DropCounts d;
  int fd = bpf_map__fd(skel_->maps.drops);
  for (uint32_t i = 0; i < SW_DROP_CAUSE_COUNT; ++i) d.by_cause[i] = SumPerCpu(fd, i);
  return d;
}

const char* GoHttpProbes::ProbeName(size_t i) {
  static const char* kNames[kProbeCount] = {
      "http2_process_headers", "http2_handler_done", "http1_read_enter",   "http1_read_return",
      "http1_write",           "http1_close",        "grpc_unary_enter",   "grpc_unary_return",
      "grpc_stream_enter",     "grpc_stream_return",    "etcd_watch_create",
      "etcd_watch_cancel",     "etcd_lease_renew",      "etcd_watch_stream_return"};
  return i < kProbeCount ? kNames[i] : "unknown";
}

std::array<uint64_t, GoHttpProbes::kProbeCount> GoHttpProbes::ReadHits() const {
  int fd = bpf_map__fd(skel_->maps.hits);
  std::array<uint64_t, kProbeCount> hits{};
  for (uint32_t i = 0; i < kProbeCount; ++i) hits[i] = SumPerCpu(fd, i);
  return hits;
}

}  // namespace stormwatch
