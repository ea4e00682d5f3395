#include "agent/top/top.h"

#include <curl/curl.h>
#include <curses.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace stormwatch::top {

std::string TopUsage() {
  return R"(usage: stormwatch top [--once [--json]] [--interval S] [--timeout S] [--sort COLUMN]
                      [--filter TEXT] URL [URL...]

A live view of who is hammering the API server now: one row per client, sorted by request
rate, from the agents' /debug/top (plain HTTP; e.g. over `kubectl port-forward`). Several URLs
(one agent per master) are merged by client: rates summed, AGENTS says which agents saw it.
A URL without a path gets /debug/top (http://127.0.0.1:9849 -> http://127.0.0.1:9849/debug/top).

  --once          print one frame and exit (rates over --interval; exit 1 if no agent answered)
  --json          with --once: the frame as JSON
  --interval S    refresh period / rate interval (default 1)
  --timeout S     per fetch (default 2); an agent that does not answer is shown DOWN
  --sort COLUMN   requests, lists, list_bytes, conflicts, throttled, client (default requests)
  --filter TEXT   only clients containing TEXT (any case)

Keys: r l b c t n  sort by req/s, LIST/s, LIST B/s, 409/s, 429/s, client name
      < >          move the sort column     /  filter (Enter keeps, Esc clears)     q  quit
)";
}

Result<TopOptions> ParseTopOptions(int argc, char** argv) {
  TopOptions o;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> Result<std::string> {
      if (i + 1 >= argc) return Error{std::string(name) + " needs a value"};
      return std::string(argv[++i]);
    };
    auto seconds = [&](const char* name, double& out) -> std::optional<Error> {
      auto v = value(name);
      if (!v) return v.error();
      char* end = nullptr;
      out = std::strtod(v->c_str(), &end);
      if (!end || *end || !(out > 0)) return Error{std::string(name) + ": not a positive number: " + *v};
      return std::nullopt;
    };
    if (a == "-h" || a == "--help") {
      o.show_help = true;
    } else if (a == "--once") {
      o.once = true;
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--interval") {
      if (auto e = seconds("--interval", o.interval_s)) return *e;
    } else if (a == "--timeout") {
      if (auto e = seconds("--timeout", o.timeout_s)) return *e;
    } else if (a == "--sort") {
      auto v = value("--sort");
      if (!v) return v.error();
      auto key = SortKeyFromName(*v);
      if (!key) return Error{"--sort: unknown column " + *v};
      o.sort = *key;
    } else if (a == "--filter") {
      auto v = value("--filter");
      if (!v) return v.error();
      o.filter = *v;
    } else if (a.starts_with("-")) {
      return Error{"unknown flag " + a};
    } else {
      o.urls.push_back(a);
    }
  }
  if (o.show_help) return o;
  if (o.urls.empty()) return Error{"at least one agent URL is needed (e.g. http://127.0.0.1:9849)"};
  if (o.json && !o.once) return Error{"--json needs --once"};
  return o;
}

namespace {

size_t Append(char* data, size_t size, size_t n, void* out) {
  auto* body = static_cast<std::string*>(out);
  if (body->size() > 64 * 1024 * 1024) return 0;  // not a /debug/top document
  body->append(data, size * n);
  return size * n;
}

}  // namespace

Result<std::string> Fetch(const std::string& url, double timeout_s) {
  CURL* curl = curl_easy_init();
  if (!curl) return Error{"curl_easy_init failed", ErrorCode::kSystem};
  std::string body;
  char error[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &Append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_s * 1000));
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout_s * 1000));
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  CURLcode rc = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(curl);
  if (rc != CURLE_OK) return Error{error[0] ? error : curl_easy_strerror(rc), ErrorCode::kUnavailable};
  if (status != 200) {
    return Error{"HTTP " + std::to_string(status) +
                 (status == 404 ? " (an agent without /debug/top?)" : ""), ErrorCode::kUnavailable};
  }
  return body;
}

namespace {

std::atomic<bool> g_interrupted{false};
void OnInterrupt(int) { g_interrupted.store(true); }

// Every agent fetched at once: a slow one costs one timeout, not one each.
void FetchAll(std::vector<AgentTracker>& agents, const std::vector<std::string>& urls,
              double timeout_s) {
  std::vector<std::optional<Result<std::string>>> results(urls.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < urls.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = Fetch(urls[i], timeout_s); });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < urls.size(); ++i) agents[i].Update(*results[i]);
}

int RunOnce(std::vector<AgentTracker>& agents, const std::vector<std::string>& urls,
            const TopOptions& o) {
  FetchAll(agents, urls, o.timeout_s);
  std::vector<double> first;
  for (const AgentTracker& a : agents) first.push_back(a.snapshot() ? a.snapshot()->monotonic_s : -1);
  // Rates need a second snapshot of every agent that answered: the agent publishes once a
  // second, so wait the interval, then until each has published anew (bounded).
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int>((o.interval_s + 3) * 1000));
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(o.interval_s * 1000)));
  while (true) {
    FetchAll(agents, urls, o.timeout_s);
    bool all_new = true;
    for (size_t i = 0; i < agents.size(); ++i) {
      if (agents[i].up() && agents[i].snapshot() && agents[i].snapshot()->monotonic_s == first[i]) {
        all_new = false;
      }
    }
    if (all_new || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  Frame frame = BuildFrame(agents, o.sort, o.filter);
  if (o.json) {
    std::puts(FrameJson(frame).dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    for (const std::string& line : FormatFrame(frame, 0, 0)) std::puts(line.c_str());
  }
  return std::any_of(agents.begin(), agents.end(), [](const AgentTracker& a) { return a.up(); }) ? 0 : 1;
}

int RunInteractive(std::vector<AgentTracker>& agents, const std::vector<std::string>& urls,
                   const TopOptions& o) {
  struct sigaction sa = {};
  sa.sa_handler = OnInterrupt;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  if (!initscr()) {
    std::fputs("stormwatch top: cannot start the terminal (TERM?); try --once\n", stderr);
    return 1;
  }
  cbreak();
  noecho();
  set_escdelay(25);  // Esc ends the filter at once (no escape sequence starts that slowly)
  keypad(stdscr, TRUE);
  curs_set(0);
  timeout(100);  // getch waits at most 100 ms: keys feel immediate, fetches stay on time

  SortKey sort = o.sort;
  std::string filter = o.filter, typed;
  bool editing = false;
  auto next_fetch = std::chrono::steady_clock::now();
  bool dirty = true;
  while (!g_interrupted.load()) {
    if (std::chrono::steady_clock::now() >= next_fetch) {
      FetchAll(agents, urls, o.timeout_s);
      next_fetch += std::chrono::milliseconds(static_cast<int>(o.interval_s * 1000));
      if (next_fetch < std::chrono::steady_clock::now()) {
        next_fetch = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<int>(o.interval_s * 1000));
      }
      dirty = true;
    }
    if (dirty) {
      Frame frame = BuildFrame(agents, sort, editing ? typed : filter);
      const size_t height = LINES > 1 ? LINES - 1 : 1, width = COLS > 0 ? COLS : 80;
      std::vector<std::string> lines = FormatFrame(frame, width, height, editing);
      erase();
      for (size_t i = 0; i < lines.size(); ++i) mvaddnstr(i, 0, lines[i].c_str(), width);
      std::string help = editing ? "filter: type text, Enter keeps it, Esc clears it"
                                 : "r l b c t n sort  < > column  / filter  q quit";
      attron(A_REVERSE);
      mvaddnstr(LINES - 1, 0, help.c_str(), width);
      attroff(A_REVERSE);
      refresh();
      dirty = false;
    }
    int ch = getch();
    if (ch == ERR) continue;
    dirty = true;
    if (ch == KEY_RESIZE) continue;  // LINES and COLS are already the new size
    if (editing) {
      if (ch == '\n' || ch == '\r' || ch == KEY_ENTER) {
        filter = typed;
        editing = false;
      } else if (ch == 27) {  // Esc
        filter.clear();
        editing = false;
      } else if (ch == KEY_BACKSPACE || ch == 127 || ch == 8) {
        if (!typed.empty()) typed.pop_back();
      } else if (ch >= 32 && ch < 127) {
        typed += static_cast<char>(ch);
      }
      continue;
    }
    if (ch == 'q' || ch == 'Q') break;
    if (ch == '/') {
      editing = true;
      typed = filter;
    } else if (ch == '<' || ch == KEY_LEFT) {
      sort = MoveSortKey(sort, -1);
    } else if (ch == '>' || ch == KEY_RIGHT) {
      sort = MoveSortKey(sort, +1);
    } else if (auto key = SortKeyFromKey(ch)) {
      sort = *key;
    }
  }
  endwin();
  return 0;
}

}  // namespace

int RunTop(const TopOptions& o) {
  if (o.show_help) {
    std::fputs(TopUsage().c_str(), stdout);
    return 0;
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);
  std::vector<std::string> urls;
  std::vector<AgentTracker> agents;
  for (const std::string& u : o.urls) {
    urls.push_back(TopUrl(u));
    agents.emplace_back(urls.back());
  }
  int rc = o.once ? RunOnce(agents, urls, o) : RunInteractive(agents, urls, o);
  curl_global_cleanup();
  return rc;
}

}  // namespace stormwatch::top
