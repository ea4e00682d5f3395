// ring_flood: writes captured HTTP/2 requests into a running agent's ring buffer at a given rate,
// through the agent's own `events` ring buffer and `drops` maps (found among the agent's file
// descriptors, reused by fd), with ring_flood.bpf.c's BPF_PROG_TYPE_SYSCALL program run by
// bpf_prog_test_run_opts. For tests/e2e/test_ring_buffer.py: 2 cores cannot serve 15k real
// requests/s, and this is the same ring, the same event layouts and the same drop counter.
//
//   ring_flood --agent-pid PID --rate RECORDS_PER_S --seconds S [--period-us US] [--first-seq N]
//
// --rate 0: as fast as it can for S seconds. Prints one JSON line: what was offered, what the
// kernel took (submitted), what found no room (dropped, each counted twice in `drops`: request
// and response), the rate and the generator's CPU.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "events.h"
#include "ring_flood.h"
#include "ring_flood.skel.h"

namespace {

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "ring_flood: %s\n", why.c_str());
  std::exit(2);
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

struct AgentMap {
  int fd = -1;
  bpf_map_info info{};
};

// The BPF maps a process holds open, from /proc/PID/fdinfo ("map_id:"), by name and type.
AgentMap FindAgentMap(pid_t pid, const char* name, bpf_map_type type) {
  std::string dir = "/proc/" + std::to_string(pid) + "/fdinfo";
  DIR* d = opendir(dir.c_str());
  if (!d) Die("cannot read " + dir + ": " + std::strerror(errno));
  std::vector<uint32_t> ids;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(dir + "/" + e->d_name);
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("map_id:", 0) == 0) ids.push_back(std::strtoul(line.c_str() + 7, nullptr, 10));
    }
  }
  closedir(d);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::vector<AgentMap> found;
  for (uint32_t id : ids) {
    AgentMap m;
    m.fd = bpf_map_get_fd_by_id(id);
    if (m.fd < 0) continue;
    uint32_t len = sizeof(m.info);
    if (bpf_map_get_info_by_fd(m.fd, &m.info, &len) == 0 && m.info.type == static_cast<uint32_t>(type) &&
        std::strcmp(m.info.name, name) == 0) {
      found.push_back(m);
    } else {
      close(m.fd);
    }
  }
  if (found.empty()) Die("pid " + std::to_string(pid) + " holds no BPF map " + name);
  if (found.size() > 1) Die("pid " + std::to_string(pid) + " holds more than one BPF map " + name);
  return found[0];
}

uint64_t SumDrops(int fd, int ncpus) {
  std::vector<uint64_t> values(ncpus);
  uint32_t key = SW_DROP_RINGBUF_FULL;
  if (bpf_map_lookup_elem(fd, &key, values.data())) Die("reading drops: " + std::string(std::strerror(errno)));
  uint64_t sum = 0;
  for (uint64_t v : values) sum += v;
  return sum;
}

double CpuSeconds(const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

}  // namespace

int main(int argc, char** argv) {
  pid_t agent_pid = 0;
  double rate = -1, seconds = -1;
  int64_t period_ns = 1000000;
  uint64_t first_seq = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) Die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--agent-pid") agent_pid = std::atoi(value());
    else if (a == "--rate") rate = std::atof(value());
    else if (a == "--seconds") seconds = std::atof(value());
    else if (a == "--period-us") period_ns = std::atoll(value()) * 1000;
    else if (a == "--first-seq") first_seq = std::strtoull(value(), nullptr, 10);
    else Die("unknown argument " + a);
  }
  if (agent_pid <= 0 || rate < 0 || seconds <= 0 || period_ns <= 0) {
    Die("usage: ring_flood --agent-pid PID --rate RECORDS_PER_S (0: unpaced) --seconds S "
        "[--period-us US] [--first-seq N]");
  }
  int ncpus = libbpf_num_possible_cpus();
  if (ncpus <= 0) Die("cannot count possible CPUs");

  AgentMap events = FindAgentMap(agent_pid, "events", BPF_MAP_TYPE_RINGBUF);
  AgentMap drops = FindAgentMap(agent_pid, "drops", BPF_MAP_TYPE_PERCPU_ARRAY);
  if (drops.info.key_size != 4 || drops.info.value_size != 8 || drops.info.max_entries != SW_DROP_CAUSE_COUNT) {
    Die("the agent's drops map is not bpf/gohttp.bpf.c's");
  }

  ring_flood_bpf* skel = ring_flood_bpf__open();
  if (!skel) Die("opening the BPF object: " + std::string(std::strerror(errno)));
  if (int err = bpf_map__reuse_fd(skel->maps.events, events.fd); err) {
    Die("reusing the agent's events map: " + std::string(std::strerror(-err)));
  }
  if (int err = bpf_map__reuse_fd(skel->maps.drops, drops.fd); err) {
    Die("reusing the agent's drops map: " + std::string(std::strerror(-err)));
  }
  if (int err = ring_flood_bpf__load(skel); err) Die("loading: " + std::string(std::strerror(-err)));
  int prog_fd = bpf_program__fd(skel->progs.flood);

  const uint64_t drops_before = SumDrops(drops.fd, ncpus);
  rusage ru_before;
  getrusage(RUSAGE_SELF, &ru_before);

  uint64_t offered = 0, submitted = 0, dropped = 0, runs = 0;
  uint32_t request_bytes = 0, response_bytes = 0;
  const int64_t duration_ns = static_cast<int64_t>(seconds * 1e9);
  const uint64_t total = rate > 0 ? static_cast<uint64_t>(rate * seconds + 0.5) : UINT64_MAX;
  constexpr uint64_t kMaxBatch = 65536, kUnpacedBatch = 4096;
  const int64_t start = NowNs();
  int64_t next = start;
  for (;;) {
    int64_t now = NowNs();
    int64_t elapsed = now - start;
    uint64_t due;
    if (rate > 0) {
      due = elapsed >= duration_ns ? total
                                   : std::min<uint64_t>(total, static_cast<uint64_t>(rate * (elapsed / 1e9)));
    } else {
      due = elapsed >= duration_ns ? offered : offered + kUnpacedBatch;
    }
    while (offered < due) {
      sw_flood_args args{};
      args.first_seq = first_seq + offered;
      args.count = static_cast<uint32_t>(std::min(due - offered, kMaxBatch));
      LIBBPF_OPTS(bpf_test_run_opts, opts, .ctx_in = &args, .ctx_size_in = sizeof(args));
      if (int err = bpf_prog_test_run_opts(prog_fd, &opts); err) {
        Die("running the program: " + std::string(std::strerror(errno)));
      }
      if (args.submitted + args.dropped != args.count) Die("the program did not write every request");
      offered += args.count;
      submitted += args.submitted;
      dropped += args.dropped;
      request_bytes = args.request_bytes;
      response_bytes = args.response_bytes;
      ++runs;
    }
    if (elapsed >= duration_ns) break;
    if (rate > 0) {
      next += period_ns;
      if (next < now) next = now;
      timespec ts{static_cast<time_t>(next / 1000000000), static_cast<long>(next % 1000000000)};
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
    }
  }
  const double took = (NowNs() - start) / 1e9;
  rusage ru_after;
  getrusage(RUSAGE_SELF, &ru_after);
  const uint64_t drops_after = SumDrops(drops.fd, ncpus);

  std::printf(
      "{\"offered\": %" PRIu64 ", \"submitted\": %" PRIu64 ", \"dropped\": %" PRIu64
      ", \"ring_buffer_full_counted\": %" PRIu64 ", \"seconds\": %.3f, \"offered_per_second\": %.1f"
      ", \"runs\": %" PRIu64 ", \"request_event_bytes\": %u, \"response_event_bytes\": %u"
      ", \"ring_bytes\": %u, \"events_map_id\": %u, \"drops_map_id\": %u"
      ", \"cpu_user_s\": %.3f, \"cpu_sys_s\": %.3f}\n",
      offered, submitted, dropped, drops_after - drops_before, took, offered / took, runs,
      request_bytes, response_bytes, events.info.max_entries, events.info.id, drops.info.id,
      CpuSeconds(ru_after.ru_utime) - CpuSeconds(ru_before.ru_utime),
      CpuSeconds(ru_after.ru_stime) - CpuSeconds(ru_before.ru_stime));
  ring_flood_bpf__destroy(skel);
  close(events.fd);
  close(drops.fd);
  return 0;
}
