// Relist churn detector on an injected clock: WATCHes arrive when they end and count when they
// began; both sides of the relist and watch-rate thresholds, hysteresis, evidence, healthy
// informers (long watches, many namespaced or per-object informers) that must stay quiet,
// allow list and bounded state.
#include "agent/analysis/relist_churn_detector.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/unit/detector_sim.h"

namespace stormwatch {
namespace {

using sim::Append;
using sim::Event;
using sim::kMs;
using sim::kSec;
using sim::Request;

Identity Operator(const std::string& pod = "cart-operator-6d8f7-q2w3e") {
  Identity id;
  id.kind = Identity::Kind::kServiceAccount;
  id.user = "system:serviceaccount:shop:cart-operator";
  id.sa_namespace = "shop";
  id.sa_name = "cart-operator";
  id.pod_name = pod;
  id.user_agent = "cart-operator/v0.3.1 (linux/amd64)";
  id.component = "cart-operator";
  return id;
}

const std::string kCarts = "/apis/shop.example.com/v1/carts";
const std::string kListQuery = "?limit=500&resourceVersion=0";
const std::string kWatchQuery =
    "?allowWatchBookmarks=true&resourceVersion=1234&timeoutSeconds=417&watch=true";

// A request that began at `start_ns` and took `duration_ns`: it arrives when it ends.
Event At(const Identity& who, const std::string& path, int64_t start_ns, int64_t duration_ns,
         int status = 200) {
  RequestRecord r = Request(who, "GET", path, status);
  r.start_ns = static_cast<uint64_t>(start_ns);
  r.end_ns = static_cast<uint64_t>(start_ns + duration_ns);
  return {start_ns + duration_ns, r};
}

// An informer that relists every `period_ns`: LIST (50 ms), then a WATCH from 100 ms later
// that ends after `watch_ns` with `status`. Cycles start at `start_ns`.
std::vector<Event> Cycles(const Identity& who, int cycles, int64_t period_ns, int64_t watch_ns,
                          int status = 410, int64_t start_ns = 0,
                          const std::string& path = kCarts) {
  std::vector<Event> out;
  for (int k = 0; k < cycles; ++k) {
    const int64_t t = start_ns + k * period_ns;
    out.push_back(At(who, path + kListQuery, t, 50 * kMs));
    out.push_back(At(who, path + kWatchQuery, t + 100 * kMs, watch_ns, status));
  }
  return out;
}

using Harness = sim::Harness<RelistChurnDetector>;

// --- relists: >= 6 re-LIST+WATCH pairs in 60 s ---

TEST(RelistChurnTest, SixRelistsFireOnce) {
  // A LIST+WATCH every 5 s, each watch ending after 2 s: relist k begins at 5k s.
  Harness run;
  run.sim.Run(Cycles(Operator(), 12, 5 * kSec, 2 * kSec), 200 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  // The 6th relist's WATCH began at 30.1 s and arrives at 32.1 s.
  EXPECT_EQ(firing[0].at_ns, 33 * kSec);
  const StormEvidence& ev = firing[0].evidence;
  EXPECT_EQ(ev.storm, "relist_churn");
  EXPECT_EQ(ev.identity.user, "system:serviceaccount:shop:cart-operator");
  EXPECT_EQ(ev.identity.pod_name, "cart-operator-6d8f7-q2w3e");
  EXPECT_EQ(ev.api_group, "shop.example.com");
  EXPECT_EQ(ev.resource, "carts");
  EXPECT_EQ(ev.since_ns, 0);
  EXPECT_EQ(ev.fired_ns, 33 * kSec);
  EXPECT_EQ(ev.details["rule"], "relists");
  EXPECT_EQ(ev.details["relists_in_window"], 6);
  EXPECT_EQ(run.sim.Of(StormState::kResolved).size(), 1u);
}

TEST(RelistChurnTest, FiveRelistsStayQuiet) {
  Harness run;
  run.sim.Run(Cycles(Operator(), 6, 5 * kSec, 2 * kSec), 200 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
  EXPECT_EQ(run.det.Stats().observed, 12u);
}

TEST(RelistChurnTest, RelistsSpreadOverMoreThanTheWindowStayQuiet) {
  // Six relists, but 12.5 s apart: at most 5 in any 60 s.
  Harness run;
  run.sim.Run(Cycles(Operator(), 7, 12'500 * kMs, 2 * kSec), 300 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
}

TEST(RelistChurnTest, WatchListRequestsAreRelistsToo) {
  // A streaming LIST (WATCH with sendInitialEvents) every 5 s, each ending after 1 s.
  const std::string path = kCarts +
                           "?allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&"
                           "sendInitialEvents=true&watch=true";
  std::vector<Event> events;
  for (int k = 0; k < 12; ++k) events.push_back(At(Operator(), path, k * 5 * kSec, kSec, 200));
  Harness run;
  run.sim.Run(std::move(events), 200 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].at_ns, 32 * kSec);  // 6th relist began at 30 s, arrived at 31 s
  EXPECT_EQ(firing[0].evidence.details["full_lists_in_window"], 0);
  EXPECT_FALSE(firing[0].evidence.details.contains("list_shape"));
}

TEST(RelistChurnTest, WatchStartedBeforeTheListIsNoPair) {
  RelistChurnConfig config;
  config.min_relists = 1;
  auto scenario = [&](int64_t second_watch_start) {
    std::vector<Event> events;
    events.push_back(At(Operator(), kCarts + kListQuery, 0, 50 * kMs));
    events.push_back(At(Operator(), kCarts + kWatchQuery, 100 * kMs, 900 * kMs));
    events.push_back(At(Operator(), kCarts + kListQuery, 2 * kSec, 50 * kMs));
    events.push_back(At(Operator(), kCarts + kWatchQuery, second_watch_start,
                        3 * kSec - second_watch_start));
    Harness run(config);
    run.sim.Run(std::move(events), 10 * kSec);
    return run.sim.Of(StormState::kFiring).size();
  };
  EXPECT_EQ(scenario(1'500 * kMs), 0u);  // began before the second LIST: not its WATCH
  EXPECT_EQ(scenario(2'100 * kMs), 1u);
}

// --- watch rate: new WATCHes/s over 60 s >= 0.5 ---

TEST(RelistChurnTest, WatchRateBothSides) {
  // Re-WATCH loops without LISTs, each watch closed after 1 s.
  auto rewatches = [](int64_t period_ns) {
    std::vector<Event> events;
    for (int64_t t = 100 * kMs; t < 120 * kSec; t += period_ns) {
      events.push_back(At(Operator(), kCarts + kWatchQuery, t, kSec));
    }
    return events;
  };
  Harness at;
  at.sim.Run(rewatches(2 * kSec), 200 * kSec);  // 30 per 60 s
  auto firing = at.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  // Window [0, 59] holds the 30 watches begun at 0.1, 2.1, ... 58.1 s (the last one arrives
  // at 59.1 s).
  EXPECT_EQ(firing[0].at_ns, 60 * kSec);
  EXPECT_EQ(firing[0].evidence.details["rule"], "watch_rate");
  EXPECT_EQ(firing[0].evidence.details["watches_per_second"], 0.5);
  EXPECT_EQ(firing[0].evidence.details["relists_in_window"], 0);

  Harness below;
  below.sim.Run(rewatches(2'500 * kMs), 200 * kSec);  // 24 per 60 s
  EXPECT_TRUE(below.sim.transitions().empty());
}

// --- lifecycle ---

TEST(RelistChurnTest, ResolvesAfterResolveWindowAndNotBefore) {
  // Relists at 5, 10, ..., 100 s. The window ending at 134 s still holds 75..100 (6); from
  // 135 s on windows hold 5 at most: 60 calm seconds 135..194.
  Harness run;
  run.sim.Run(Cycles(Operator(), 21, 5 * kSec, 2 * kSec), 300 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  auto resolved = run.sim.Of(StormState::kResolved);
  ASSERT_EQ(firing.size(), 1u);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(firing[0].at_ns, 33 * kSec);
  EXPECT_EQ(resolved[0].at_ns, 195 * kSec);
  EXPECT_EQ(run.sim.ActiveAt(194), 1u);
  EXPECT_EQ(run.sim.ActiveAt(195), 0u);
  EXPECT_EQ(resolved[0].evidence.details, firing[0].evidence.details);
  EXPECT_TRUE(run.det.Active().empty());
}

// --- evidence ---

TEST(RelistChurnTest, EvidenceOfTheWindow) {
  // A LIST of three pages every 8 s; watch k lasts k+1 s and ends with 410 (even k) or 200.
  std::vector<Event> events;
  for (int k = 0; k < 8; ++k) {
    const int64_t t = k * 8 * kSec;
    events.push_back(At(Operator(), kCarts + "?limit=500", t, 50 * kMs));
    for (int page = 1; page < 3; ++page) {
      events.push_back(At(Operator(), kCarts + "?limit=500&continue=c" + std::to_string(page),
                          t + page * 60 * kMs, 50 * kMs));
    }
    events.push_back(
        At(Operator(), kCarts + kWatchQuery, t + 200 * kMs, (k + 1) * kSec, k % 2 ? 200 : 410));
  }
  Harness run;
  run.sim.Run(std::move(events), 70 * kSec);

  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].at_ns, 56 * kSec);  // relist 6 began at 48.2 s and lasted 7 s
  const nlohmann::json want = {
      {"rule", "relists"},
      {"window_s", 60},
      {"relists_in_window", 6},
      {"full_lists_in_window", 7},  // continue pages are not full LISTs
      {"watches_in_window", 7},
      {"watches_per_second", 0.12},
      {"median_watch_seconds", 4.0},
      {"watch_samples", 7},
      {"watch_codes", {{"200", 3}, {"410", 4}}},
      {"user_agent", "cart-operator/v0.3.1 (linux/amd64)"},
      {"component", "cart-operator"},
      {"list_shape",
       {{"consistency", "consistent"},
        {"paginated", true},
        {"limit", 500},
        {"label_selector", false},
        {"field_selector", false}}},
  };
  EXPECT_EQ(firing[0].evidence.details, want) << firing[0].evidence.details.dump(2);
  EXPECT_EQ(firing[0].evidence.summary,
            "client system:serviceaccount:shop:cart-operator (pod cart-operator-6d8f7-q2w3e) "
            "keeps relisting carts.shop.example.com: 6 relists and 7 watches in 60 s "
            "(0.12 watches/s), median watch 4.0 s");
  EXPECT_NE(firing[0].evidence.fix.find("410"), std::string::npos);
  EXPECT_NE(firing[0].evidence.fix.find("informer"), std::string::npos);

  // At 70 s the window [10, 69] holds watches 2..7 (3..8 s long): an even count.
  auto active = run.det.Active();
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].details["median_watch_seconds"], 5.5);
  EXPECT_EQ(active[0].details["watch_codes"], (nlohmann::json{{"200", 3}, {"410", 3}}));
  EXPECT_EQ(active[0].details["relists_in_window"], 6);
  EXPECT_EQ(active[0].fired_ns, 56 * kSec);
}

TEST(RelistChurnTest, NamespaceAndSelectorsOfTheChurningInformer) {
  const std::string path = "/api/v1/namespaces/shop/pods";
  std::vector<Event> events;
  for (int k = 0; k < 8; ++k) {
    const int64_t t = k * 5 * kSec;
    events.push_back(At(Operator(), path + "?labelSelector=app%3Dcart&limit=500", t, 50 * kMs));
    events.push_back(At(Operator(), path + "?labelSelector=app%3Dcart&watch=true",
                        t + 100 * kMs, kSec, 410));
  }
  Harness run;
  run.sim.Run(std::move(events), 60 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].evidence.namespace_, "shop");
  EXPECT_EQ(firing[0].evidence.resource, "pods");
  EXPECT_EQ(firing[0].evidence.details["label_selector"], "app=cart");
  EXPECT_EQ(firing[0].evidence.details["list_shape"]["label_selector"], true);
  EXPECT_FALSE(firing[0].evidence.details.contains("field_selector"));
}

// --- healthy informers stay quiet ---

// One informer: LIST, then back-to-back WATCHes of 5 to 10 minutes until `until_ns`; the
// watch ending at or after `gone_at_ns` ends with 410 and is followed by one relist.
std::vector<Event> LongWatchInformer(const Identity& who, const std::string& path,
                                     int64_t start_ns, int64_t until_ns, int64_t gone_at_ns) {
  static const int64_t kDurations[] = {300, 450, 600, 330, 510, 420};
  std::vector<Event> out;
  out.push_back(At(who, path + kListQuery, start_ns, 50 * kMs));
  int64_t t = start_ns + 100 * kMs;
  bool relisted = false;
  for (int i = 0; t < until_ns; ++i) {
    const int64_t d = kDurations[i % 6] * kSec;
    const bool gone = !relisted && t + d >= gone_at_ns;
    out.push_back(At(who, path + kWatchQuery, t, d, gone ? 410 : 200));
    t += d + 10 * kMs;
    if (gone) {
      relisted = true;
      out.push_back(At(who, path + kListQuery, t, 50 * kMs));
      t += 100 * kMs;
    }
  }
  return out;
}

TEST(RelistChurnTest, InformerWithLongWatchesRelistingOnceIsQuiet) {
  Harness run;
  run.sim.Run(LongWatchInformer(Operator(), kCarts, 0, 3600 * kSec, 1000 * kSec), 3600 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
  EXPECT_GT(run.det.Stats().observed, 8u);
}

TEST(RelistChurnTest, ControllerStartingManyNamespacedInformersIsQuiet) {
  // 100 namespaced informers listed and watched within 1 s: first LISTs are no relists.
  std::vector<Event> events;
  for (int ns = 0; ns < 100; ++ns) {
    sim::Append(events, LongWatchInformer(Operator(), "/api/v1/namespaces/ns-" +
                                                          std::to_string(ns) + "/configmaps",
                                          ns * 10 * kMs, 1800 * kSec, 4000 * kSec));
  }
  Harness run;
  run.sim.Run(std::move(events), 1800 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
}

TEST(RelistChurnTest, KubeletPerObjectReflectorsAreQuiet) {
  // A kubelet starting 50 pods in 20 s, each mounting 2 secrets: one reflector per secret
  // (fieldSelector=metadata.name=...), each a LIST and WATCHes of 5 to 10 minutes.
  Identity kubelet;
  kubelet.kind = Identity::Kind::kUser;
  kubelet.user = "system:node:node-1";
  kubelet.user_agent = "kubelet/v1.28.7 (linux/amd64) kubernetes/c8dcb00";
  std::vector<Event> events;
  for (int s = 0; s < 100; ++s) {
    const std::string secret = "/api/v1/namespaces/team-" + std::to_string(s % 5) +
                               "/secrets?fieldSelector=metadata.name%3Dsecret-" +
                               std::to_string(s) + "&";
    std::vector<Event> informer;
    informer.push_back(At(kubelet, secret + "limit=500&resourceVersion=0", s * 200 * kMs,
                          20 * kMs));
    int64_t t = s * 200 * kMs + 30 * kMs;
    for (int i = 0; t < 1800 * kSec; ++i) {
      const int64_t d = (300 + (s * 7 + i * 61) % 300) * kSec;
      informer.push_back(At(kubelet, secret + "watch=true&resourceVersion=99", t, d));
      t += d + 10 * kMs;
    }
    sim::Append(events, std::move(informer));
  }
  Harness run;
  run.sim.Run(std::move(events), 1800 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
}

// --- identities ---

TEST(RelistChurnTest, PodsOfOneServiceAccountAreSeparate) {
  // Two replicas relisting 4 times each in the same minute: 8 relists, but 4 per client.
  std::vector<Event> events = Cycles(Operator("op-1"), 5, 5 * kSec, 2 * kSec);
  sim::Append(events, Cycles(Operator("op-2"), 5, 5 * kSec, 2 * kSec, 410, 2 * kSec));
  Harness run;
  run.sim.Run(std::move(events), 200 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
}

TEST(RelistChurnTest, AllowListedIdentityIsIgnored) {
  RelistChurnConfig config;
  config.allow.users = {"system:serviceaccount:shop:*"};
  Harness run(config);
  run.sim.Run(Cycles(Operator(), 30, 2 * kSec, kSec), 200 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
  EXPECT_EQ(run.det.Stats().observed, 0u);
  EXPECT_EQ(run.det.Stats().tracked, 0u);
}

TEST(RelistChurnTest, OtherVerbsAreIgnored) {
  std::vector<Event> events;
  for (int k = 0; k < 100; ++k) {
    RequestRecord get = Request(Operator(), "GET", kCarts.substr(0, kCarts.size() - 5) +
                                                       "namespaces/shop/carts/c-1");
    RequestRecord put = get;
    put.method = "PUT";
    put.info.verb = "update";
    put.info.verb_kind = KubeVerb::kUpdate;
    events.push_back({k * 100 * kMs, get});
    events.push_back({k * 100 * kMs + 1, put});
  }
  Harness run;
  run.sim.Run(std::move(events), 20 * kSec);
  EXPECT_TRUE(run.sim.transitions().empty());
  EXPECT_EQ(run.det.Stats().observed, 0u);
}

// --- configuration and bounded state ---

TEST(RelistChurnTest, ThresholdsAreConfig) {
  RelistChurnConfig config;
  config.window_s = 10;
  config.min_relists = 2;
  config.resolve_s = 5;
  Harness run(config);
  // Relists begin at 3 and 6 s (arriving 1 s later); the window ending at 12 s holds both,
  // the one ending at 13 s only the second: calm 13..17.
  run.sim.Run(Cycles(Operator(), 3, 3 * kSec, kSec), 60 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  auto resolved = run.sim.Of(StormState::kResolved);
  ASSERT_EQ(firing.size(), 1u);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(firing[0].at_ns, 8 * kSec);
  EXPECT_EQ(resolved[0].at_ns, 18 * kSec);
}

TEST(RelistChurnTest, BadConfigIsClamped) {
  RelistChurnConfig bad;
  bad.window_s = 0;
  bad.min_relists = 0;
  bad.watch_rate = -1;
  bad.resolve_s = 0;
  bad.max_keys = 0;
  RelistChurnDetector det(bad);
  EXPECT_EQ(det.config().window_s, 1);
  EXPECT_EQ(det.config().min_relists, 1);
  EXPECT_EQ(det.config().watch_rate, 0.5);
  EXPECT_EQ(det.config().resolve_s, 1);
  EXPECT_EQ(det.config().max_keys, 1u);
}

TEST(RelistChurnTest, EvictionKeepsKeysAndInformersBounded) {
  RelistChurnConfig config;
  config.max_keys = 1000;
  RelistChurnDetector det(config);
  for (int64_t i = 0; i < 100'000; ++i) {
    Identity who;
    who.user = "token:" + std::to_string(i);
    const int64_t t = i * kSec / 1000;
    det.Observe(At(who, kCarts + kListQuery, t, 0).r, t);
    if (i % 1000 == 999) det.Evaluate(t + 1);
    ASSERT_LE(det.Stats().tracked, 2000u);  // 1000 (client, resource) keys + 1000 informers
  }
  DetectorStats stats = det.Stats();
  EXPECT_EQ(stats.tracked, 2000u);
  // Alike newcomers, seen once each: most refused (see ListStormTest.EvictionKeepsKeysBounded).
  // Each newcomer past the first 1,000 evicted or was refused a (client, resource) key; only
  // those admitted went on to the informers' table, to evict or be refused there too.
  EXPECT_GE(stats.evictions + stats.refusals, 99'000u);
  EXPECT_LT(stats.evictions + stats.refusals, 99'000u + 99'000u / 4);
  EXPECT_GT(stats.refusals, 3 * stats.evictions) << stats.evictions;
  EXPECT_EQ(stats.observed, 100'000u);
}

TEST(RelistChurnTest, ReusedEntryShowsOnlyItsOwnWatches) {
  // One key fits: client b's entry is client a's, reused. a's watches (status 500) began within
  // the window b's alert reads; none of them may show in b's evidence.
  RelistChurnConfig config;
  config.max_keys = 1;
  std::vector<Event> events = Cycles(Operator("a"), 4, 4 * kSec, 1 * kSec, 500);
  for (Event& e : Cycles(Operator("b"), 8, 5 * kSec, 2 * kSec, 410, 20 * kSec)) {
    events.push_back(std::move(e));
  }
  Harness run(config);
  run.sim.Run(std::move(events), 70 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].evidence.identity.pod_name, "b");
  const nlohmann::json& d = firing[0].evidence.details;
  EXPECT_EQ(d["watch_codes"], (nlohmann::json{{"410", 7}})) << d.dump(2);
  EXPECT_EQ(d["watch_samples"], 7);
  EXPECT_EQ(d["watches_in_window"], 7);
  EXPECT_EQ(d["median_watch_seconds"], 2.0);
}

TEST(RelistChurnTest, AChurningInformerGetsInAmongManyAlikeClients) {
  // Tables of 20 keys, 100 quiet operator pods each starting one informer (a LIST and a WATCH
  // that lasts): the tables are full and refuse most newcomers. A pod relisting every 5 s from
  // 30 s is seen more often than any key held within a few cycles: it gets in and fires.
  RelistChurnConfig config;
  config.max_keys = 20;
  std::vector<Event> events;
  for (int i = 0; i < 100; ++i) {
    Append(events, Cycles(Operator("quiet-" + std::to_string(i)), 1, 0, 150 * kSec, 200, i * 100 * kMs));
  }
  Append(events, Cycles(Operator("churning"), 20, 5 * kSec, 2 * kSec, 410, 30 * kSec));
  Harness run(config);
  run.sim.Run(std::move(events), 200 * kSec);
  auto firing = run.sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].evidence.identity.pod_name, "churning");
  const DetectorStats stats = run.det.Stats();
  EXPECT_GT(stats.refusals, 100u) << stats.evictions;  // of 180 quiet requests past the first 20 keys
  EXPECT_EQ(stats.tracked, 40u);
}

TEST(RelistChurnTest, EvictedFiringStormResolvesOnce) {
  RelistChurnConfig config;
  config.max_keys = 2;
  std::vector<Event> events = Cycles(Operator(), 8, 5 * kSec, 2 * kSec);
  events.push_back(At(Operator("other-1"), kCarts + kListQuery, 50 * kSec, 0));
  events.push_back(At(Operator("other-2"), kCarts + kListQuery, 50 * kSec + 1, 0));
  // The firing key, touched, got a second chance at the first eviction: a third newcomer takes
  // its place.
  events.push_back(At(Operator("other-3"), kCarts + kListQuery, 50 * kSec + 2, 0));
  Harness run(config);
  run.sim.Run(std::move(events), 300 * kSec);
  auto resolved = run.sim.Of(StormState::kResolved);
  ASSERT_EQ(run.sim.Of(StormState::kFiring).size(), 1u);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].at_ns, 50 * kSec + 2);
  EXPECT_EQ(resolved[0].evidence.identity.pod_name, "cart-operator-6d8f7-q2w3e");
}

}  // namespace
}  // namespace stormwatch
