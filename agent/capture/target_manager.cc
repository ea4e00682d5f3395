#include "agent/capture/target_manager.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "agent/capture/client_cert_reader.h"
#include "agent/capture/go_binary.h"
#include "agent/capture/go_layout.h"
#include "agent/capture/target_planner.h"

namespace stormwatch {

namespace {
// The same process running the same binary: a reused PID has another start time, an exec of
// an upgraded binary another inode.
bool SameProcess(const TargetProcess& a, const TargetProcess& b) {
  return a.start_time == b.start_time && a.inode == b.inode && a.dev == b.dev;
}
}  // namespace

TargetManager::TargetManager(GoHttpProbes* probes, TargetManagerOptions options,
                             ChangeCallback on_change)
    : probes_(probes), options_(std::move(options)), on_change_(std::move(on_change)) {
  if (!options_.find) {
    options_.find = [names = options_.names, pids = options_.pids] {
      if (pids.empty()) return FindTargetsByName(names);
      std::vector<TargetProcess> live;
      for (pid_t pid : pids) {
        TargetProcess t;
        if (ReadTargetProcess(pid, &t)) live.push_back(std::move(t));
      }
      return live;
    };
  }
  if (!options_.read) {
    options_.read = [](pid_t pid, TargetProcess* out) { return ReadTargetProcess(pid, out); };
  }
  if (!options_.plan) {
    options_.plan = [](const TargetProcess& p, const std::atomic<bool>& cancelled) {
      return PlanGoHttp2Probes(p.exe_path, &cancelled);
    };
  }
  planner_ = std::make_unique<TargetPlanner>(options_.plan);
}

TargetManager::~TargetManager() {
  planner_.reset();  // first: a plan in progress is cancelled, not waited for
  while (!targets_.empty()) Remove(targets_.begin());
}

size_t TargetManager::attached_count() const {
  size_t n = 0;
  for (const auto& [pid, t] : targets_) n += t.attached;
  return n;
}

std::string TargetManager::NotReadyReason() const {
  std::string out;
  for (const auto& [pid, t] : targets_) {
    if (t.attached) continue;
    out += (out.empty() ? "" : "\n") + t.process.name + " pid " + std::to_string(pid) +
           " not attached (" + AttachFailureName(t.failure) + "): " + t.problem;
  }
  for (const auto& [pid, p] : planning_) {
    out += (out.empty() ? "" : "\n") + std::string("planning ") + p.name + " pid " + std::to_string(pid);
  }
  return out;
}

void TargetManager::StartPlanning(const TargetProcess& process) {
  planning_[process.pid] = process;
  planner_->Submit(process);
}

void TargetManager::Refresh() {
  std::vector<TargetProcess> live = options_.find();
  std::set<pid_t> seen;
  for (const TargetProcess& p : live) {
    seen.insert(p.pid);
    if (auto it = targets_.find(p.pid); it != targets_.end()) {
      if (SameProcess(it->second.process, p)) continue;
      Remove(it);  // PID reused, or the process exec'd a new binary
    }
    if (auto it = planning_.find(p.pid); it != planning_.end()) {
      if (SameProcess(it->second, p)) continue;  // its plan is on the way
      planner_->Cancel(p.pid);  // planned for a binary it no longer runs
      if (!p.unreadable.empty()) planning_.erase(it);
    }
    if (!p.unreadable.empty()) {
      // Nothing to plan: refused (logged and counted once), until it is readable or gone.
      TargetStatus s;
      s.process = p;
      s.failure = AttachFailure::kProcUnreadable;
      s.problem = p.unreadable;
      on_change_(s, true);
      targets_.emplace(p.pid, std::move(s));
      continue;
    }
    StartPlanning(p);
  }
  for (auto it = planning_.begin(); it != planning_.end();) {
    auto next = std::next(it);
    if (!seen.contains(it->first)) {  // exited while planned: never announced, nothing to undo
      planner_->Cancel(it->first);
      planning_.erase(it);
    }
    it = next;
  }
  for (auto it = targets_.begin(); it != targets_.end();) {
    auto next = std::next(it);
    if (!seen.contains(it->first)) Remove(it);
    it = next;
  }
}

bool TargetManager::Collect() {
  bool changed = false;
  for (TargetPlanner::Result& r : planner_->TakeResults()) {
    auto it = planning_.find(r.process.pid);
    if (it == planning_.end() || !SameProcess(it->second, r.process)) continue;  // superseded
    changed = true;
    // The probes go onto whatever /proc/PID/exe is now: only onto the binary that was planned.
    TargetProcess now;
    if (!options_.read(r.process.pid, &now) || !now.unreadable.empty()) {
      planning_.erase(it);  // exited since the plan began (or unreadable now: the next scan says)
      continue;
    }
    if (!SameProcess(now, r.process)) {
      StartPlanning(now);  // its binary changed while it was planned
      continue;
    }
    planning_.erase(it);
    TargetStatus status = Attach(r.process, r.plan);
    status.planning_seconds = r.seconds;
    on_change_(status, true);
    targets_.emplace(r.process.pid, std::move(status));
  }
  return changed;
}

void TargetManager::Remove(std::map<pid_t, TargetStatus>::iterator it) {
  if (it->second.attached) probes_->Detach(it->second.slot);
  on_change_(it->second, false);
  targets_.erase(it);
}

TargetStatus TargetManager::Attach(const TargetProcess& process, const GoHttp2ProbePlan& plan) {
  TargetStatus s;
  s.process = process;
  s.go_version = plan.go_version;
  s.xnet_version = plan.xnet_version;
  s.grpc_version = plan.grpc_version;
  s.stack = plan.stack_names();
  s.problem = plan.problem;
  s.failure = plan.failure;
  s.etcd = plan.etcd;
  s.gap = plan.gap;
  if (plan.failure != AttachFailure::kNone) return s;
  if (plan.grpc) return AttachGrpc(process, plan, std::move(s));
  if (!plan.sites.empty()) s.layout = plan.sites.front().offsets;
  auto slot = probes_->Attach(process.pid, process.exe_path, plan.sites, plan.http1);
  if (!slot) {
    s.problem = slot.error().message;
    s.failure = AttachFailure::kAttachFailed;
    return s;
  }
  s.attached = true;
  s.slot = *slot;
  return s;
}

namespace {
// Where the kernel mapped the executable: 0 for a fixed-address (ET_EXEC) binary, the ASLR
// offset for a PIE. From the mapping of the file's first page in /proc/PID/maps.
std::optional<uint64_t> LoadBias(const TargetProcess& p, uint64_t first_load_vaddr) {
  std::ifstream maps("/proc/" + std::to_string(p.pid) + "/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms, offset, dev;
    uint64_t inode = 0;
    if (!(in >> range >> perms >> offset >> dev >> inode)) continue;
    if (inode != p.inode || std::stoull(offset, nullptr, 16) != 0) continue;
    uint64_t start = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    return start - (first_load_vaddr & ~uint64_t{0xfff});
  }
  return std::nullopt;
}
}  // namespace

TargetStatus TargetManager::AttachGrpc(const TargetProcess& process, const GoHttp2ProbePlan& plan,
                                       TargetStatus s) {
  auto bias = LoadBias(process, plan.first_load_vaddr);
  if (!bias) {
    s.problem = "the executable's mapping is not in /proc/" + std::to_string(process.pid) + "/maps";
    s.failure = AttachFailure::kAttachFailed;
    return s;
  }
  GrpcProbeSites sites = plan.grpc->sites;
  auto relocate = [&](__u64& vaddr) {
    if (vaddr) vaddr += *bias;
  };
  relocate(sites.offsets.value_ctx_type);
  relocate(sites.offsets.peer_key_type);
  relocate(sites.offsets.server_stream_type);
  relocate(sites.offsets.stream_with_ctx_type);
  relocate(sites.offsets.status_error_type);
  auto messages = std::make_shared<EtcdMessageTypes>();
  messages->fields = plan.grpc->layout.fields;
  for (const EtcdMessageShape& m : plan.grpc->layout.messages) {
    sites.messages.emplace_back(m.type_vaddr + *bias, m.shape);
    messages->by_type[m.type_vaddr + *bias] = m.message;
  }
  auto slot = probes_->AttachGrpc(process.pid, process.exe_path, sites);
  if (!slot) {
    s.problem = slot.error().message;
    s.failure = AttachFailure::kAttachFailed;
    return s;
  }
  s.attached = true;
  s.slot = *slot;
  s.etcd_messages = std::move(messages);
  // The certificate reader needs only to know that certificates are read (DER addresses come
  // with each call).
  s.layout.tls_peer_certificates = sites.offsets.tls_info_peer_certificates;
  s.layout.x509_raw = sites.offsets.x509_raw;
  return s;
}

const char* AttachFailureName(AttachFailure failure) {
  switch (failure) {
    case AttachFailure::kNone: return "";
    case AttachFailure::kUnreadableBinary: return "unreadable_binary";
    case AttachFailure::kNoHttp2Server: return "no_http2_server";
    case AttachFailure::kNoTypeData: return "no_type_data";
    case AttachFailure::kMissingField: return "missing_field";
    case AttachFailure::kFunctionShape: return "function_shape";
    case AttachFailure::kAttachFailed: return "attach_failed";
    case AttachFailure::kProcUnreadable: return "proc_unreadable";
  }
  return "attach_failed";
}

std::string GoHttp2ProbePlan::stack_names() const {
  if (grpc) return "grpc";
  std::string out;
  for (const Http2Stack* st : stacks) out += (out.empty() ? "" : ",") + st->name;
  return out;
}

GoHttp2ProbePlan PlanGoHttp2Probes(const std::string& exe_path, const std::atomic<bool>* cancelled) {
  auto binary = GoBinary::Open(exe_path);
  if (!binary) {
    GoHttp2ProbePlan plan;
    plan.failure = AttachFailure::kUnreadableBinary;
    plan.problem = "not a readable Go binary: " + binary.error().message;
    return plan;
  }
  return PlanGoHttp2Probes(*binary, cancelled);
}

Result<bool> CheckFunctionShape(const GoFunction& fn, int32_t args, const char* signature) {
  if (fn.args == args) return true;
  return Error{fn.name + " takes " + std::to_string(fn.args) + " bytes of arguments, not the " +
                   std::to_string(args) + " of " + signature + " the probe reads",
               ErrorCode::kUnsupported};
}

namespace {
// Shapes of the probed functions: _func.args is the spill area of the register-assigned
// receiver and arguments (results travel in registers and have none), in bytes.
constexpr int32_t kProcessHeadersArgs = 8 + 8;  // (sc *serverConn) processHeaders(f *MetaHeadersFrame)
constexpr int32_t kHandlerDoneArgs = 8;         // (w *responseWriter) handlerDone()
constexpr int32_t kConnReadArgs = 8 + 24;       // (cr *connReader) Read(p []byte)
constexpr int32_t kConnWriteArgs = 8 + 24;      // (w checkConnErrorWriter{c *conn}) Write(p []byte)
constexpr int32_t kConnCloseArgs = 8;           // (c *conn) close()

// net/http's HTTP/1.1 server (kube-apiserver serves HTTP/1.1 clients such as the Python client
// with it). Absent or unplaceable: HTTP/2 is still captured, with a caveat.
Result<Http1ProbeSites> PlanHttp1Probes(const GoBinary& binary) {
  auto read_fn = binary.FindFunction("net/http.(*connReader).Read");
  auto write_fn = binary.FindFunction("net/http.checkConnErrorWriter.Write");
  auto close_fn = binary.FindFunction("net/http.(*conn).close");
  if (!read_fn || !write_fn || !close_fn) {
    return Error{"net/http's HTTP/1.1 server not found", ErrorCode::kNotFound};
  }
  for (auto [fn, args, sig] : {std::tuple{&*read_fn, kConnReadArgs, "Read(p []byte)"},
                               std::tuple{&*write_fn, kConnWriteArgs, "Write(p []byte)"},
                               std::tuple{&*close_fn, kConnCloseArgs, "close()"}}) {
    if (auto shape = CheckFunctionShape(*fn, args, sig); !shape) return shape.error();
  }
  auto read_entry = binary.EntryProbeSiteOf(*read_fn);
  auto read_returns = binary.ReturnInstructionOffsets(*read_fn);
  auto write_entry = binary.EntryProbeSiteOf(*write_fn);
  auto close_entry = binary.EntryProbeSiteOf(*close_fn);
  if (!read_entry) return read_entry.error();
  if (!read_returns) return read_returns.error();
  if (read_returns->empty()) return Error{"no RET in (*connReader).Read", ErrorCode::kNotFound};
  if (!write_entry) return write_entry.error();
  if (!close_entry) return close_entry.error();
  return Http1ProbeSites{*read_entry, *read_returns, *write_entry, *close_entry};
}
}  // namespace

namespace {
// etcd by what it is: its server's code (go.etcd.io/etcd/server/v3/etcdserver in 3.5,
// go.etcd.io/etcd/etcdserver in 3.4), never by the executable's name. A client of etcd (an API
// server links clientv3) has no EtcdServer.
bool HasEtcdServer(const GoBinary& binary) {
  for (const GoFunction& fn : binary.functions()) {
    if (fn.name.starts_with("go.etcd.io/etcd/") &&
        fn.name.find("etcdserver.(*EtcdServer).Range") != std::string::npos) {
      return true;
    }
  }
  return false;
}
}  // namespace

namespace {
constexpr int32_t kGrpcInterceptorArgs = 16 + 16 + 8 + 8;  // (ctx|srv, req|ss, info, handler)
// (ws) Watch(id WatchID, key, end []byte, startRev int64, fcs ...FilterFunc): fcs on the stack.
constexpr int32_t kWatchArgs = 8 + 8 + 24 + 24 + 8 + 24;
constexpr int32_t kWatchCancelArgs = 8 + 8;      // (ws) Cancel(id WatchID)
constexpr int32_t kLeaseRenewArgs = 8 + 16 + 8;  // (s *EtcdServer) LeaseRenew(ctx, id LeaseID)

// The etcd functions that handle one message of an open stream, found by package suffix (module
// builds: go.etcd.io/etcd/server/v3/mvcc; 3.4 and Debian's GOPATH builds: .../etcd/mvcc,
// .../etcd/server/mvcc). Missing or of another shape: a caveat, streams are still seen whole.
void PlanStreamMessageProbes(const GoBinary& binary, GrpcProbeSites* sites, std::vector<std::string>* caveats) {
  struct Wanted {
    std::string_view suffix;
    int32_t args;
    const char* signature;
    std::vector<EntryProbeSite>* entries;
  };
  const Wanted wanted[] = {
      {"/mvcc.(*watchStream).Watch", kWatchArgs, "Watch(id, key, end, startRev, fcs...)", &sites->watch_creates},
      {"/mvcc.(*watchStream).Cancel", kWatchCancelArgs, "Cancel(id)", &sites->watch_cancels},
      {"/etcdserver.(*EtcdServer).LeaseRenew", kLeaseRenewArgs, "LeaseRenew(ctx, id)", &sites->lease_renews},
  };
  // The watch stream's maker: its RETs, when the watch messages' probes are there.
  constexpr std::string_view kNewWatchStream = "/mvcc.(*watchableStore).NewWatchStream";
  constexpr int32_t kNewWatchStreamArgs = 8;  // (s *watchableStore) NewWatchStream() WatchStream
  for (const GoFunction& fn : binary.functions()) {
    if (!fn.name.starts_with("go.etcd.io/etcd/") || !fn.name.ends_with(kNewWatchStream)) continue;
    auto rets = binary.ReturnInstructionOffsets(fn);
    if (CheckFunctionShape(fn, kNewWatchStreamArgs, "NewWatchStream()") && rets) {
      sites->watch_stream_returns.insert(sites->watch_stream_returns.end(), rets->begin(), rets->end());
    }
  }
  if (sites->watch_stream_returns.empty()) {
    caveats->push_back("etcd watch messages not named by client (mvcc.(*watchableStore).NewWatchStream not found)");
  }
  for (const Wanted& w : wanted) {
    std::string problem = "not found";
    for (const GoFunction& fn : binary.functions()) {
      if (!fn.name.starts_with("go.etcd.io/etcd/") || !fn.name.ends_with(w.suffix)) continue;
      if (auto shape = CheckFunctionShape(fn, w.args, w.signature); !shape) {
        problem = shape.error().message;
        break;
      }
      auto entry = binary.EntryProbeSiteOf(fn);
      if (!entry) {
        problem = entry.error().message;
        break;
      }
      w.entries->push_back(*entry);
    }
    if (w.entries->empty()) {
      caveats->push_back("etcd stream messages of " + std::string(w.suffix.substr(1)) +
                         " not seen (" + problem + ")");
    }
  }
}

// etcd's gRPC calls at go-grpc-prometheus's interceptors. An error when the closures or the
// fields are not there: etcd is then captured at its HTTP/2 server, per method.
Result<GoHttp2ProbePlan::Grpc> PlanGrpcProbes(const GoBinary& binary, const GoTypes& types) {
  std::vector<const GoFunction*> unary, stream;
  for (const GoFunction& fn : binary.functions()) {
    if (IsGrpcServerInterceptorClosure(fn.name, "Unary")) unary.push_back(&fn);
    if (IsGrpcServerInterceptorClosure(fn.name, "Stream")) stream.push_back(&fn);
  }
  if (unary.empty() || stream.empty()) {
    return Error{"go-grpc-prometheus's server interceptors not found", ErrorCode::kNotFound};
  }
  for (const auto* list : {&unary, &stream}) {
    for (const GoFunction* fn : *list) {
      if (auto shape = CheckFunctionShape(*fn, kGrpcInterceptorArgs, "an interceptor (ctx, req, info, handler)");
          !shape) {
        return shape.error();
      }
    }
  }
  LayoutGap gap;
  auto layout = DeriveEtcdLayout(types, &gap);
  if (!layout) return layout.error();
  GoHttp2ProbePlan::Grpc g;
  auto place = [&](const std::vector<const GoFunction*>& fns, std::vector<EntryProbeSite>& entries,
                   std::vector<uint64_t>& returns) -> Result<bool> {
    for (const GoFunction* fn : fns) {
      auto entry = binary.EntryProbeSiteOf(*fn);
      auto rets = binary.ReturnInstructionOffsets(*fn);
      if (!entry || !rets || rets->empty()) {
        return Error{"cannot place the interceptor probes in " + fn->name, ErrorCode::kNotFound};
      }
      entries.push_back(*entry);
      returns.insert(returns.end(), rets->begin(), rets->end());
    }
    return true;
  };
  if (auto placed = place(unary, g.sites.unary_entries, g.sites.unary_returns); !placed) return placed.error();
  if (auto placed = place(stream, g.sites.stream_entries, g.sites.stream_returns); !placed) return placed.error();
  g.sites.offsets = layout->offsets;
  g.layout = std::move(*layout);
  PlanStreamMessageProbes(binary, &g.sites, &g.layout.caveats);
  return g;
}
}  // namespace

GoHttp2ProbePlan PlanGoHttp2Probes(const GoBinary& binary, const std::atomic<bool>* cancelled) {
  GoHttp2ProbePlan plan;
  const GoBuildInfo& info = binary.build_info();
  plan.go_version = info.go_version;
  plan.module_info = info.main.has_value() || !info.deps.empty();
  if (const GoModule* xnet = info.FindModule("golang.org/x/net")) {
    plan.xnet_version = xnet->effective_version();
  }
  if (const GoModule* grpc = info.FindModule("google.golang.org/grpc")) {
    plan.grpc_version = grpc->effective_version();
  }
  plan.etcd = HasEtcdServer(binary);
  for (const ElfSegment& seg : binary.elf().segments()) {
    if (seg.type == 1 /* PT_LOAD */) {
      plan.first_load_vaddr = seg.vaddr;
      break;
    }
  }
  auto fail = [&](AttachFailure f, std::string why) {
    plan.failure = f;
    plan.problem = std::move(why);
    plan.sites.clear();
    plan.grpc.reset();
    plan.http1.reset();
    return plan;
  };
  // Between phases (the type data and the layouts take the longest): an agent stopping, or a
  // target gone, does not wait for the rest.
  auto stop = [&] { return cancelled && cancelled->load(std::memory_order_relaxed); };
  constexpr const char* kCancelled = "planning cancelled";
  if (stop()) return fail(AttachFailure::kAttachFailed, kCancelled);
  std::string grpc_caveat;
  if (plan.etcd) {
    auto types = binary.types();
    if (stop()) return fail(AttachFailure::kAttachFailed, kCancelled);
    if (types) {
      plan.type_count = (*types)->type_count();
      if (auto grpc = PlanGrpcProbes(binary, **types)) {
        plan.grpc = std::move(*grpc);
      } else {
        grpc_caveat = grpc.error().message;
      }
    } else {
      grpc_caveat = "Go type data unreadable: " + types.error().message;
    }
    if (plan.grpc) {
      for (const std::string& c : plan.grpc->layout.caveats) {
        plan.problem += (plan.problem.empty() ? "" : "; ") + c;
      }
      return plan;
    }
    grpc_caveat = "etcd calls counted per method only (" + grpc_caveat + ")";
  }

  struct Found {
    const Http2Stack* stack;
    GoFunction headers, done;
  };
  std::vector<Found> found;
  std::string names;
  for (const Http2Stack& stack : Http2Stacks()) {
    names += (names.empty() ? "" : ", ") + stack.process_headers;
    auto headers_fn = binary.FindFunction(stack.process_headers);
    auto done_fn = binary.FindFunction(stack.handler_done);
    if (!headers_fn && !done_fn) continue;
    plan.stacks.push_back(&stack);
    if (!headers_fn || !done_fn) {
      return fail(AttachFailure::kAttachFailed,
                  stack.name + " HTTP/2 server is incomplete in the binary (" +
                      (headers_fn ? stack.handler_done : stack.process_headers) + " not found)");
    }
    auto shape = CheckFunctionShape(*headers_fn, kProcessHeadersArgs, "processHeaders(f *MetaHeadersFrame)");
    if (shape) shape = CheckFunctionShape(*done_fn, kHandlerDoneArgs, "handlerDone()");
    if (!shape) return fail(AttachFailure::kFunctionShape, stack.name + " HTTP/2 stack: " + shape.error().message);
    found.push_back({&stack, *headers_fn, *done_fn});
  }
  if (found.empty()) {
    return fail(AttachFailure::kNoHttp2Server, "no HTTP/2 server in the binary (none of " + names + ")");
  }
  if (stop()) return fail(AttachFailure::kAttachFailed, kCancelled);
  auto types = binary.types();
  if (!types) return fail(AttachFailure::kNoTypeData, "Go type data unreadable: " + types.error().message);
  plan.type_count = (*types)->type_count();

  std::vector<std::string> caveats;
  bool http1_fields = true;
  for (const Found& f : found) {
    if (stop()) return fail(AttachFailure::kAttachFailed, kCancelled);
    auto layout = DeriveGoLayout(**types, *f.stack, &plan.gap);
    if (!layout) return fail(AttachFailure::kMissingField, layout.error().message);
    auto headers_site = binary.EntryProbeSiteOf(f.headers);
    auto done_site = binary.EntryProbeSiteOf(f.done);
    if (!headers_site || !done_site) {
      return fail(AttachFailure::kAttachFailed,
                  "cannot place " + f.stack->name + " entry probes: " +
                      (headers_site ? done_site.error().message : headers_site.error().message));
    }
    // Object facts come from kube-apiserver's write responses; etcd's are protobuf values
    // (Secrets among them) that the agent has no use for.
    layout->offsets.capture_write_bodies = layout->write_bodies && !plan.etcd;
    plan.sites.push_back({*headers_site, *done_site, layout->offsets});
    http1_fields &= layout->http1;
    for (const std::string& c : layout->caveats) {
      if (std::find(caveats.begin(), caveats.end(), c) == caveats.end()) caveats.push_back(c);
    }
  }
  if (!grpc_caveat.empty()) caveats.push_back(grpc_caveat);
  for (const std::string& c : caveats) plan.problem += (plan.problem.empty() ? "" : "; ") + c;
  if (stop()) return fail(AttachFailure::kAttachFailed, kCancelled);
  if (http1_fields) {
    if (auto http1 = PlanHttp1Probes(binary)) {
      plan.http1 = std::move(*http1);
    } else {
      plan.problem += (plan.problem.empty() ? "" : "; ") + ("HTTP/1.1 not captured: " + http1.error().message);
    }
  }
  return plan;
}

}  // namespace stormwatch
