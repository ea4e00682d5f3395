// Reads the cluster's APF objects (PriorityLevelConfigurations, FlowSchemas) to name the UIDs
// kube-apiserver puts in X-Kubernetes-PF-*-UID response headers. Rarely and cheaply: LISTs
// with resourceVersion=0 (served from the watch cache, never etcd) at start, every 5 minutes,
// and soon after a request carried a UID nobody can name, at most once a minute. Runs in its
// own thread with the agent's own service-account credentials (get/list on the two resources,
// helm/stormwatch/templates/clusterrole.yaml); the callers of ApfNames never wait for it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "agent/core/result.h"
#include "agent/kube/apf_names.h"

namespace stormwatch {



inline constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

// --apiserver-url, --apiserver-token-file, --apiserver-ca-file.
struct ApfSourceOptions {
  std::string apiserver_url;  // "" = in cluster: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
  std::string token_file = std::string(kServiceAccountDir) + "/token";  // re-read per fetch: tokens rotate
  std::string ca_file = std::string(kServiceAccountDir) + "/ca.crt";
  std::chrono::seconds refresh_interval{300};
  std::chrono::seconds unknown_uid_min_interval{60};
  std::chrono::seconds request_timeout{10};
};

// Fills in the in-cluster URL when none is given and refuses anything but https (the request
// carries a bearer token). An error means: no fetching, static names only.
Result<ApfSourceOptions> ResolveApfSource(ApfSourceOptions options,
                                          const std::function<const char*(const char*)>& getenv_fn);

// When the next fetch is due, on the monotonic clock (ns). Pure, so the policy is unit-tested.
class ApfRefreshSchedule {
 public:
  ApfRefreshSchedule(int64_t refresh_interval_ns, int64_t unknown_uid_min_interval_ns)
      : refresh_ns_(refresh_interval_ns), unknown_uid_min_ns_(unknown_uid_min_interval_ns) {}

  // At once before the first fetch; a refresh interval after the last one started, or the
  // minimum interval after it when an unknown UID showed up since.
  int64_t NextFetchNs() const;
  void FetchStarted(int64_t now_ns);
  void UnknownUid() { unknown_uid_ = true; }

 private:
  int64_t refresh_ns_;
  int64_t unknown_uid_min_ns_;
  bool fetched_ = false;
  int64_t last_fetch_ns_ = 0;
  bool unknown_uid_ = false;
};

struct ApfFetchStats {
  uint64_t fetches_ok = 0;
  uint64_t fetches_failed = 0;
  std::string api_version;  // the flowcontrol version last served, e.g. "v1" or "v1beta3"
  std::string last_error;   // of the last failed fetch; never holds the token
};

class ApfFetcher {
 public:
  // `names` must outlive the fetcher. `source` comes from ResolveApfSource.
  ApfFetcher(ApfSourceOptions source, ApfNames* names);
  ~ApfFetcher();
  ApfFetcher(const ApfFetcher&) = delete;
  ApfFetcher& operator=(const ApfFetcher&) = delete;

  void Start();
  void Stop();

  // A request carried a UID that ApfNames could not name: fetch soon. Cheap and non-blocking
  // when called for every such request.
  void OnUnknownUid();

  // One fetch of both lists, now, in the caller's thread (the fetcher thread's unit of work).
  // On success ApfNames gets the new names; on failure it keeps the previous ones.
  bool FetchOnce();

  ApfFetchStats Stats() const;

 private:
  struct HttpResponse {
    long status = 0;
    std::string body;
    std::string error;  // transport error; "" when a response arrived
  };

  void Run();
  Result<ApfUidNames> List(const char* resource, const char* list_kind, const std::string& token);
  HttpResponse Get(const std::string& url, const std::string& token) const;

  const ApfSourceOptions source_;
  ApfNames* const names_;

  std::mutex fetch_mu_;         // one fetch at a time; guards served_version_
  std::string served_version_;  // tried first next time

  mutable std::mutex mu_;       // never held during a fetch
  std::condition_variable wake_;
  ApfRefreshSchedule schedule_;
  bool stopping_ = false;
  ApfFetchStats stats_;
  std::atomic<bool> unknown_uid_pending_{false};
  std::thread thread_;
};

}  // namespace stormwatch
