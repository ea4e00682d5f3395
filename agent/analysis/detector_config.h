// Thresholds of every detector, with STORMS.md's defaults. Each is a config value (YAML file
// and flags, agent/config); tests pin behaviour on both sides of each.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "agent/analysis/update_loop_detector.h"

namespace stormwatch {

// STORMS.md §2. Per (identity, group, resource), LIST and WATCH-less reads only.
struct ListStormConfig {
  bool enabled = true;
  double list_rate = 5.0;              // weighted LISTs/s ...
  int sustain_s = 15;                  // ... for this many consecutive seconds
  double bytes_rate = 5.0 * 1024 * 1024;  // or weighted response bytes/s, same sustain
  // Consistent (no resourceVersion) and unpaginated (no limit) cluster-scope LISTs count this
  // many times each (STORMS.md: "count double").
  double expensive_weight = 2.0;
  int resolve_s = 30;
  size_t max_keys = 4096;
  AllowList allow;
};

// STORMS.md §3. Non-system identities served at the exempt priority level or carrying
// O=system:masters. Reported (gauge) while active; escalated (a storm) under load.
struct ExemptClientConfig {
  bool enabled = true;
  int active_window_s = 60;       // reported while seen within this window
  double escalate_rate = 20.0;    // requests/s sustained ...
  int escalate_sustain_s = 10;    // ... this long makes it a storm (severity critical)
  int resolve_s = 30;
  size_t max_clients = 1024;
  // Identities that are exempt by design and never reported.
  AllowList allow{{"system:apiserver", "system:kube-controller-manager", "system:kube-scheduler",
                   "system:serviceaccount:kube-system:*", "system:node:*"}};
};

// STORMS.md §4, 409s. Per (identity, group, resource), writes only.
struct ConflictStormConfig {
  bool enabled = true;
  double conflict_ratio = 0.20;  // conflicts / writes ...
  double conflict_rate = 5.0;    // ... and conflicts/s, both averaged over ...
  int sustain_s = 30;
  // ... with 409s in at least this fraction of those seconds (a burst is not a storm).
  double min_conflict_seconds = 0.8;
  int resolve_s = 30;
  double flat_tolerance = 0.10;  // write rate flat at a client-go QPS (see ThrottledClientConfig)
  size_t max_keys = 4096;
  size_t max_objects = 10'000;   // for "objects most contended"
  AllowList allow;
};

// STORMS.md §4, 429s. Per identity.
struct ThrottledClientConfig {
  bool enabled = true;
  double throttled_rate = 1.0;  // 429s/s ...
  int sustain_s = 10;           // ... sustained this long
  int resolve_s = 30;
  // A rate that sits flat at a client-go limit (QPS 5, 20, 50: within this fraction for the
  // whole window) while errors are high is reported as client-side throttling in the evidence.
  double flat_tolerance = 0.10;
  size_t max_clients = 4096;
  AllowList allow;
};

// STORMS.md §5.
struct StuckFinalizersConfig {
  bool enabled = true;
  int stuck_after_s = 300;   // marked for deletion and no write removing the finalizer since
  int min_stuck_objects = 1; // objects stuck before the resource is reported
  // A writer that wrote the resource steadily (>= this many writes in the lookback) and then
  // nothing for silent_after_s while deletes keep arriving is named as the silent controller.
  int writer_lookback_s = 600;
  int silent_after_s = 60;
  int steady_writer_writes = 5;  // "steadily": at least this many writes in writer_lookback_s
  int resolve_s = 60;            // no object stuck for this long
  size_t max_objects = 100'000;  // terminating objects, and objects' last writers, each
  size_t writers_per_resource = 16;     // its top writers by count (Space-Saving)
  size_t max_writing_clients = 16'384;  // clients whose identity is kept (packed) to name them
  size_t max_resources = 1024;
  AllowList allow;
};

// STORMS.md §6. Per (identity, group, resource).
struct RelistChurnConfig {
  bool enabled = true;
  int window_s = 60;             // counted over this window ...
  int min_relists = 6;           // ... LIST+WATCH pairs (a full LIST followed by a WATCH)
  double watch_rate = 0.5;       // or new WATCHes/s over the window
  int resolve_s = 60;
  size_t max_keys = 4096;
  AllowList allow;
};

// STORMS.md §7. etcd's side: per gRPC method, with the apiserver LISTs of the same seconds.
struct EtcdRangeStormConfig {
  bool enabled = true;
  double range_rate = 500.0;                  // Range calls/s ...
  double bytes_rate = 50.0 * 1024 * 1024;     // or response bytes/s ...
  int sustain_s = 10;                         // ... sustained this long
  int resolve_s = 30;
  size_t max_keys = 1024;          // key prefixes (resources) tracked on etcd's side
  size_t max_list_clients = 4096;  // (apiserver client, resource) keys of consistent LISTs
  AllowList allow;                 // etcd clients and apiserver LIST clients ignored
};

struct DetectorsConfig {
  UpdateLoopConfig update_loop;
  AllowList update_loop_allow;
  ListStormConfig list_storm;
  ExemptClientConfig exempt_client;
  ConflictStormConfig conflict_storm;
  ThrottledClientConfig throttled_client;
  StuckFinalizersConfig stuck_finalizers;
  RelistChurnConfig relist_churn;
  EtcdRangeStormConfig etcd_range_storm;
};

}  // namespace stormwatch
