// `stormwatch top`'s model, without a terminal: parses the agents' /debug/top documents, turns
// their cumulative per-client counters into rates (deltas between two snapshots of one agent,
// over the agent's own clock), merges clients across agents (one per master), sorts, filters
// and formats the frame as text lines or JSON. The view (top_view.cc) only draws lines.
//
// Why rates here and not in the agent: the agent serves exact cumulative counters (scripts and
// tests can check them against known traffic), every viewer picks its own period, a late or
// missed fetch loses nothing (the delta is over the snapshots' own times), and several agents
// are merged in this one place.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/core/result.h"

namespace stormwatch::top {

// Per-client cumulative counters as an agent serves them.
struct ClientCounters {
  std::string client;
  uint64_t requests = 0, lists = 0, list_bytes = 0, conflicts = 0, throttled = 0;
  std::string priority_level;
  std::vector<std::string> storms;
};

// One agent's /debug/top document.
struct AgentSnapshot {
  std::string node;
  double time = 0;         // wall clock, Unix seconds
  double monotonic_s = 0;  // the agent's clock when it took the snapshot
  uint64_t requests = 0;   // every client's, cumulative
  // Of those, the requests of clients the agent kept no entry for (its client table full, the
  // client no busier than those in it): counted in `requests`, never listed.
  uint64_t untracked_requests = 0;
  std::vector<ClientCounters> clients;
  std::map<std::string, std::vector<std::string>> active_storms;  // by client
};
Result<AgentSnapshot> ParseAgentSnapshot(const std::string& body);

// Counters per second.
struct Rates {
  double requests = 0, lists = 0, list_bytes = 0, conflicts = 0, throttled = 0;
  Rates& operator+=(const Rates& o);
};

// One agent as top follows it: its URL, the last fetch's outcome, rates from its snapshots.
class AgentTracker {
 public:
  explicit AgentTracker(std::string url) : url_(std::move(url)) {}
  // A fetch's outcome: the body, or why there is none (the agent is shown down).
  void Update(const Result<std::string>& body);
  const std::string& url() const { return url_; }
  bool up() const { return up_; }
  const std::string& error() const { return error_; }
  // The latest snapshot (empty until the first one).
  const std::optional<AgentSnapshot>& snapshot() const { return current_; }
  // Rates of the latest snapshot's clients: over the interval to the previous snapshot this
  // client was in; absent for a client seen once or whose counters went back (restart).
  const std::map<std::string, Rates>& rates() const { return rates_; }
  std::optional<double> total_request_rate() const { return total_rate_; }
  std::optional<double> untracked_request_rate() const { return untracked_rate_; }

 private:
  struct Seen {
    double monotonic_s;
    ClientCounters counters;
  };
  std::string url_;
  bool up_ = false;
  std::string error_ = "not fetched yet";
  std::optional<AgentSnapshot> current_;
  std::map<std::string, Seen> seen_;  // per client: its counters when last seen
  std::map<std::string, Rates> rates_;
  std::optional<double> total_rate_, untracked_rate_;
  struct Totals {
    double monotonic_s;
    uint64_t requests, untracked_requests;
  };
  std::optional<Totals> total_seen_;
};

// One client across agents.
struct Row {
  std::string client;
  Rates rates;
  bool has_rate = false;  // some agent had two snapshots of it
  ClientCounters totals;  // summed counters (client, priority level, storms unused)
  std::set<std::string> priority_levels;
  std::set<std::string> storms;
  std::vector<int> agents;  // 1-based indexes of the agents that saw it
};

enum class SortKey { kRequests, kLists, kListBytes, kConflicts, kThrottled, kClient };
inline constexpr SortKey kSortKeys[] = {SortKey::kClient, SortKey::kRequests, SortKey::kLists,
                                        SortKey::kListBytes, SortKey::kConflicts,
                                        SortKey::kThrottled};
const char* SortKeyName(SortKey key);  // "requests", "lists", ...
std::optional<SortKey> SortKeyFromName(const std::string& name);
// r l b c t n -> the key; none for other keys.
std::optional<SortKey> SortKeyFromKey(int ch);
// The column left (-1) or right (+1) of `key` in kSortKeys.
SortKey MoveSortKey(SortKey key, int step);

struct Frame {
  std::vector<Row> rows;      // sorted, filtered
  size_t clients_total = 0;   // before the filter
  Rates totals;               // of all rows before the filter; requests from the agents' totals
  bool totals_have_rate = false;
  // Requests/s of clients the agents keep no entry for (in totals.requests, in no row); known
  // when totals.requests comes from the agents' totals.
  std::optional<double> untracked_requests;
  struct Agent {
    std::string url, node, error;
    bool up = false;
  };
  std::vector<Agent> agents;
  double time = 0;  // the newest snapshot's wall clock (Unix s); 0 = none
  SortKey sort = SortKey::kRequests;
  std::string filter;
};

// Rows merged by client across `agents`, sorted by `sort` (highest first; the client's name
// ascending for kClient and for ties), only those whose client contains `filter` (any case).
Frame BuildFrame(const std::vector<AgentTracker>& agents, SortKey sort, const std::string& filter);

// The frame as text lines, at most `width` columns each (0 = no limit) and, when `height` is
// not 0, at most `height` lines (the rows that fit). `editing_filter`: the filter is being typed.
std::vector<std::string> FormatFrame(const Frame& frame, size_t width, size_t height,
                                     bool editing_filter = false);
nlohmann::json FrameJson(const Frame& frame);

// "1.5k", "12.0", "0" ; bytes: "3.2 MiB".
std::string FormatRate(double v);
std::string FormatBytes(double v);
// A URL as given ("http://host:port", with or without a path): the /debug/top URL.
std::string TopUrl(const std::string& url);

}  // namespace stormwatch::top
