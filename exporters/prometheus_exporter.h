// The agent's /metrics endpoint (prometheus-cpp). Metric names and the `client` label plus
// apiserver_request_total's label vocabulary are a contract with checks outside the project.
//
// Series stay bounded: every family with a `client` label holds at most max_clients clients
// plus client="other" (ClientCap decides who); other labels take values from bounded
// vocabularies (verbs, codes, the API's resources, APF levels). Storm gauges always name
// their client: detectors bound how many storms fire.
//
// Every family with a `client` label, the request latency histogram and
// stormwatch_series_folded_total are counted by this exporter itself: label sets interned once,
// plain counts per client under one lock, series made when scraped. prometheus-cpp keeps the
// rest (no client label, few series) and writes the text. A prometheus-cpp series per (client,
// label set) cost a label map, its hash and an allocation each, and clients come and go.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <absl/container/flat_hash_map.h>

#include <array>
#include <initializer_list>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "exporters/client_cap.h"

struct mg_context;
struct mg_connection;

namespace stormwatch {

// Labels of stormwatch_requests_total: `client` plus apiserver_request_total's labels (views:
// valid for the call).
struct RequestLabels {
  ClientName client;
  std::string_view verb, group, version, resource, subresource, scope, code;
};

// One finished request, as stormwatch_requests_total, stormwatch_response_bytes_total,
// stormwatch_apf_requests_total and stormwatch_request_duration_seconds count it (views: valid
// for the call).
struct RequestObservation {
  RequestLabels labels;
  uint64_t response_bytes = 0;
  bool apf = false;  // the response named its APF priority level or flow schema
  std::string_view priority_level, flow_schema;  // "" = unknown
  // Latency as apiserver_request_duration_seconds has it (no client label: bounded series);
  // negative: not observed (a WATCH: its duration is not latency).
  double duration_s = -1;
  // HashFields({group, resource}) of the labels when the caller has it (the record's
  // RecordKeys::resource); 0: hashed here.
  uint64_t resource_key = 0;
};

struct ClientSeriesLimits {
  size_t max_clients = 500;  // clients with their own series, per family
  int idle_s = 600;          // a client's series end after this long without a request
};

class PrometheusExporter {
 public:
  // Serves /metrics on `address` ("host:port"); throws at start-up if it cannot bind (fatal).
  // The endpoint is civetweb's, not prometheus::Exposer: Exposer adds exposer_* series of its
  // own registry, which its API cannot remove (prometheus-cpp 1.0), under no stormwatch_ prefix.
  explicit PrometheusExporter(const std::string& address, ClientSeriesLimits limits = {});
  // No HTTP endpoint: for tests that read the registry directly.
  explicit PrometheusExporter(ClientSeriesLimits limits = {});
  ~PrometheusExporter();
  PrometheusExporter(const PrometheusExporter&) = delete;
  PrometheusExporter& operator=(const PrometheusExporter&) = delete;

  // What a scrape of /metrics returns: Collect(), then the agent's process_* series.
  std::string Scrape() const;
  // Every stormwatch_* family with series: those this exporter counts itself (see above), then
  // prometheus-cpp's registry.
  std::vector<prometheus::MetricFamily> Collect() const;
  // stormwatch_build_info{version, commit, libbpf, kernel} 1.
  void SetBuildInfo(const std::map<std::string, std::string>& labels);

  // One lock, one client decision and one label-set lookup per request: the request
  // families (requests, response bytes, APF, latency) share one interned label set
  // (RequestLabelSet), found once per request.
  void CountRequest(const RequestObservation& request);
  void CountRequest(const RequestLabels& labels, uint64_t response_bytes) {
    RequestObservation request;
    request.labels = labels;
    request.response_bytes = response_bytes;
    CountRequest(request);
  }
  // A gRPC call etcd served (the apiserver's storage traffic): method, the key's resource
  // ("other" outside /registry), the client (certificate CN) and gRPC code name.
  void CountEtcdRequest(std::string_view method, std::string_view resource,
                        const ClientName& client, std::string_view code);
  // One message on an open etcd stream (message: watch_create, watch_cancel, lease_keepalive);
  // resource: a watch create's key, "" otherwise; client: its stream's (unknown for a Watch
  // stream opened before the agent).
  void CountEtcdStreamMessage(std::string_view method, std::string_view message,
                              std::string_view resource, const ClientName& client);
  // What a Range returned: keys and their key + value bytes.
  void CountEtcdRange(std::string_view resource, const ClientName& client, uint64_t keys,
                      uint64_t bytes);
  void ObserveEtcdDuration(std::string_view method, std::string_view resource, double seconds);
  // Consistent LISTs seen with etcd attached, and how many were matched to their etcd Range
  // (cumulative).
  void SetEtcdLinks(uint64_t lists, uint64_t matched);
  // stormwatch_identity_cache_lookups_total{result="connection"|"hit"|"miss"}: cumulative counts.
  void SetIdentityCache(uint64_t connection_hits, uint64_t hits, uint64_t misses);
  // The counter of write response bodies the agent read for object facts, by encoding (json,
  // protobuf, other) and what the read gave (object, partial, not_object, unreadable). Callers
  // keep it: the series is never removed, and a counter counts without the exporter's lock
  // (prometheus-cpp's are atomic).
  prometheus::Counter& ResponseBodyCounter(std::string_view encoding, std::string_view result);
  // LISTs by how much they cost: consistent (etcd) or from the cache, paginated or not.
  void CountList(const ClientName& client, std::string_view group, std::string_view resource,
                 std::string_view scope, std::string_view consistency, bool paginated);
  void SetStormActive(const std::map<std::string, std::string>& labels, bool active);
  void CountStormStarted(const std::string& storm);
  // Adds a cumulative count observed elsewhere (BPF maps) as a delta.
  void SetCaptureLoss(const std::string& cause, uint64_t cumulative);
  void SetProbeHits(const std::string& probe, uint64_t cumulative);
  void SetTargetsAttached(size_t n);
  void SetTargetInfo(const std::map<std::string, std::string>& labels, bool present);
  void CountAttachFailure(const std::string& target, const std::string& reason);
  // How long a target's binary took to plan (ELF, .gopclntab, type data, probe sites).
  void ObserveTargetPlanning(const std::string& target, double seconds);

  // A 429 and its Retry-After (seconds; negative when absent).
  void CountThrottled(const ClientName& client, std::string_view priority_level, int retry_after_s);
  // Requests of an exempt client per reason (priority_level_exempt or system_masters), as the
  // detector counts them: `cumulative` since `since_ns` (a new since_ns: the detector forgot
  // the client and counts afresh), published once a second; the counter grows by the
  // difference. seen_ns: when the client was last seen; its series end after idle_s (Compact).
  void CountExemptClientRequests(const std::string& client, const std::string& reason,
                                 uint64_t cumulative, int64_t since_ns, int64_t seen_ns);
  // A detector's bounded state: keys held now and keys dropped so far (cumulative).
  void SetDetectorState(const std::string& storm, size_t tracked_keys,
                        uint64_t evictions_cumulative, uint64_t refusals_cumulative);
  // Alertmanager notifications so far (cumulative).
  void SetAlertmanagerStats(uint64_t sent, uint64_t failed, uint64_t dropped);
  // A finished WATCH: how long it stayed open, and whether it was a streaming LIST.
  void CountWatch(const ClientName& client, std::string_view group, std::string_view resource,
                  double duration_s, bool send_initial_events);

  // About once a minute: ends the series of idle clients (making room for heavy hitters
  // counted under "other") and of storms resolved more than idle_s ago.
  void Compact(int64_t now_ns);

 private:
  // Families with a `client` label, in the order of kClientFamilyNames.
  enum ClientFamily : size_t {
    kRequests, kResponseBytes, kLists, kApf, kThrottled, kWatches, kEtcdRequests,
    kEtcdRangeKeys, kEtcdRangeBytes, kEtcdStreamMessages, kClientFamilyCount
  };
  // CountRequest's labels without the client (its key: the labels of the request families
  // and the APF pair), interned: what its series are, found once.
  struct RequestLabelSet {
    uint32_t series = 0;  // label set of kRequests (and kResponseBytes: they share theirs)
    uint32_t apf = 0;     // label set of kApf
    uint32_t duration = kNoDuration;  // index in durations_; kNoDuration until observed
  };
  static constexpr uint32_t kNoDuration = UINT32_MAX;
  // stormwatch_request_duration_seconds of one (verb, group, resource), counted here as the
  // client families are (no client label: never removed).
  struct DurationCounts {
    std::array<std::string, 3> labels;  // group, resource, verb: sorted by name
    std::vector<uint64_t> buckets;      // per bucket, +Inf last; not cumulative
    uint64_t count = 0;
    double sum = 0;
  };
  // The label sets of a client family, interned: the values of its labels but the client, in
  // the order of the family's label names (ClientFamilyTextOf), by index, and the index of each
  // by Key() of its values. Bounded as the labels are (verbs, codes, ResourceLabels, APF
  // levels); kept when the clients counting in them end, as client="other" keeps its series.
  struct FamilyLabelSets {
    absl::flat_hash_map<std::string, uint32_t> ids;
    std::vector<std::vector<std::string>> values;
  };
  // stormwatch_response_bytes_total has the labels of stormwatch_requests_total: one label
  // set found per request serves both.
  static constexpr ClientFamily LabelSetsOf(ClientFamily family) {
    return family == kResponseBytes ? kRequests : family;
  }
  // Per client (or "other"): its label and its counts in every client family by SeriesOf(family,
  // interned label set) (no entry: no series); all end with the client's series
  // (EndClientSeries). One table for all families: a request's counts (requests, bytes, APF) are
  // found in one small table, not in one table per family (10 tables' headers made an entry 432
  // bytes, now 80, and each family's table was another cache line or two to reach).
  struct ClientCounters {
    std::string label;
    absl::flat_hash_map<uint64_t, uint64_t> counts;
    uint16_t families = 0;  // bit f: the client has a series in family f
  };
  static_assert(kClientFamilyCount <= 16, "ClientCounters::families has a bit per family");
  static constexpr uint64_t SeriesOf(ClientFamily family, uint32_t set) {
    return uint64_t{family} << 32 | set;
  }
  static constexpr ClientFamily FamilyOfSeries(uint64_t series) {
    return static_cast<ClientFamily>(series >> 32);
  }
  static constexpr uint32_t LabelSetOfSeries(uint64_t series) { return static_cast<uint32_t>(series); }
  using Labels = std::map<std::string, std::string>;

  // The index of the label set whose Key() is `key` in `family`'s label sets; `make_values`
  // (the values in the family's label order, without the client) is only called for a label
  // set not seen before.
  template <typename MakeValues>
  uint32_t LabelSetId(ClientFamily family, const std::string& key, MakeValues make_values);
  // The count of `client` (ClientEntry's) in one label set of `family`, made at 0 when missing;
  // counts a folded observation and a client's first series in the family.
  uint64_t& ClientCount(ClientFamily family, ClientCounters& client, bool admitted, uint32_t set);
  // Both at once: `client` (or "other" when it is not admitted), the label set by its Key().
  template <typename MakeValues>
  uint64_t& ClientCount(ClientFamily family, const ClientName& client, bool admitted,
                        const std::string& key, MakeValues make_values);
  // The entry of `client` (or of "other" when not admitted), made when missing.
  ClientCounters& ClientEntry(const ClientName& client, bool admitted);
  // The index in durations_ of (verb, group, resource)'s histogram, made on first use.
  uint32_t DurationOf(std::string_view verb, std::string_view group, std::string_view resource);
  void EndClientSeries(const std::string& client);
  // The interned label set of a request (made on first use); under mu_.
  RequestLabelSet& LabelSetOf(const RequestObservation& o);
  // The counts of the families counted here, copied under mu_ (a scrape holds the lock only
  // while it copies numbers: the drain waits that long), and the families made from them
  // (labels and strings, without the lock).
  struct CountsSnapshot;
  CountsSnapshot SnapshotCounts() const;
  static void AppendFamilies(const CountsSnapshot& counts, std::vector<prometheus::MetricFamily>& out);
  // `values` joined by \x1f into key_ (reused: no allocation per request); under mu_.
  const std::string& Key(std::initializer_list<std::string_view> values);
  void AddCumulative(prometheus::Family<prometheus::Counter>& family,
                     std::map<std::string, uint64_t>& seen, const std::string& label_name,
                     const std::string& label_value, uint64_t cumulative);
  void UpdateExemptSeriesGauge();
  static int HandleMetrics(mg_connection* conn, void* self);

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<prometheus::Collectable> process_;
  mg_context* http_ = nullptr;
  prometheus::Family<prometheus::Gauge>* build_info_;
  prometheus::Family<prometheus::Histogram>* etcd_duration_;
  prometheus::Family<prometheus::Counter>* etcd_links_;
  prometheus::Family<prometheus::Counter>* response_bodies_;
  std::map<std::pair<std::string, std::string>, prometheus::Counter*, std::less<>> response_body_counters_;
  std::map<std::string, uint64_t> etcd_links_seen_;
  prometheus::Family<prometheus::Counter>* identity_cache_;
  std::map<std::string, uint64_t> identity_cache_seen_;
  prometheus::Family<prometheus::Gauge>* storm_active_;
  prometheus::Family<prometheus::Counter>* storms_total_;
  prometheus::Family<prometheus::Counter>* capture_loss_;
  prometheus::Family<prometheus::Counter>* probe_hits_;
  prometheus::Gauge* targets_attached_;
  prometheus::Family<prometheus::Gauge>* target_info_;
  prometheus::Family<prometheus::Counter>* attach_failures_;
  prometheus::Family<prometheus::Histogram>* target_planning_;
  prometheus::Family<prometheus::Histogram>* retry_after_;
  prometheus::Family<prometheus::Counter>* exempt_;
  prometheus::Family<prometheus::Gauge>* detector_tracked_;
  prometheus::Family<prometheus::Counter>* detector_evictions_;
  prometheus::Family<prometheus::Counter>* detector_refusals_;
  prometheus::Family<prometheus::Counter>* alertmanager_;
  prometheus::Family<prometheus::Histogram>* watch_duration_;
  prometheus::Family<prometheus::Gauge>* client_series_;

  mutable std::mutex mu_;  // SnapshotCounts() copies the counts kept here under it
  std::string key_;  // Key()'s buffer
  ClientCap cap_;
  int64_t idle_ns_;
  std::array<FamilyLabelSets, kClientFamilyCount> family_label_sets_;  // none for kResponseBytes
  std::array<size_t, kClientFamilyCount> clients_per_family_{};
  std::array<prometheus::Gauge*, kClientFamilyCount> client_series_gauges_;
  // stormwatch_series_folded_total per client family, then the exempt family's: plain counts
  // (CountRequest adds to them for most requests when clients are many), collected as counters.
  std::array<uint64_t, kClientFamilyCount + 1> folded_{};
  const ClientName other_{kOtherClient};  // client="other" and its key
  absl::flat_hash_map<uint64_t, ClientCounters> client_counters_;  // by ClientName::key
  // The entry ClientEntry found last (a request counts in several families). Entries move
  // when the map grows: only ClientEntry adds (and re-points this), EndClientSeries erases
  // (and clears this).
  std::pair<const uint64_t, ClientCounters>* last_client_ = nullptr;
  // CountRequest's label sets by RequestLabelKey(), made on first use and kept (as the
  // families' label sets are).
  absl::flat_hash_map<uint64_t, RequestLabelSet> request_label_sets_;
  std::vector<DurationCounts> durations_;
  absl::flat_hash_map<std::string, uint32_t> duration_ids_;  // by Key() of verb, group, resource
  // Histogram handles per label set: Family::Add hashes a std::map on every call.
  absl::flat_hash_map<std::string, prometheus::Histogram*> etcd_duration_cache_;
  absl::flat_hash_map<std::string, prometheus::Histogram*> watch_duration_cache_;
  absl::flat_hash_map<std::string, prometheus::Histogram*> retry_after_cache_;
  // Exempt clients' series by (client, reason): the detector bounds them; capped here as well
  // (clients past the cap count under client="other").
  struct ExemptSeries {
    uint64_t cumulative = 0;  // the detector's count at the last publication ...
    int64_t since_ns = 0;     // ... counted since then
    prometheus::Counter* counter = nullptr;
    bool own = false;  // false: folded into client="other"
    int64_t seen_ns = 0;
  };
  std::map<std::pair<std::string, std::string>, ExemptSeries> exempt_series_;
  std::map<std::string, size_t> exempt_clients_;  // clients with series of their own: how many
  std::map<std::string, prometheus::Counter*> exempt_other_;  // by reason
  prometheus::Gauge* exempt_series_gauge_;
  // Storm gauges at 0, by labels: when their storm resolved, as of the first Compact after.
  std::map<Labels, std::optional<int64_t>> resolved_storms_;
  std::map<std::string, uint64_t> loss_seen_, hits_seen_, evictions_seen_, refusals_seen_,
      alertmanager_seen_;
};

}  // namespace stormwatch
