#include "agent/kube/apf_fetcher.h"

#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

namespace stormwatch {
namespace {

// GA in 1.29; v1beta3 is what 1.26-1.31 serve (the chart supports 1.27+).
const std::vector<std::string> kFlowcontrolVersions = {"v1", "v1beta3"};
constexpr size_t kMaxBodyBytes = 16u << 20;  // a few hundred objects are ~1 MB

int64_t MonotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Result<std::string> ReadToken(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error{"cannot read token file " + path, ErrorCode::kNotFound};
  std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ')) {
    token.pop_back();
  }
  if (token.empty()) return Error{"token file " + path + " is empty"};
  return token;
}

size_t AppendBody(char* data, size_t size, size_t count, void* user) {
  auto* body = static_cast<std::string*>(user);
  if (body->size() + size * count > kMaxBodyBytes) return 0;  // aborts the transfer
  body->append(data, size * count);
  return size * count;
}

// curl_global_init is not thread-safe on every libcurl build: once, before any thread uses it.
void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

}  // namespace

Result<ApfSourceOptions> ResolveApfSource(ApfSourceOptions options,
                                          const std::function<const char*(const char*)>& getenv_fn) {
  if (options.apiserver_url.empty()) {
    const char* host = getenv_fn("KUBERNETES_SERVICE_HOST");
    const char* port = getenv_fn("KUBERNETES_SERVICE_PORT");
    if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
      return Error{"not in a cluster (KUBERNETES_SERVICE_HOST/PORT unset) and no --apiserver-url", ErrorCode::kNotFound};
    }
    std::string h = host;
    if (h.find(':') != std::string::npos) h = "[" + h + "]";  // an IPv6 service address
    options.apiserver_url = "https://" + h + ":" + port;
  }
  if (!options.apiserver_url.starts_with("https://")) {
    return Error{"--apiserver-url must be https:// (the request carries a bearer token): " +
                 options.apiserver_url};
  }
  while (options.apiserver_url.ends_with("/")) options.apiserver_url.pop_back();
  return options;
}

int64_t ApfRefreshSchedule::NextFetchNs() const {
  if (!fetched_) return 0;
  return last_fetch_ns_ + (unknown_uid_ ? unknown_uid_min_ns_ : refresh_ns_);
}

void ApfRefreshSchedule::FetchStarted(int64_t now_ns) {
  fetched_ = true;
  last_fetch_ns_ = now_ns;
  unknown_uid_ = false;
}

ApfFetcher::ApfFetcher(ApfSourceOptions source, ApfNames* names)
    : source_(std::move(source)),
      names_(names),
      schedule_(std::chrono::nanoseconds(source_.refresh_interval).count(),
                std::chrono::nanoseconds(source_.unknown_uid_min_interval).count()) {
  InitCurlOnce();
}

ApfFetcher::~ApfFetcher() { Stop(); }

void ApfFetcher::Start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    stopping_ = false;
  }
  thread_ = std::thread([this] { Run(); });
}

void ApfFetcher::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ApfFetcher::OnUnknownUid() {
  // Only the first unknown UID after a fetch started takes the lock.
  if (unknown_uid_pending_.exchange(true)) return;
  {
    std::lock_guard lock(mu_);
    schedule_.UnknownUid();
  }
  wake_.notify_all();
}

void ApfFetcher::Run() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    int64_t now = MonotonicNs();
    int64_t due = schedule_.NextFetchNs();
    if (now < due) {
      // Woken early by OnUnknownUid or Stop: the loop re-reads the schedule.
      wake_.wait_for(lock, std::chrono::nanoseconds(due - now));
      continue;
    }
    schedule_.FetchStarted(now);
    unknown_uid_pending_ = false;
    lock.unlock();
    FetchOnce();
    lock.lock();
  }
}

bool ApfFetcher::FetchOnce() {
  std::lock_guard fetch_lock(fetch_mu_);
  auto fail = [this](const std::string& error) {
    spdlog::warn("APF names: {}; keeping the names known so far", error);
    std::lock_guard lock(mu_);
    ++stats_.fetches_failed;
    stats_.last_error = error;
    return false;
  };
  Result<std::string> token = ReadToken(source_.token_file);
  if (!token) return fail(token.error().message);
  Result<ApfUidNames> levels = List("prioritylevelconfigurations", "PriorityLevelConfigurationList", *token);
  if (!levels) return fail(levels.error().message);
  Result<ApfUidNames> schemas = List("flowschemas", "FlowSchemaList", *token);
  if (!schemas) return fail(schemas.error().message);

  size_t level_count = levels->size(), schema_count = schemas->size();
  names_->Update(std::move(*levels), std::move(*schemas));
  std::lock_guard lock(mu_);
  bool first_success = stats_.fetches_ok == 0 || !stats_.last_error.empty();
  ++stats_.fetches_ok;
  stats_.last_error.clear();
  stats_.api_version = served_version_;
  if (first_success) {
    spdlog::info("APF names: {} priority levels, {} flow schemas from {} (flowcontrol {})", level_count,
                 schema_count, source_.apiserver_url, served_version_);
  }
  return true;
}

Result<ApfUidNames> ApfFetcher::List(const char* resource, const char* list_kind, const std::string& token) {
  // The version that answered last time first, then the others in order of preference.
  std::vector<std::string> versions;
  if (!served_version_.empty()) versions.push_back(served_version_);
  for (const std::string& v : kFlowcontrolVersions) {
    if (v != served_version_) versions.push_back(v);
  }
  for (const std::string& version : versions) {
    std::string path = "/apis/flowcontrol.apiserver.k8s.io/" + version + "/" + resource;
    HttpResponse response = Get(source_.apiserver_url + path + "?resourceVersion=0", token);
    if (!response.error.empty()) return Error{"GET " + path + ": " + response.error, ErrorCode::kUnavailable};
    if (response.status == 404) continue;  // this version is not served
    if (response.status != 200) {
      // 401/403: the credentials or the ClusterRole; the body (a Status) is not logged.
      return Error{"GET " + path + ": HTTP " + std::to_string(response.status), ErrorCode::kUnavailable};
    }
    Result<ApfUidNames> names = ParseApfList(response.body, list_kind);
    if (!names) return Context("GET " + path + ": ", names.error());
    served_version_ = version;
    return names;
  }
  return Error{std::string("no flowcontrol.apiserver.k8s.io version serves ") + resource + " (tried v1, v1beta3)", ErrorCode::kUnsupported};
}

ApfFetcher::HttpResponse ApfFetcher::Get(const std::string& url, const std::string& token) const {
  HttpResponse out;
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) {
    out.error = "curl_easy_init failed";
    return out;
  }
  std::string authorization = "Authorization: Bearer " + token;
  curl_slist* raw_headers = curl_slist_append(nullptr, authorization.c_str());
  raw_headers = curl_slist_append(raw_headers, "Accept: application/json");
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(raw_headers, curl_slist_free_all);
  char error_buffer[CURL_ERROR_SIZE] = {};
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https");
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c, CURLOPT_USERAGENT, "stormwatch");
  if (!source_.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, source_.ca_file.c_str());
  curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");  // gzip, which the apiserver uses for big lists
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);         // no SIGALRM in a threaded program
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(source_.request_timeout.count() * 1000));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, AppendBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &out.body);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error_buffer);
  CURLcode code = curl_easy_perform(c);
  if (code != CURLE_OK) {
    out.error = error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(code);
    return out;
  }
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out.status);
  return out;
}

ApfFetchStats ApfFetcher::Stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace stormwatch
