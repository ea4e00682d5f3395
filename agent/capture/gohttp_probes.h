// Owns the loaded BPF programs of bpf/gohttp.bpf.c, their uprobe links and the ring buffer.
// One instance per agent; targets are attached and detached while it runs.
#pragma once

#include <sys/types.h>

#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "agent/capture/go_binary.h"
#include "agent/capture/libbpf_handles.h"
#include "agent/core/result.h"
#include "bpf/events.h"

struct gohttp_bpf;
struct bpf_program;

namespace stormwatch {

// Where to put the probes in one target process: file offsets in its executable.
struct GoHttp2ProbeSites {
  EntryProbeSite process_headers;
  EntryProbeSite handler_done;
  sw_go_offsets offsets{};
};

// net/http's HTTP/1.1 server connection: where its plaintext reads and writes pass.
struct Http1ProbeSites {
  EntryProbeSite read_entry;                  // (*connReader).Read
  std::vector<uint64_t> read_return_offsets;  // its RET instructions
  EntryProbeSite write_entry;                 // checkConnErrorWriter.Write
  EntryProbeSite close_entry;                 // (*conn).close
};

// etcd's gRPC server: go-grpc-prometheus's interceptor closures (bpf/grpc_server.bpf.h).
struct GrpcProbeSites {
  // One entry per copy of each closure (the compiler may leave an inlined copy in the
  // package's init next to the original; each call runs exactly one of them).
  std::vector<EntryProbeSite> unary_entries;
  std::vector<uint64_t> unary_returns;
  std::vector<EntryProbeSite> stream_entries;
  std::vector<uint64_t> stream_returns;
  // Messages on open streams, 1 entry hit each: mvcc.(*watchStream).Watch and .Cancel,
  // etcdserver.(*EtcdServer).LeaseRenew (empty when not found: streams are then seen only when
  // they open and close).
  std::vector<EntryProbeSite> watch_creates;
  std::vector<EntryProbeSite> watch_cancels;
  std::vector<EntryProbeSite> lease_renews;
  std::vector<uint64_t> watch_stream_returns;  // mvcc.(*watchableStore).NewWatchStream's RETs
  sw_grpc_offsets offsets{};  // type addresses as the target has them mapped (load bias added)
  // The messages the programs copy: runtime address of *T's descriptor -> what to copy.
  std::vector<std::pair<uint64_t, sw_grpc_message>> messages;
};

struct DropCounts {
  std::array<uint64_t, SW_DROP_CAUSE_COUNT> by_cause{};
};

class GoHttpProbes {
 public:
  using EventHandler = std::function<void(std::span<const uint8_t>)>;

  // Loads and verifies the BPF programs; fatal for the agent if it fails (no BPF, no agent).
  static Result<std::unique_ptr<GoHttpProbes>> Load(size_t ring_buffer_bytes, EventHandler on_event);
  ~GoHttpProbes();
  GoHttpProbes(const GoHttpProbes&) = delete;
  GoHttpProbes& operator=(const GoHttpProbes&) = delete;

  // Attaches both probes of every HTTP/2 stack in `stacks` (one entry per stack; a binary may
  // hold x/net's and net/http's bundled copy) to `binary_path` for process `pid`, all or
  // nothing. Each stack gets its own offsets slot, passed to the BPF programs as the uprobe's
  // cookie (and reported in events as sw_event_header.target). Returns the target's handle
  // for Detach: the slot of its first stack.
  // `http1`, when given, adds the HTTP/1.1 probes under the first stack's slot.
  Result<uint32_t> Attach(pid_t pid, const std::string& binary_path,
                          const std::vector<GoHttp2ProbeSites>& stacks,
                          const std::optional<Http1ProbeSites>& http1 = std::nullopt);
  // Attaches the gRPC interceptor probes of an etcd target (instead of its HTTP/2 ones: the
  // interceptor sees every call with its decoded messages, within the same 2 hits).
  Result<uint32_t> AttachGrpc(pid_t pid, const std::string& binary_path, const GrpcProbeSites& sites);
  // Removes the target's probes. Destroying a uprobe link waits for the kernel to retire the
  // probe (about 90 ms each here: a second for one target's 11), so the links are destroyed on
  // a thread of their own and the ring buffer keeps being drained while a target goes away.
  // The slots are reused only once their links are gone.
  void Detach(uint32_t handle);
  size_t attached_links() const;
  // Links still being destroyed after Detach.
  size_t detaching_links() const;

  // Delivers ready events to the handler; returns how many, or a negative errno.
  int Poll(int timeout_ms);
  // Delivers whatever is in the ring now, without waiting. The BPF programs write with
  // BPF_RB_NO_WAKEUP (a wakeup per event costs the traced server an irq_work each), so the
  // agent drains the ring on its own clock instead of waiting for epoll.
  int Consume();

  DropCounts ReadDrops() const;
  // Events the handler threw on (allocation failure): dropped, counted here.
  uint64_t handler_failures() const { return handler_failures_; }
  // Probe hits: processHeaders, handlerDone, HTTP/1.1 read entry, read return, write, close;
  // etcd's gRPC unary entry, unary return, stream entry, stream return, watch create, watch
  // cancel, lease renew, watch stream made.
  static constexpr size_t kProbeCount = 14;
  static const char* ProbeName(size_t i);
  std::array<uint64_t, kProbeCount> ReadHits() const;

 private:
  GoHttpProbes() = default;
  static int OnRingBufferEvent(void* ctx, void* data, size_t size);
  uint64_t SumPerCpu(int map_fd, uint32_t key) const;
  struct Attachment;
  class AttachmentDraft;
  bool AttachUprobe(Attachment& a, bpf_program* prog, pid_t pid, const std::string& binary_path,
                    EntryProbeSite site, uint32_t slot);
  void ReapLinks();          // the detach thread's loop
  void ReleaseDetachedSlots();

  struct SkeletonDeleter {
    void operator()(gohttp_bpf* skel) const;
  };
  // Declared before the attachments: members go in reverse order, links before programs.
  std::unique_ptr<gohttp_bpf, SkeletonDeleter> skel_;
  RingBuffer ring_;
  EventHandler on_event_;
  uint64_t handler_failures_ = 0;  // only the draining thread touches it
  int ncpus_ = 1;
  struct Attachment {
    pid_t pid = 0;
    std::vector<uint32_t> slots;  // one offsets slot per stack
    std::vector<BpfLink> links;
    std::vector<sw_grpc_message_key> message_keys;  // etcd: its entries in grpc_messages
    // Sites gathered per program, attached together as one uprobe_multi link each.
    std::map<bpf_program*, std::pair<std::vector<unsigned long>, std::vector<__u64>>> sites;
  };
  bool AttachGathered(Attachment& a, pid_t pid, const std::string& binary_path);
  size_t ForgetInFlight(pid_t pid);  // the detach thread: a gone target's entries in BPF maps
  bool uprobe_multi_ = false;  // Linux 6.6+: uprobe_multi links, else one perf event per uprobe
  Result<uint32_t> TakeSlot(Attachment& a);
  Result<uint32_t> Commit(AttachmentDraft& draft);
  std::map<uint32_t, Attachment> attachments_;  // handle (first slot) -> attachment
  std::vector<bool> slot_used_;

  // Detached attachments: queued for the detach thread, then done (their slots free to reuse).
  mutable std::mutex detach_mutex_;
  std::condition_variable detach_wake_;
  std::deque<Attachment> to_detach_;
  std::vector<uint32_t> detached_slots_;
  size_t detaching_links_ = 0;
  bool stopping_ = false;
  std::thread detach_thread_;
};

}  // namespace stormwatch
