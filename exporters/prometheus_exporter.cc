#include "exporters/prometheus_exporter.h"

#include <civetweb.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <stdexcept>

#include "agent/core/strings.h"
#include "agent/kube/record_keys.h"
#include "exporters/process_collector.h"

namespace stormwatch {

namespace {

// Values of the `metric` label of stormwatch_client_series and stormwatch_series_folded_total.
constexpr const char* kClientFamilyNames[] = {
    "stormwatch_requests_total",      "stormwatch_response_bytes_total",
    "stormwatch_list_requests_total", "stormwatch_apf_requests_total",
    "stormwatch_throttled_requests_total", "stormwatch_watches_total",
    "stormwatch_etcd_requests_total", "stormwatch_etcd_range_keys_total",
    "stormwatch_etcd_range_bytes_total", "stormwatch_etcd_stream_messages_total"};
constexpr char kExemptFamilyName[] = "stormwatch_exempt_client_requests_total";
constexpr char kFoldedHelp[] =
    "Observations counted under client=\"other\" because the client had no series of its own "
    "(client limit reached).";

// The client families' help (ClientFamilyTextOf) and the latency histogram's.
constexpr char kRequestsHelp[] =
    "Requests the API server handled, by client and by the labels of apiserver_request_total.";
constexpr char kResponseBytesHelp[] =
    "Response body bytes written by the API server, by client and by the labels of "
    "apiserver_request_total.";
constexpr char kApfHelp[] =
    "Requests by client and the API Priority and Fairness priority level and flow schema that "
    "classified them (unknown when the response did not say or the UID is not mapped to a name).";
constexpr char kDurationHelp[] =
    "Time from decoded request headers to the handler's end, by verb and resource (as "
    "apiserver_request_duration_seconds).";
// apiserver_request_duration_seconds' buckets, so the two line up.
constexpr double kDurationBuckets[] = {0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5,
                                       2,     3,     4,    5,   6,   8,   10,  15,  20,  30,  45, 60};
// The client families, by ClientFamily: help and the label names but the client, sorted by name
// ("client" sorts before every one of them) as prometheus-cpp's exposition has them.
struct ClientFamilyText {
  const char* help;
  std::vector<const char*> labels;
};
const ClientFamilyText& ClientFamilyTextOf(size_t family) {
  // apiserver_request_total's labels: requests and response bytes share their label sets.
  static const std::vector<const char*> kRequestLabels = {"code",  "group", "resource", "scope",
                                                          "subresource", "verb", "version"};
  static const ClientFamilyText kTexts[] = {
      {kRequestsHelp, kRequestLabels},
      {kResponseBytesHelp, kRequestLabels},
      {"LIST requests by client and cost shape: consistency (consistent reads go to etcd; any = "
       "resourceVersion=0 from the watch cache) and pagination.",
       {"consistency", "group", "paginated", "resource", "scope"}},
      {kApfHelp, {"flow_schema", "priority_level"}},
      {"Requests rejected with 429 Too Many Requests, by client and priority level.",
       {"priority_level"}},
      {"Finished WATCH requests, by client and resource, and whether they were streaming LISTs "
       "(sendInitialEvents).",
       {"group", "resource", "send_initial_events"}},
      {"gRPC calls etcd served, by method, the resource of the key (kube-apiserver's /registry "
       "layout), client (certificate CN) and gRPC code (as grpc_server_handled_total's "
       "grpc_code).",
       {"code", "method", "resource"}},
      {"Keys etcd Range calls returned, by resource and client.", {"resource"}},
      {"Key and value bytes etcd Range calls returned, by resource and client.", {"resource"}},
      {"Messages on open etcd streams, seen where etcd handles them: watch_create (by the watched "
       "key's resource), watch_cancel, lease_keepalive, by the stream's client (certificate CN).",
       {"message", "method", "resource"}},
  };
  static_assert(std::size(kTexts) == std::size(kClientFamilyNames));
  return kTexts[family];
}

// An APF name as exposed (and keyed: an empty name and a name "unknown" are one series).
std::string_view OrUnknown(std::string_view value) { return value.empty() ? "unknown" : value; }

}  // namespace

PrometheusExporter::PrometheusExporter(const std::string& address, ClientSeriesLimits limits)
    : PrometheusExporter(limits) {
  mg_init_library(0);
  // Scrapes are rare (every 15-60 s) and one at a time per Prometheus: 2 threads, as Exposer had.
  const char* options[] = {"listening_ports", address.c_str(), "num_threads", "2", nullptr};
  mg_callbacks callbacks{};
  http_ = mg_start(&callbacks, nullptr, options);
  if (!http_) throw std::runtime_error("cannot listen on " + address);
  mg_set_request_handler(http_, "/metrics", &PrometheusExporter::HandleMetrics, this);
}

PrometheusExporter::~PrometheusExporter() {
  if (http_) mg_stop(http_);  // joins its threads: no scrape runs past this
}

struct PrometheusExporter::CountsSnapshot {
  struct Count {
    uint32_t client, set;  // indices in clients, the family's label sets
    uint64_t count;
  };
  std::vector<std::string> clients;  // labels
  std::array<std::vector<Count>, kClientFamilyCount> counts;  // by ClientFamily
  // By ClientFamily; none for kResponseBytes (LabelSetsOf).
  std::array<std::vector<std::vector<std::string>>, kClientFamilyCount> label_sets;
  std::vector<DurationCounts> durations;
  std::array<uint64_t, kClientFamilyCount + 1> folded{};
};

PrometheusExporter::CountsSnapshot PrometheusExporter::SnapshotCounts() const {
  CountsSnapshot c;
  std::lock_guard lock(mu_);
  std::array<size_t, kClientFamilyCount> series{};
  for (const auto& [key, client] : client_counters_) {
    for (const auto& [s, count] : client.counts) ++series[FamilyOfSeries(s)];
  }
  for (size_t f = 0; f < kClientFamilyCount; ++f) c.counts[f].reserve(series[f]);
  c.clients.reserve(client_counters_.size());
  for (const auto& [key, client] : client_counters_) {
    const auto index = static_cast<uint32_t>(c.clients.size());
    c.clients.push_back(client.label);
    for (const auto& [s, count] : client.counts) {
      c.counts[FamilyOfSeries(s)].push_back({index, LabelSetOfSeries(s), count});
    }
  }
  for (size_t f = 0; f < kClientFamilyCount; ++f) c.label_sets[f] = family_label_sets_[f].values;
  c.durations = durations_;
  c.folded = folded_;
  return c;
}

void PrometheusExporter::AppendFamilies(const CountsSnapshot& c,
                                        std::vector<prometheus::MetricFamily>& out) {
  using prometheus::ClientMetric;
  // As prometheus-cpp's families: none without series.
  for (size_t f = 0; f < kClientFamilyCount; ++f) {
    if (c.counts[f].empty()) continue;
    const ClientFamilyText& text = ClientFamilyTextOf(f);
    const auto& label_sets = c.label_sets[LabelSetsOf(static_cast<ClientFamily>(f))];
    prometheus::MetricFamily family{kClientFamilyNames[f], text.help,
                                    prometheus::MetricType::Counter, {}};
    family.metric.reserve(c.counts[f].size());
    for (const CountsSnapshot::Count& n : c.counts[f]) {
      ClientMetric m;
      m.label.reserve(1 + text.labels.size());
      m.label.push_back({"client", c.clients[n.client]});
      for (size_t i = 0; i < text.labels.size(); ++i) {
        m.label.push_back({text.labels[i], label_sets[n.set][i]});
      }
      m.counter.value = static_cast<double>(n.count);
      family.metric.push_back(std::move(m));
    }
    out.push_back(std::move(family));
  }
  prometheus::MetricFamily durations{"stormwatch_request_duration_seconds", kDurationHelp,
                                     prometheus::MetricType::Histogram, {}};
  for (const DurationCounts& d : c.durations) {
    ClientMetric m;
    m.label = {{"group", d.labels[0]}, {"resource", d.labels[1]}, {"verb", d.labels[2]}};
    m.histogram.sample_count = d.count;
    m.histogram.sample_sum = d.sum;
    uint64_t cumulative = 0;
    for (size_t i = 0; i < d.buckets.size(); ++i) {
      cumulative += d.buckets[i];
      m.histogram.bucket.push_back({cumulative, i < std::size(kDurationBuckets)
                                                    ? kDurationBuckets[i]
                                                    : std::numeric_limits<double>::infinity()});
    }
    durations.metric.push_back(std::move(m));
  }
  if (!durations.metric.empty()) out.push_back(std::move(durations));
  prometheus::MetricFamily folded{"stormwatch_series_folded_total", kFoldedHelp,
                                  prometheus::MetricType::Counter, {}};
  for (size_t f = 0; f < c.folded.size(); ++f) {
    ClientMetric m;
    m.label = {{"metric", f < kClientFamilyCount ? kClientFamilyNames[f] : kExemptFamilyName}};
    m.counter.value = static_cast<double>(c.folded[f]);
    folded.metric.push_back(std::move(m));
  }
  out.push_back(std::move(folded));
}

std::vector<prometheus::MetricFamily> PrometheusExporter::Collect() const {
  std::vector<prometheus::MetricFamily> families;
  AppendFamilies(SnapshotCounts(), families);
  for (auto& f : registry_->Collect()) families.push_back(std::move(f));
  return families;
}

std::string PrometheusExporter::Scrape() const {
  std::vector<prometheus::MetricFamily> families = Collect();
  for (auto& f : process_->Collect()) families.push_back(std::move(f));
  return prometheus::TextSerializer().Serialize(families);
}

int PrometheusExporter::HandleMetrics(mg_connection* conn, void* self) {
  std::string body = static_cast<PrometheusExporter*>(self)->Scrape();
  mg_printf(conn,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            "Content-Length: %zu\r\nConnection: close\r\n\r\n",
            body.size());
  mg_write(conn, body.data(), body.size());
  return 200;
}

void PrometheusExporter::SetBuildInfo(const std::map<std::string, std::string>& labels) {
  build_info_->Add(labels).Set(1);
}

PrometheusExporter::PrometheusExporter(ClientSeriesLimits limits)
    : registry_(std::make_shared<prometheus::Registry>()),
      process_(std::make_shared<ProcessCollector>()),
      cap_(limits.max_clients, int64_t{limits.idle_s} * 1'000'000'000),
      idle_ns_(int64_t{limits.idle_s} * 1'000'000'000) {
  etcd_duration_ = &prometheus::BuildHistogram()
                        .Name("stormwatch_etcd_request_duration_seconds")
                        .Help("Time etcd took for a unary gRPC call, from its interceptor's "
                              "entry to its return, by method and resource.")
                        .Register(*registry_);
  etcd_links_ = &prometheus::BuildCounter()
                    .Name("stormwatch_etcd_list_links_total")
                    .Help("Consistent LISTs the API server served while etcd was attached on the "
                          "same node, by whether the etcd Range each caused was found.")
                    .Register(*registry_);
  identity_cache_ = &prometheus::BuildCounter()
                        .Name("stormwatch_identity_cache_lookups_total")
                        .Help("Requests whose client identity was already decoded (result=hit) or "
                              "whose token had to be decoded (miss): many misses, raise "
                              "limits.max_identities.")
                        .Register(*registry_);
  response_bodies_ = &prometheus::BuildCounter()
                         .Name("stormwatch_response_bodies_total")
                         .Help("Write responses whose first bytes were read for object facts "
                               "(generation, deletionTimestamp, finalizers), by encoding (json, "
                               "protobuf, other) and result (object, partial: cut before the "
                               "facts, not_object: Status or List, unreadable).")
                         .Register(*registry_);
  storm_active_ = &prometheus::BuildGauge()
                       .Name("stormwatch_storm_active")
                       .Help("1 while a storm is firing for this client and resource; severity as in its alert.")
                       .Register(*registry_);
  storms_total_ = &prometheus::BuildCounter()
                       .Name("stormwatch_storms_total")
                       .Help("Storms that started firing, by kind.")
                       .Register(*registry_);
  capture_loss_ = &prometheus::BuildCounter()
                       .Name("stormwatch_capture_lost_total")
                       .Help("Events or parts of events lost in capture, by cause.")
                       .Register(*registry_);
  probe_hits_ = &prometheus::BuildCounter()
                     .Name("stormwatch_probe_hits_total")
                     .Help("Uprobe hits, by probe.")
                     .Register(*registry_);
  targets_attached_ = &prometheus::BuildGauge()
                           .Name("stormwatch_targets_attached")
                           .Help("Target processes with probes attached.")
                           .Register(*registry_)
                           .Add({});
  target_info_ = &prometheus::BuildGauge()
                      .Name("stormwatch_target_info")
                      .Help("1 per target process seen, with its versions and attach status.")
                      .Register(*registry_);
  attach_failures_ = &prometheus::BuildCounter()
                          .Name("stormwatch_target_attach_failures_total")
                          .Help("Targets that could not be attached, by target and reason.")
                          .Register(*registry_);
  target_planning_ = &prometheus::BuildHistogram()
                          .Name("stormwatch_target_planning_seconds")
                          .Help("Time to plan a target's probes from its binary (ELF, "
                                "pclntab, Go type data), on the planner thread, by target.")
                          .Register(*registry_);
  retry_after_ = &prometheus::BuildHistogram()
                      .Name("stormwatch_retry_after_seconds")
                      .Help("Retry-After of 429 responses, by priority level.")
                      .Register(*registry_);
  exempt_ = &prometheus::BuildCounter()
                 .Name(kExemptFamilyName)
                 .Help("Requests of clients exempt from API Priority and Fairness, by reason "
                       "(priority_level_exempt or system_masters; a client with both counts in "
                       "both).")
                 .Register(*registry_);
  build_info_ = &prometheus::BuildGauge()
                     .Name("stormwatch_build_info")
                     .Help("1, labelled with the agent's version, git commit, the libbpf it runs "
                           "with and the kernel release.")
                     .Register(*registry_);
  detector_tracked_ = &prometheus::BuildGauge()
                           .Name("stormwatch_detector_tracked_keys")
                           .Help("Keys (clients, resources, objects) a storm detector holds now.")
                           .Register(*registry_);
  detector_evictions_ = &prometheus::BuildCounter()
                             .Name("stormwatch_detector_evictions_total")
                             .Help("Keys a storm detector dropped to stay within its limits.")
                             .Register(*registry_);
  detector_refusals_ = &prometheus::BuildCounter()
                            .Name("stormwatch_detector_refusals_total")
                            .Help("New keys a storm detector's full table did not take in, seen no "
                                  "more often lately than the key they would have evicted: their "
                                  "requests went untracked.")
                            .Register(*registry_);
  alertmanager_ = &prometheus::BuildCounter()
                       .Name("stormwatch_alertmanager_notifications_total")
                       .Help("Alert notifications to Alertmanager, by result (sent, failed, "
                             "dropped).")
                       .Register(*registry_);
  watch_duration_ = &prometheus::BuildHistogram()
                         .Name("stormwatch_watch_duration_seconds")
                         .Help("How long WATCH requests stayed open, by resource.")
                         .Register(*registry_);
  client_series_ = &prometheus::BuildGauge()
                        .Name("stormwatch_client_series")
                        .Help("Distinct client label values with series in a metric family (at "
                              "most the client limit, plus other).")
                        .Register(*registry_);

  for (size_t f = 0; f < kClientFamilyCount; ++f) {
    client_series_gauges_[f] = &client_series_->Add({{"metric", kClientFamilyNames[f]}});
  }
  exempt_series_gauge_ = &client_series_->Add({{"metric", kExemptFamilyName}});
}

const std::string& PrometheusExporter::Key(std::initializer_list<std::string_view> values) {
  // Sized once, then copied into: one append per value costs twice as much per request.
  size_t size = 0;
  for (std::string_view v : values) size += v.size() + 1;
  key_.resize(size);
  char* at = key_.data();
  for (std::string_view v : values) {
    at = AppendShort(at, v);
    *at++ = '\x1f';
  }
  return key_;
}

template <typename MakeValues>
uint32_t PrometheusExporter::LabelSetId(ClientFamily family, const std::string& key,
                                        MakeValues make_values) {
  FamilyLabelSets& sets = family_label_sets_[family];
  auto [set, fresh] = sets.ids.try_emplace(key, static_cast<uint32_t>(sets.values.size()));
  if (fresh) sets.values.push_back(make_values());
  return set->second;
}

uint64_t& PrometheusExporter::ClientCount(ClientFamily family, ClientCounters& client,
                                          bool admitted, uint32_t set) {
  if (!admitted) ++folded_[family];
  // A client's first series in a family counts it in stormwatch_client_series.
  if (const auto bit = static_cast<uint16_t>(1u << family); !(client.families & bit)) {
    client.families |= bit;
    client_series_gauges_[family]->Set(static_cast<double>(++clients_per_family_[family]));
  }
  return client.counts[SeriesOf(family, set)];
}

template <typename MakeValues>
uint64_t& PrometheusExporter::ClientCount(ClientFamily family, const ClientName& client,
                                          bool admitted, const std::string& key,
                                          MakeValues make_values) {
  const uint32_t set = LabelSetId(family, key, make_values);
  return ClientCount(family, ClientEntry(client, admitted), admitted, set);
}

PrometheusExporter::ClientCounters& PrometheusExporter::ClientEntry(const ClientName& client,
                                                                    bool admitted) {
  const uint64_t key = admitted ? client.key : other_.key;
  // The previous call's client is most often this one's (a request counts in several families).
  if (last_client_ == nullptr || last_client_->first != key) {
    auto [it, fresh] = client_counters_.try_emplace(key);
    if (fresh) it->second.label = admitted ? client.label : other_.label;
    last_client_ = &*it;
  }
  return last_client_->second;
}

void PrometheusExporter::EndClientSeries(const std::string& client) {
  auto it = client_counters_.find(ClientName(client).key);
  if (it == client_counters_.end()) return;
  const ClientCounters& c = it->second;
  for (size_t f = 0; f < kClientFamilyCount; ++f) {
    if (c.families & (1u << f)) {
      client_series_gauges_[f]->Set(static_cast<double>(--clients_per_family_[f]));
    }
  }
  client_counters_.erase(it);
  last_client_ = nullptr;
}

void PrometheusExporter::Compact(int64_t now_ns) {
  std::lock_guard lock(mu_);
  for (const std::string& client : cap_.Compact(now_ns)) EndClientSeries(client);
  for (auto it = resolved_storms_.begin(); it != resolved_storms_.end();) {
    if (!it->second) {
      it->second = now_ns;
    } else if (now_ns - *it->second >= idle_ns_) {
      storm_active_->Remove(&storm_active_->Add(it->first));
      it = resolved_storms_.erase(it);
      continue;
    }
    ++it;
  }
  // Exempt clients idle for idle_s: their series end (client="other" stays, as elsewhere).
  for (auto it = exempt_series_.begin(); it != exempt_series_.end();) {
    if (now_ns - it->second.seen_ns < idle_ns_) {
      ++it;
      continue;
    }
    if (it->second.own) {
      exempt_->Remove(it->second.counter);
      if (--exempt_clients_[it->first.first] == 0) exempt_clients_.erase(it->first.first);
    }
    it = exempt_series_.erase(it);
  }
  UpdateExemptSeriesGauge();
}

PrometheusExporter::RequestLabelSet& PrometheusExporter::LabelSetOf(
    const RequestObservation& o) {
  const RequestLabels& l = o.labels;
  // The keyed hash of the labels (the APF pair among them: a label set finds all its series at
  // once), the resource pair's part usually hashed already: no key string is made per request.
  // Labels reaching here hold no \x1f (ResourceLabels folds what could not name an API).
  const uint64_t resource = o.resource_key ? o.resource_key : HashFields({l.group, l.resource});
  const uint64_t key = CombineKeys(resource, HashFields({l.verb, l.version, l.subresource, l.scope,
                                                         l.code, o.priority_level, o.flow_schema}));
  if (auto it = request_label_sets_.find(key); it != request_label_sets_.end()) return it->second;
  RequestLabelSet set;
  set.series = LabelSetId(
      kRequests, Key({l.verb, l.group, l.version, l.resource, l.subresource, l.scope, l.code}),
      [&] {
        return std::vector<std::string>{std::string(l.code),  std::string(l.group),
                                        std::string(l.resource), std::string(l.scope),
                                        std::string(l.subresource), std::string(l.verb),
                                        std::string(l.version)};
      });
  const std::string_view flow_schema = OrUnknown(o.flow_schema);
  const std::string_view priority_level = OrUnknown(o.priority_level);
  set.apf = LabelSetId(kApf, Key({flow_schema, priority_level}), [&] {
    return std::vector<std::string>{std::string(flow_schema), std::string(priority_level)};
  });
  return request_label_sets_.emplace(key, set).first->second;
}

void PrometheusExporter::CountRequest(const RequestObservation& o) {
  const RequestLabels& l = o.labels;
  std::lock_guard lock(mu_);
  const bool admitted = cap_.Admit(l.client, /*is_request=*/true);
  RequestLabelSet& set = LabelSetOf(o);
  ClientCounters& client = ClientEntry(l.client, admitted);
  ++ClientCount(kRequests, client, admitted, set.series);
  // A request that wrote no body makes no bytes series.
  if (o.response_bytes) ClientCount(kResponseBytes, client, admitted, set.series) += o.response_bytes;
  if (o.apf) ++ClientCount(kApf, client, admitted, set.apf);
  if (o.duration_s >= 0) {
    if (set.duration == kNoDuration) set.duration = DurationOf(l.verb, l.group, l.resource);
    DurationCounts& d = durations_[set.duration];
    // The first bucket whose bound is at least the duration (le: less or equal), else +Inf.
    ++d.buckets[std::lower_bound(std::begin(kDurationBuckets), std::end(kDurationBuckets),
                                 o.duration_s) -
                std::begin(kDurationBuckets)];
    ++d.count;
    d.sum += o.duration_s;
  }
}

void PrometheusExporter::CountList(const ClientName& client, std::string_view group,
                                   std::string_view resource, std::string_view scope,
                                   std::string_view consistency, bool paginated) {
  std::lock_guard lock(mu_);
  const std::string& key = Key({group, resource, scope, consistency, paginated ? "p" : "u"});
  bool admitted = cap_.Admit(client, /*is_request=*/false);
  ++ClientCount(kLists, client, admitted, key, [&] {
    return std::vector<std::string>{std::string(consistency), std::string(group), paginated ? "true" : "false",
              std::string(resource), std::string(scope)};
  });
}

void PrometheusExporter::CountThrottled(const ClientName& client, std::string_view priority_level,
                                        int retry_after_s) {
  // APF answers Retry-After in whole seconds, usually 1.
  static const prometheus::Histogram::BucketBoundaries kBuckets = {1, 2, 5, 10, 30, 60, 120, 300};
  std::lock_guard lock(mu_);
  bool admitted = cap_.Admit(client, /*is_request=*/false);
  ++ClientCount(kThrottled, client, admitted, Key({OrUnknown(priority_level)}),
                [&] { return std::vector<std::string>{std::string(OrUnknown(priority_level))}; });
  if (retry_after_s < 0) return;
  auto it = retry_after_cache_.find(absl::string_view(priority_level.data(), priority_level.size()));
  if (it == retry_after_cache_.end()) {
    it = retry_after_cache_
             .emplace(priority_level,
                      &retry_after_->Add({{"priority_level", std::string(OrUnknown(priority_level))}}, kBuckets))
             .first;
  }
  it->second->Observe(retry_after_s);
}

void PrometheusExporter::CountWatch(const ClientName& client, std::string_view group,
                                    std::string_view resource, double duration_s,
                                    bool send_initial_events) {
  // Watches end at the server's timeout (--min-request-timeout 1800 s by default, randomised)
  // or earlier; short ones hint at relist churn.
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      1, 5, 15, 30, 60, 120, 300, 600, 900, 1200, 1800};
  std::lock_guard lock(mu_);
  bool admitted = cap_.Admit(client, /*is_request=*/false);
  const char* initial = send_initial_events ? "true" : "false";
  ++ClientCount(kWatches, client, admitted, Key({group, resource, initial}), [&] {
    return std::vector<std::string>{std::string(group), std::string(resource), initial};
  });
  const std::string& resource_key = Key({group, resource});
  auto it = watch_duration_cache_.find(resource_key);
  if (it == watch_duration_cache_.end()) {
    it = watch_duration_cache_
             .emplace(resource_key,
                      &watch_duration_->Add({{"group", std::string(group)}, {"resource", std::string(resource)}},
                                            kBuckets))
             .first;
  }
  it->second->Observe(duration_s);
}

void PrometheusExporter::CountExemptClientRequests(const std::string& client,
                                                   const std::string& reason, uint64_t cumulative,
                                                   int64_t since_ns, int64_t seen_ns) {
  std::lock_guard lock(mu_);
  auto [it, fresh] = exempt_series_.try_emplace({client, reason});
  ExemptSeries& s = it->second;
  if (fresh) {
    if (exempt_clients_.contains(client) || exempt_clients_.size() < cap_.max_clients()) {
      ++exempt_clients_[client];
      s.counter = &exempt_->Add({{"client", client}, {"reason", reason}});
      s.own = true;
    } else {
      prometheus::Counter*& other = exempt_other_[reason];
      if (!other) other = &exempt_->Add({{"client", kOtherClient}, {"reason", reason}});
      s.counter = other;
    }
    UpdateExemptSeriesGauge();
  }
  // Another start: the detector dropped the client and counts from 0 again.
  bool restarted = since_ns != s.since_ns || cumulative < s.cumulative;
  uint64_t delta = restarted ? cumulative : cumulative - s.cumulative;
  if (delta) s.counter->Increment(static_cast<double>(delta));
  if (!s.own) folded_[kClientFamilyCount] += delta;
  s.cumulative = cumulative;
  s.since_ns = since_ns;
  s.seen_ns = std::max(s.seen_ns, seen_ns);
}

void PrometheusExporter::UpdateExemptSeriesGauge() {
  exempt_series_gauge_->Set(static_cast<double>(exempt_clients_.size() + !exempt_other_.empty()));
}

void PrometheusExporter::SetDetectorState(const std::string& storm, size_t tracked_keys,
                                          uint64_t evictions_cumulative,
                                          uint64_t refusals_cumulative) {
  detector_tracked_->Add({{"storm", storm}}).Set(static_cast<double>(tracked_keys));
  AddCumulative(*detector_evictions_, evictions_seen_, "storm", storm, evictions_cumulative);
  AddCumulative(*detector_refusals_, refusals_seen_, "storm", storm, refusals_cumulative);
}

void PrometheusExporter::SetAlertmanagerStats(uint64_t sent, uint64_t failed, uint64_t dropped) {
  AddCumulative(*alertmanager_, alertmanager_seen_, "result", "sent", sent);
  AddCumulative(*alertmanager_, alertmanager_seen_, "result", "failed", failed);
  AddCumulative(*alertmanager_, alertmanager_seen_, "result", "dropped", dropped);
}

void PrometheusExporter::CountEtcdRequest(std::string_view method, std::string_view resource,
                                          const ClientName& client, std::string_view code) {
  std::lock_guard lock(mu_);
  const std::string& key = Key({method, resource, code});
  bool admitted = cap_.Admit(client, /*is_request=*/false);
  ++ClientCount(kEtcdRequests, client, admitted, key, [&] {
    return std::vector<std::string>{std::string(code), std::string(method), std::string(resource)};
  });
}

void PrometheusExporter::CountEtcdStreamMessage(std::string_view method, std::string_view message,
                                                std::string_view resource, const ClientName& client) {
  std::lock_guard lock(mu_);
  const std::string& key = Key({method, message, resource});
  bool admitted = cap_.Admit(client, /*is_request=*/false);
  ++ClientCount(kEtcdStreamMessages, client, admitted, key, [&] {
    return std::vector<std::string>{std::string(message), std::string(method), std::string(resource)};
  });
}

void PrometheusExporter::CountEtcdRange(std::string_view resource, const ClientName& client,
                                        uint64_t keys, uint64_t bytes) {
  std::lock_guard lock(mu_);
  bool admitted = cap_.Admit(client, /*is_request=*/false);
  auto values = [&] { return std::vector<std::string>{std::string(resource)}; };
  const std::string& key = Key({resource});
  ClientCount(kEtcdRangeKeys, client, admitted, key, values) += keys;
  ClientCount(kEtcdRangeBytes, client, admitted, key, values) += bytes;
}

prometheus::Counter& PrometheusExporter::ResponseBodyCounter(std::string_view encoding,
                                                            std::string_view result) {
  std::lock_guard lock(mu_);
  // Both come from fixed vocabularies (BodyEncodingName, BodyFactsResultName): 12 series at most.
  auto key = std::make_pair(std::string(encoding), std::string(result));
  auto it = response_body_counters_.find(key);
  if (it == response_body_counters_.end()) {
    it = response_body_counters_
             .emplace(key, &response_bodies_->Add({{"encoding", key.first}, {"result", key.second}}))
             .first;
  }
  return *it->second;
}

void PrometheusExporter::SetIdentityCache(uint64_t connection_hits, uint64_t hits, uint64_t misses) {
  AddCumulative(*identity_cache_, identity_cache_seen_, "result", "connection", connection_hits);
  AddCumulative(*identity_cache_, identity_cache_seen_, "result", "hit", hits);
  AddCumulative(*identity_cache_, identity_cache_seen_, "result", "miss", misses);
}

void PrometheusExporter::SetEtcdLinks(uint64_t lists, uint64_t matched) {
  AddCumulative(*etcd_links_, etcd_links_seen_, "result", "matched", matched);
  AddCumulative(*etcd_links_, etcd_links_seen_, "result", "unmatched", lists - matched);
}

void PrometheusExporter::ObserveEtcdDuration(std::string_view method, std::string_view resource,
                                             double seconds) {
  // etcd's own grpc_server_handling_seconds buckets (go-grpc-prometheus's defaults).
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  std::lock_guard lock(mu_);
  const std::string& key = Key({method, resource});
  auto it = etcd_duration_cache_.find(key);
  if (it == etcd_duration_cache_.end()) {
    it = etcd_duration_cache_
             .emplace(key, &etcd_duration_->Add({{"method", std::string(method)},
                                                 {"resource", std::string(resource)}},
                                                kBuckets))
             .first;
  }
  it->second->Observe(seconds);
}

uint32_t PrometheusExporter::DurationOf(std::string_view verb, std::string_view group,
                                        std::string_view resource) {
  auto [it, fresh] = duration_ids_.try_emplace(Key({verb, group, resource}),
                                               static_cast<uint32_t>(durations_.size()));
  if (fresh) {
    durations_.push_back({{std::string(group), std::string(resource), std::string(verb)},
                          std::vector<uint64_t>(std::size(kDurationBuckets) + 1),
                          0,
                          0});
  }
  return it->second;
}

void PrometheusExporter::SetStormActive(const std::map<std::string, std::string>& labels,
                                        bool active) {
  std::lock_guard lock(mu_);
  storm_active_->Add(labels).Set(active ? 1 : 0);
  // A resolved storm keeps its 0 for idle_s (dashboards see it end), then its series ends.
  if (active) {
    resolved_storms_.erase(labels);
  } else {
    resolved_storms_[labels] = std::nullopt;
  }
}

void PrometheusExporter::CountStormStarted(const std::string& storm) {
  storms_total_->Add({{"storm", storm}}).Increment();
}

void PrometheusExporter::AddCumulative(prometheus::Family<prometheus::Counter>& family,
                                       std::map<std::string, uint64_t>& seen,
                                       const std::string& label_name,
                                       const std::string& label_value, uint64_t cumulative) {
  std::lock_guard lock(mu_);
  auto& counter = family.Add({{label_name, label_value}});
  uint64_t& last = seen[label_value];
  if (cumulative > last) counter.Increment(static_cast<double>(cumulative - last));
  last = cumulative;
}

void PrometheusExporter::SetCaptureLoss(const std::string& cause, uint64_t cumulative) {
  AddCumulative(*capture_loss_, loss_seen_, "cause", cause, cumulative);
}

void PrometheusExporter::SetProbeHits(const std::string& probe, uint64_t cumulative) {
  AddCumulative(*probe_hits_, hits_seen_, "probe", probe, cumulative);
}

void PrometheusExporter::SetTargetsAttached(size_t n) {
  targets_attached_->Set(static_cast<double>(n));
}

void PrometheusExporter::SetTargetInfo(const std::map<std::string, std::string>& labels,
                                       bool present) {
  if (present) {
    target_info_->Add(labels).Set(1);
  } else if (target_info_->Has(labels)) {
    target_info_->Remove(&target_info_->Add(labels));
  }
}

void PrometheusExporter::CountAttachFailure(const std::string& target, const std::string& reason) {
  attach_failures_->Add({{"target", target}, {"reason", reason}}).Increment();
}

void PrometheusExporter::ObserveTargetPlanning(const std::string& target, double seconds) {
  // The 78 MB apiextensions-apiserver plans in 0.1-0.2 s here; a busy or slow node, longer.
  static const prometheus::Histogram::BucketBoundaries kBuckets = {0.05, 0.1, 0.25, 0.5, 1,
                                                                   2.5, 5, 10, 30};
  target_planning_->Add({{"target", target}}, kBuckets).Observe(seconds);
}

}  // namespace stormwatch
