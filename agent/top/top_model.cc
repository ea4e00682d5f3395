#include "agent/top/top_model.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <map>

namespace stormwatch::top {

Result<AgentSnapshot> ParseAgentSnapshot(const std::string& body) {
  nlohmann::json doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return Error{"not a JSON object"};
  if (!doc.contains("clients") || !doc["clients"].is_array() || !doc.contains("monotonic_s")) {
    return Error{"not a /debug/top document (no clients or monotonic_s)"};
  }
  try {
    AgentSnapshot s;
    s.node = doc.value("node", "");
    s.time = doc.value("time", 0.0);
    s.monotonic_s = doc["monotonic_s"].get<double>();
    s.requests = doc.value("requests", uint64_t{0});
    s.untracked_requests = doc.value("untracked_requests", uint64_t{0});
    for (const nlohmann::json& c : doc["clients"]) {
      ClientCounters cc;
      cc.client = c.at("client").get<std::string>();
      cc.requests = c.value("requests", uint64_t{0});
      cc.lists = c.value("lists", uint64_t{0});
      cc.list_bytes = c.value("list_bytes", uint64_t{0});
      cc.conflicts = c.value("conflicts", uint64_t{0});
      cc.throttled = c.value("throttled", uint64_t{0});
      cc.priority_level = c.value("priority_level", "");
      if (c.contains("storms")) cc.storms = c["storms"].get<std::vector<std::string>>();
      s.clients.push_back(std::move(cc));
    }
    if (doc.contains("active_storms") && doc["active_storms"].is_object()) {
      for (const auto& [client, storms] : doc["active_storms"].items()) {
        s.active_storms[client] = storms.get<std::vector<std::string>>();
      }
    }
    return s;
  } catch (const nlohmann::json::exception& e) {
    return Error{std::string("bad /debug/top document: ") + e.what()};
  }
}

Rates& Rates::operator+=(const Rates& o) {
  requests += o.requests;
  lists += o.lists;
  list_bytes += o.list_bytes;
  conflicts += o.conflicts;
  throttled += o.throttled;
  return *this;
}

void AgentTracker::Update(const Result<std::string>& body) {
  if (!body) {
    up_ = false;
    error_ = body.error().message;
    rates_.clear();
    return;
  }
  auto parsed = ParseAgentSnapshot(*body);
  if (!parsed) {
    up_ = false;
    error_ = parsed.error().message;
    rates_.clear();
    return;
  }
  AgentSnapshot& snap = *parsed;
  up_ = true;
  error_.clear();
  // The agent publishes once a second: fetched again before that, nothing changed.
  if (current_ && snap.monotonic_s == current_->monotonic_s) return;
  rates_.clear();
  for (const ClientCounters& c : snap.clients) {
    auto it = seen_.find(c.client);
    if (it != seen_.end()) {
      const ClientCounters& p = it->second.counters;
      const double dt = snap.monotonic_s - it->second.monotonic_s;
      // Counters that went back: the agent restarted, or evicted the client and met it again.
      if (dt > 0 && c.requests >= p.requests && c.lists >= p.lists &&
          c.list_bytes >= p.list_bytes && c.conflicts >= p.conflicts &&
          c.throttled >= p.throttled) {
        rates_[c.client] = Rates{(c.requests - p.requests) / dt, (c.lists - p.lists) / dt,
                                 (c.list_bytes - p.list_bytes) / dt,
                                 (c.conflicts - p.conflicts) / dt,
                                 (c.throttled - p.throttled) / dt};
      }
    }
    seen_[c.client] = Seen{snap.monotonic_s, c};
  }
  // Clients not listed for five minutes are forgotten (the list is bounded, this map too).
  std::erase_if(seen_, [&](const auto& e) { return snap.monotonic_s - e.second.monotonic_s > 300; });
  total_rate_.reset();
  untracked_rate_.reset();
  if (total_seen_ && snap.monotonic_s > total_seen_->monotonic_s &&
      snap.requests >= total_seen_->requests &&
      snap.untracked_requests >= total_seen_->untracked_requests) {
    const double dt = snap.monotonic_s - total_seen_->monotonic_s;
    total_rate_ = (snap.requests - total_seen_->requests) / dt;
    untracked_rate_ = (snap.untracked_requests - total_seen_->untracked_requests) / dt;
  }
  total_seen_ = Totals{snap.monotonic_s, snap.requests, snap.untracked_requests};
  current_ = std::move(snap);
}

const char* SortKeyName(SortKey key) {
  switch (key) {
    case SortKey::kRequests: return "requests";
    case SortKey::kLists: return "lists";
    case SortKey::kListBytes: return "list_bytes";
    case SortKey::kConflicts: return "conflicts";
    case SortKey::kThrottled: return "throttled";
    case SortKey::kClient: return "client";
  }
  return "requests";
}

std::optional<SortKey> SortKeyFromName(const std::string& name) {
  for (SortKey k : kSortKeys) {
    if (name == SortKeyName(k)) return k;
  }
  return std::nullopt;
}

std::optional<SortKey> SortKeyFromKey(int ch) {
  switch (ch) {
    case 'r': return SortKey::kRequests;
    case 'l': return SortKey::kLists;
    case 'b': return SortKey::kListBytes;
    case 'c': return SortKey::kConflicts;
    case 't': return SortKey::kThrottled;
    case 'n': return SortKey::kClient;
    default: return std::nullopt;
  }
}

SortKey MoveSortKey(SortKey key, int step) {
  constexpr int n = std::size(kSortKeys);
  int i = 0;
  while (i < n && kSortKeys[i] != key) ++i;
  return kSortKeys[std::clamp(i + step, 0, n - 1)];
}

namespace {

double RateOf(const Rates& r, SortKey key) {
  switch (key) {
    case SortKey::kRequests: return r.requests;
    case SortKey::kLists: return r.lists;
    case SortKey::kListBytes: return r.list_bytes;
    case SortKey::kConflicts: return r.conflicts;
    case SortKey::kThrottled: return r.throttled;
    case SortKey::kClient: return 0;
  }
  return 0;
}

uint64_t CountOf(const ClientCounters& c, SortKey key) {
  switch (key) {
    case SortKey::kRequests: return c.requests;
    case SortKey::kLists: return c.lists;
    case SortKey::kListBytes: return c.list_bytes;
    case SortKey::kConflicts: return c.conflicts;
    case SortKey::kThrottled: return c.throttled;
    case SortKey::kClient: return 0;
  }
  return 0;
}

std::string Lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string Join(const std::set<std::string>& items, const char* sep) {
  std::string out;
  for (const std::string& s : items) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

}  // namespace

Frame BuildFrame(const std::vector<AgentTracker>& agents, SortKey sort, const std::string& filter) {
  Frame f;
  f.sort = sort;
  f.filter = filter;
  std::map<std::string, Row> rows;
  double total_requests = 0, untracked_requests = 0;
  bool every_total_known = true;
  for (size_t i = 0; i < agents.size(); ++i) {
    const AgentTracker& a = agents[i];
    f.agents.push_back({a.url(), a.snapshot() ? a.snapshot()->node : "", a.error(), a.up()});
    if (!a.up() || !a.snapshot()) continue;
    const AgentSnapshot& s = *a.snapshot();
    const int index = static_cast<int>(i) + 1;
    f.time = std::max(f.time, s.time);
    if (auto t = a.total_request_rate()) {
      total_requests += *t;
      untracked_requests += a.untracked_request_rate().value_or(0);
    } else {
      every_total_known = false;
    }
    for (const ClientCounters& c : s.clients) {
      Row& row = rows[c.client];
      row.client = c.client;
      row.totals.requests += c.requests;
      row.totals.lists += c.lists;
      row.totals.list_bytes += c.list_bytes;
      row.totals.conflicts += c.conflicts;
      row.totals.throttled += c.throttled;
      if (auto r = a.rates().find(c.client); r != a.rates().end()) {
        row.rates += r->second;
        row.has_rate = true;
      }
      if (!c.priority_level.empty()) row.priority_levels.insert(c.priority_level);
      row.storms.insert(c.storms.begin(), c.storms.end());
      row.agents.push_back(index);
    }
    // Storming clients not in the list (quiet now, or beyond its limit) still get their row.
    for (const auto& [client, storms] : s.active_storms) {
      Row& row = rows[client];
      row.client = client;
      row.storms.insert(storms.begin(), storms.end());
      if (row.agents.empty() || row.agents.back() != index) row.agents.push_back(index);
    }
  }
  f.clients_total = rows.size();
  for (const auto& [client, row] : rows) {
    f.totals += row.rates;
    f.totals_have_rate = f.totals_have_rate || row.has_rate;
  }
  // The agents' own totals also count clients beyond their lists.
  if (every_total_known && !f.agents.empty() &&
      std::any_of(f.agents.begin(), f.agents.end(), [](const auto& a) { return a.up; })) {
    f.totals.requests = total_requests;
    f.totals_have_rate = true;
    f.untracked_requests = untracked_requests;
  }
  const std::string needle = Lower(filter);
  for (auto& [client, row] : rows) {
    if (needle.empty() || Lower(client).find(needle) != std::string::npos) {
      f.rows.push_back(std::move(row));
    }
  }
  std::stable_sort(f.rows.begin(), f.rows.end(), [sort](const Row& a, const Row& b) {
    if (sort != SortKey::kClient) {
      const double ra = RateOf(a.rates, sort), rb = RateOf(b.rates, sort);
      if (ra != rb) return ra > rb;
      const uint64_t ca = CountOf(a.totals, sort), cb = CountOf(b.totals, sort);
      if (ca != cb) return ca > cb;
    }
    return a.client < b.client;
  });
  return f;
}

std::string FormatRate(double v) {
  char buf[32];
  if (v < 0.05) return "0";
  if (v < 100) {
    std::snprintf(buf, sizeof(buf), "%.1f", v);
  } else if (v < 10000) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1fk", v / 1000);
  }
  return buf;
}

std::string FormatBytes(double v) {
  char buf[32];
  if (v < 0.5) return "0";
  if (v < 1024) {
    std::snprintf(buf, sizeof(buf), "%.0f B", v);
  } else if (v < 1024 * 1024) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", v / 1024);
  } else if (v < 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", v / (1024 * 1024));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f GiB", v / (1024.0 * 1024 * 1024));
  }
  return buf;
}

std::string TopUrl(const std::string& url) {
  std::string u = url;
  if (u.find("://") == std::string::npos) u = "http://" + u;
  const size_t host = u.find("://") + 3;
  const size_t slash = u.find('/', host);
  if (slash == std::string::npos) return u + "/debug/top";
  if (slash == u.size() - 1) return u + "debug/top";
  return u;
}

namespace {

std::string Fit(const std::string& s, size_t width) {
  if (width == 0 || s.size() <= width) return s;
  if (width <= 2) return s.substr(0, width);
  // Identities end with what tells them apart (namespace:name): keep the end.
  return ".." + s.substr(s.size() - (width - 2));
}

std::string PadLeft(const std::string& s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}
std::string PadRight(const std::string& s, size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

struct Column {
  const char* title;
  size_t width;
  std::optional<SortKey> key;
};
constexpr Column kColumns[] = {{"REQ/S", 8, SortKey::kRequests},
                               {"LIST/S", 8, SortKey::kLists},
                               {"LIST B/S", 10, SortKey::kListBytes},
                               {"409/S", 7, SortKey::kConflicts},
                               {"429/S", 7, SortKey::kThrottled}};
constexpr size_t kApfWidth = 16, kAgentsWidth = 7;

std::string TimeText(double unix_s) {
  if (unix_s <= 0) return "--:--:-- UTC";
  time_t t = static_cast<time_t>(unix_s);
  tm utc;
  gmtime_r(&t, &utc);
  char buf[40];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &utc);
  return buf;
}

}  // namespace

std::vector<std::string> FormatFrame(const Frame& frame, size_t width, size_t height,
                                     bool editing_filter) {
  std::vector<std::string> lines;
  auto add = [&](std::string line) {
    if (width) line = line.substr(0, width);
    lines.push_back(std::move(line));
  };
  size_t up = std::count_if(frame.agents.begin(), frame.agents.end(), [](const auto& a) { return a.up; });
  std::string head = "stormwatch top  " + TimeText(frame.time) + "  agents " + std::to_string(up) +
                     "/" + std::to_string(frame.agents.size()) + " up  clients " +
                     std::to_string(frame.clients_total) + "  sort " + SortKeyName(frame.sort);
  if (!frame.filter.empty() || editing_filter) {
    head += "  filter /" + frame.filter + (editing_filter ? "_" : "") + " (" +
            std::to_string(frame.rows.size()) + " shown)";
  }
  add(head);
  auto rate = [&](double v) { return frame.totals_have_rate ? FormatRate(v) : std::string("-"); };
  // Clients without an entry in an agent (its table full) are counted, not listed: how much of
  // the traffic the rows cannot show.
  const std::string untracked =
      frame.untracked_requests && *frame.untracked_requests > 0
          ? " (" + FormatRate(*frame.untracked_requests) + " untracked)"
          : "";
  add("total  req/s " + rate(frame.totals.requests) + untracked + "  LIST/s " + rate(frame.totals.lists) +
      "  LIST B/s " + (frame.totals_have_rate ? FormatBytes(frame.totals.list_bytes) : "-") +
      "  409/s " + rate(frame.totals.conflicts) + "  429/s " + rate(frame.totals.throttled));
  for (size_t i = 0; i < frame.agents.size(); ++i) {
    const Frame::Agent& a = frame.agents[i];
    std::string line = "[" + std::to_string(i + 1) + "] " + a.url;
    if (a.up) {
      line += "  up" + (a.node.empty() ? "" : "  node " + a.node);
    } else {
      line += "  DOWN: " + a.error;
    }
    add(line);
  }
  add("");

  // Column widths: the client's takes what the others leave, up to its longest name.
  size_t fixed = kApfWidth + kAgentsWidth + 2;
  for (const Column& c : kColumns) fixed += c.width + 1;
  size_t longest = 6;
  for (const Row& r : frame.rows) longest = std::max(longest, r.client.size());
  size_t client_width = longest;
  if (width) {
    const size_t room = width > fixed + 12 ? width - fixed - 12 : 12;  // 12: some of STORMS
    client_width = std::clamp<size_t>(longest, 12, std::max<size_t>(room, 12));
  }
  auto mark = [&](const char* title, std::optional<SortKey> key) {
    return std::string(title) + (key == frame.sort ? "*" : "");
  };
  std::string header = PadRight(mark("CLIENT", SortKey::kClient), client_width);
  for (const Column& c : kColumns) header += " " + PadLeft(mark(c.title, c.key), c.width);
  header += "  " + PadRight("APF", kApfWidth) + " " + PadRight("AGENTS", kAgentsWidth) + " STORMS";
  add(header);

  size_t room = height ? (height > lines.size() ? height - lines.size() : 0) : frame.rows.size();
  const bool cut = frame.rows.size() > room;
  const size_t shown = cut ? (room ? room - 1 : 0) : frame.rows.size();
  for (size_t i = 0; i < shown; ++i) {
    const Row& r = frame.rows[i];
    auto cell = [&](double v) { return r.has_rate ? FormatRate(v) : std::string("-"); };
    std::string line = PadRight(Fit(r.client, client_width), client_width);
    line += " " + PadLeft(cell(r.rates.requests), kColumns[0].width);
    line += " " + PadLeft(cell(r.rates.lists), kColumns[1].width);
    line += " " + PadLeft(r.has_rate ? FormatBytes(r.rates.list_bytes) : "-", kColumns[2].width);
    line += " " + PadLeft(cell(r.rates.conflicts), kColumns[3].width);
    line += " " + PadLeft(cell(r.rates.throttled), kColumns[4].width);
    std::string apf = r.priority_levels.empty() ? "-" : Join(r.priority_levels, ",");
    line += "  " + PadRight(Fit(apf, kApfWidth), kApfWidth);
    std::string agents;
    for (int a : r.agents) agents += (agents.empty() ? "" : ",") + std::to_string(a);
    line += " " + PadRight(agents, kAgentsWidth);
    line += " " + (r.storms.empty() ? std::string("-") : Join(r.storms, ", "));
    add(line);
  }
  if (cut && room) add("... " + std::to_string(frame.rows.size() - shown) + " more");
  return lines;
}

nlohmann::json FrameJson(const Frame& frame) {
  nlohmann::json agents = nlohmann::json::array();
  for (const Frame::Agent& a : frame.agents) {
    nlohmann::json j = {{"url", a.url}, {"up", a.up}, {"node", a.node}};
    if (!a.up) j["error"] = a.error;
    agents.push_back(std::move(j));
  }
  auto rates = [](const Rates& r, bool known) -> nlohmann::json {
    if (!known) {
      return {{"requests_per_second", nullptr}, {"lists_per_second", nullptr},
              {"list_bytes_per_second", nullptr}, {"conflicts_per_second", nullptr},
              {"throttled_per_second", nullptr}};
    }
    return {{"requests_per_second", r.requests}, {"lists_per_second", r.lists},
            {"list_bytes_per_second", r.list_bytes}, {"conflicts_per_second", r.conflicts},
            {"throttled_per_second", r.throttled}};
  };
  nlohmann::json clients = nlohmann::json::array();
  for (const Row& r : frame.rows) {
    nlohmann::json c = rates(r.rates, r.has_rate);
    c["client"] = r.client;
    c["requests"] = r.totals.requests;
    c["lists"] = r.totals.lists;
    c["list_bytes"] = r.totals.list_bytes;
    c["conflicts"] = r.totals.conflicts;
    c["throttled"] = r.totals.throttled;
    c["priority_levels"] = r.priority_levels;
    c["storms"] = r.storms;
    nlohmann::json urls = nlohmann::json::array();
    for (int a : r.agents) urls.push_back(frame.agents[a - 1].url);
    c["agents"] = std::move(urls);
    clients.push_back(std::move(c));
  }
  return {{"time", frame.time},
          {"sort", SortKeyName(frame.sort)},
          {"filter", frame.filter},
          {"agents", std::move(agents)},
          {"clients_total", frame.clients_total},
          {"totals", rates(frame.totals, frame.totals_have_rate)},
          {"untracked_requests_per_second",
           frame.untracked_requests ? nlohmann::json(*frame.untracked_requests) : nlohmann::json()},
          {"clients", std::move(clients)}};
}

}  // namespace stormwatch::top
