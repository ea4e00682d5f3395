// Stuck-finalizers detector on an injected clock: the starved-controller incident, both sides
// of stuck_after_s and min_stuck_objects, every way an object stops terminating, who is named,
// allow-list and bounds.
#include "agent/analysis/stuck_finalizers_detector.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/unit/allocation_count.h"
#include "tests/unit/detector_sim.h"

namespace stormwatch {
namespace {

using sim::Append;
using sim::DetectorSim;
using sim::Event;
using sim::Every;
using sim::kSec;
using sim::Sa;

const Identity kController = Sa("db-system", "db-operator", "db-operator-7c9-abcde");
const Identity kAlice = sim::User("alice@example.com");
const std::vector<std::string> kCleanup = {"databases.example.com/cleanup"};

std::string ObjectPath(const std::string& name) {
  return "/apis/example.com/v1/namespaces/team-a/databases/" + name;
}

// A DELETE answered with the object still there, marked, and holding `finalizers`.
RequestRecord Delete(const Identity& who, const std::string& name,
                     const std::vector<std::string>& finalizers = kCleanup) {
  RequestRecord r = sim::Request(who, "DELETE", ObjectPath(name), 200);
  r.response.object_seen = true;
  r.response.deletion_timestamp = true;
  r.response.finalizers_seen = true;
  r.response.finalizers = finalizers;
  return r;
}

// A DELETE answered with a Status: the object is gone.
RequestRecord DeleteGone(const Identity& who, const std::string& name) {
  return sim::Request(who, "DELETE", ObjectPath(name), 200);
}

// A PUT whose response shows `finalizers` left (on an object marked for deletion or not).
RequestRecord Write(const Identity& who, const std::string& name,
                    const std::vector<std::string>& finalizers, bool marked = true) {
  RequestRecord r = sim::Request(who, "PUT", ObjectPath(name), 200);
  r.response.object_seen = true;
  r.response.deletion_timestamp = marked;
  r.response.finalizers_seen = true;
  r.response.finalizers = finalizers;
  return r;
}

// The controller reconciling objects c-0..c-9 once a second each, in [start, end).
std::vector<Event> SteadyController(int64_t start, int64_t end) {
  std::vector<Event> events;
  for (int i = 0; i < 10; ++i) {
    Append(events, Every(Write(kController, "c-" + std::to_string(i), kCleanup, false), kSec,
                         start + i * 10'000'000, end));
  }
  return events;
}

TEST(StuckFinalizersTest, StarvedControllerIsNamedAndResolvesWhenItRecovers) {
  StuckFinalizersDetector det;
  DetectorSim sim(det);
  // The controller reconciles steadily until 100 s (including d-0..d-2), then blocks.
  std::vector<Event> events = SteadyController(0, 100 * kSec);
  for (int i = 0; i < 3; ++i) {
    events.push_back({(10 + i) * kSec, Write(kController, "d-" + std::to_string(i), kCleanup,
                                             false)});
    // Alice deletes them at 120, 130, 140 s: each stays marked, finalizer in place.
    events.push_back({(120 + 10 * i) * kSec, Delete(kAlice, "d-" + std::to_string(i))});
  }
  sim.Run(events, 419 * kSec);
  EXPECT_TRUE(sim.transitions().empty());  // d-0 terminating for 299 s: not yet
  sim.Run({}, 460 * kSec);

  auto firing = sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  const StormEvidence& e = firing[0].evidence;
  EXPECT_EQ(firing[0].at_ns, 420 * kSec);
  EXPECT_EQ(e.storm, "stuck_finalizers");
  EXPECT_EQ(e.identity.user, "system:serviceaccount:db-system:db-operator");
  EXPECT_EQ(e.identity.pod_name, "db-operator-7c9-abcde");
  EXPECT_EQ(e.api_group, "example.com");
  EXPECT_EQ(e.resource, "databases");
  EXPECT_EQ(e.namespace_, "team-a");
  EXPECT_EQ(e.since_ns, 120 * kSec);
  EXPECT_EQ(e.fired_ns, 420 * kSec);
  EXPECT_EQ(e.details["stuck_objects"], 1);
  EXPECT_EQ(e.details["terminating_objects"], 3);
  EXPECT_EQ(e.details["oldest_stuck_s"], 300);
  ASSERT_EQ(e.details["examples"].size(), 1u);
  EXPECT_EQ(e.details["examples"][0]["namespace"], "team-a");
  EXPECT_EQ(e.details["examples"][0]["name"], "d-0");
  EXPECT_EQ(e.details["examples"][0]["finalizers"], "databases.example.com/cleanup");
  EXPECT_EQ(e.details["examples"][0]["terminating_s"], 300);
  EXPECT_EQ(e.details["silent_controller"], kController.user);
  EXPECT_EQ(e.details["silent_controller_last_write_s_ago"], 320);  // last write at 99.09 s
  EXPECT_EQ(e.details["silent_controller_writes"], 1003.0);
  EXPECT_EQ(e.details["last_writer"], kController.user);
  EXPECT_NE(e.summary.find("controller system:serviceaccount:db-system:db-operator silent"),
            std::string::npos)
      << e.summary;
  EXPECT_NE(e.fix.find("MaxConcurrentReconciles"), std::string::npos);

  // All three stuck by 440 s: the live evidence follows.
  auto active = det.Active();
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].details["stuck_objects"], 3);
  EXPECT_EQ(active[0].details["oldest_stuck_s"], 340);
  EXPECT_EQ(active[0].details["examples"][2]["name"], "d-2");
  EXPECT_EQ(active[0].since_ns, 120 * kSec);

  // It recovers at 500 s and removes the finalizers: nothing stuck from 501 s; resolved 60 s
  // later.
  std::vector<Event> recovery;
  for (int i = 0; i < 3; ++i) {
    recovery.push_back({500 * kSec, Write(kController, "d-" + std::to_string(i), {})});
  }
  sim.Run(std::move(recovery), 600 * kSec);
  auto resolved = sim.Of(StormState::kResolved);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].at_ns, 561 * kSec);
  EXPECT_EQ(sim.ActiveAt(560), 1u);
  EXPECT_EQ(sim.ActiveAt(561), 0u);
  EXPECT_EQ(resolved[0].evidence.identity.user, kController.user);
}

TEST(StuckFinalizersTest, FinalizersRemovedSoonAfterDeleteAreQuiet) {
  StuckFinalizersDetector det;
  DetectorSim sim(det);
  std::vector<Event> events = SteadyController(0, 900 * kSec);
  for (int i = 0; i < 400; ++i) {
    const std::string name = "d-" + std::to_string(i);
    events.push_back({i * 2 * kSec, Delete(kAlice, name)});
    events.push_back({i * 2 * kSec + 2 * kSec, Write(kController, name, {})});
  }
  sim.Run(std::move(events), 1200 * kSec);
  EXPECT_TRUE(sim.transitions().empty());
  EXPECT_EQ(det.Stats().tracked, 1u + 410u + 1u);  // resource, last writers, writer
}

TEST(StuckFinalizersTest, StuckAfterIsInclusiveAndOneSecondLessIsQuiet) {
  {
    StuckFinalizersDetector det;
    DetectorSim sim(det);
    sim.Run({{100 * kSec, Delete(kAlice, "d-0")},
             {399 * kSec + kSec / 2, Write(kController, "d-0", {})}},
            1000 * kSec);
    EXPECT_TRUE(sim.transitions().empty());
  }
  {
    StuckFinalizersDetector det;
    DetectorSim sim(det);
    sim.Run({{100 * kSec, Delete(kAlice, "d-0")}, {400 * kSec, Write(kController, "d-0", {})}},
            1000 * kSec);
    auto firing = sim.Of(StormState::kFiring);
    ASSERT_EQ(firing.size(), 1u);
    EXPECT_EQ(firing[0].at_ns, 400 * kSec);
    // Nobody wrote it and nobody wrote the resource: no one to name.
    EXPECT_EQ(firing[0].evidence.identity.user, "");
    EXPECT_EQ(firing[0].evidence.details["silent_controller"], "");
    EXPECT_EQ(firing[0].evidence.details["last_writer"], "");
    ASSERT_EQ(sim.Of(StormState::kResolved).size(), 1u);
    EXPECT_EQ(sim.Of(StormState::kResolved)[0].at_ns, 461 * kSec);
  }
}

TEST(StuckFinalizersTest, MinStuckObjectsBothSides) {
  StuckFinalizersConfig config;
  config.min_stuck_objects = 3;
  StuckFinalizersDetector two(config);
  DetectorSim sim2(two);
  sim2.Run({{0, Delete(kAlice, "d-0")}, {kSec, Delete(kAlice, "d-1")}}, 1000 * kSec);
  EXPECT_TRUE(sim2.transitions().empty());

  StuckFinalizersDetector three(config);
  DetectorSim sim3(three);
  sim3.Run({{0, Delete(kAlice, "d-0")},
            {kSec, Delete(kAlice, "d-1")},
            {2 * kSec, Delete(kAlice, "d-2")}},
           1000 * kSec);
  auto firing = sim3.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].at_ns, 302 * kSec);
  EXPECT_EQ(firing[0].evidence.details["stuck_objects"], 3);
  EXPECT_EQ(firing[0].evidence.since_ns, 0);
}

TEST(StuckFinalizersTest, EveryWayOutOfTerminating) {
  StuckFinalizersDetector det;
  DetectorSim sim(det);
  std::vector<Event> events;
  for (int i = 0; i < 8; ++i) events.push_back({0, Delete(kAlice, "d-" + std::to_string(i))});
  events.push_back({10 * kSec, sim::Request(kAlice, "GET", ObjectPath("d-0"), 404)});
  events.push_back({10 * kSec, DeleteGone(kAlice, "d-1")});
  events.push_back({10 * kSec, Write(kController, "d-2", {})});
  events.push_back({10 * kSec, Write(kController, "d-3", kCleanup, false)});  // recreated
  // Still holding one of two finalizers: stays stuck, with what is left.
  events.push_back({10 * kSec, Write(kController, "d-4", {"other.example.com/hold"})});
  // A repeated DELETE keeps the first one's time.
  events.push_back({200 * kSec, Delete(kAlice, "d-5")});
  // Failed writes and responses cut before the finalizers prove nothing.
  RequestRecord conflict = Write(kController, "d-6", {});
  conflict.status = 409;
  events.push_back({10 * kSec, conflict});
  RequestRecord cut = Write(kController, "d-7", {});
  cut.response.finalizers_seen = false;
  events.push_back({10 * kSec, cut});
  sim.Run(std::move(events), 300 * kSec);

  auto firing = sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].at_ns, 300 * kSec);
  const auto& e = firing[0].evidence;
  EXPECT_EQ(e.details["stuck_objects"], 4);
  const auto& examples = e.details["examples"];
  ASSERT_EQ(examples.size(), 4u);
  EXPECT_EQ(examples[0]["name"], "d-4");
  EXPECT_EQ(examples[0]["finalizers"], "other.example.com/hold");
  EXPECT_EQ(examples[1]["name"], "d-5");
  EXPECT_EQ(examples[2]["name"], "d-6");
  EXPECT_EQ(examples[3]["name"], "d-7");
  // The controller's 5 writes at 10 s (the 409 included) make it steady, silent since, and
  // a DELETE came after: it is named.
  EXPECT_EQ(e.details["silent_controller"], kController.user);
  EXPECT_EQ(e.details["silent_controller_writes"], 5.0);
  EXPECT_EQ(e.details["last_writer"], kController.user);
  EXPECT_EQ(e.identity.user, kController.user);
}

TEST(StuckFinalizersTest, DeletesThatDoNotProveFinalizersMarkNothing) {
  StuckFinalizersDetector det;
  DetectorSim sim(det);
  RequestRecord cut = Delete(kAlice, "d-0");
  cut.response.finalizers_seen = false;  // response cut before metadata.finalizers
  cut.response.finalizers.clear();
  RequestRecord graceful = Delete(kAlice, "d-1", {});  // a grace period, no finalizer
  RequestRecord failed = Delete(kAlice, "d-2");
  failed.status = 403;
  RequestRecord collection =
      sim::Request(kAlice, "DELETE", "/apis/example.com/v1/namespaces/team-a/databases", 200);
  sim.Run({{0, cut}, {0, graceful}, {0, failed}, {0, collection}}, 1000 * kSec);
  EXPECT_TRUE(sim.transitions().empty());
  EXPECT_EQ(det.Stats().observed, 4u);
}

TEST(StuckFinalizersTest, SilentControllerNeedsSteadinessSilenceAndLaterDeletes) {
  auto run = [](std::vector<Event> controller, int64_t delete_at) {
    StuckFinalizersDetector det;
    DetectorSim sim(det);
    controller.push_back({5 * kSec, Write(Sa("ops", "helper"), "d-0", kCleanup, false)});
    controller.push_back({delete_at, Delete(kAlice, "d-0")});
    sim.Run(std::move(controller), delete_at + 301 * kSec);
    auto firing = sim.Of(StormState::kFiring);
    return firing.empty() ? std::string("no storm") : firing[0].evidence.identity.user;
  };
  const std::string helper = "system:serviceaccount:ops:helper";
  // Steady for 100 s, then silent; the delete comes later: the controller is named.
  EXPECT_EQ(run(SteadyController(0, 100 * kSec), 120 * kSec), kController.user);
  // Still writing when the object gets stuck: not silent; the object's last writer is named.
  EXPECT_EQ(run(SteadyController(0, 500 * kSec), 120 * kSec), helper);
  // 4 writes in the lookback (< 5): not steady.
  EXPECT_EQ(run(Every(Write(kController, "c-0", kCleanup, false), 10 * kSec, 0, 40 * kSec),
                120 * kSec),
            helper);
  // 5 writes: steady.
  EXPECT_EQ(run(Every(Write(kController, "c-0", kCleanup, false), 10 * kSec, 0, 50 * kSec),
                120 * kSec),
            kController.user);
}

// At scale many clients write each resource: kubelets on pods, one-off scripts, other
// controllers. While the controller is silent, 6,000 other clients write its resource once
// each and 6,000 write another resource. The controller's 1,000 writes keep it among the
// resource's top writers; light writers only take over each other's entries. With the default
// 16 writers per resource (a scanned sketch) and with 64 (the sketch's indexed form).
TEST(StuckFinalizersTest, SilentControllerOutlastsManyLightWriters) {
  for (size_t writers : {16, 64}) {
    SCOPED_TRACE(writers);
    StuckFinalizersConfig config;
    config.writers_per_resource = writers;
    StuckFinalizersDetector det(config);
    DetectorSim sim(det);
    std::vector<Event> events = SteadyController(0, 100 * kSec);
    events.push_back({5 * kSec, Write(Sa("ops", "helper"), "d-0", kCleanup, false)});
    events.push_back({120 * kSec, Delete(kAlice, "d-0")});
    for (int i = 0; i < 6000; ++i) {
      const int64_t at = 110 * kSec + i * (kSec / 20);  // 110 .. 410 s
      const Identity light = Sa("tenants", "script-" + std::to_string(i));
      events.push_back({at, Write(light, "x-" + std::to_string(i), kCleanup, false)});
      RequestRecord other = sim::Request(
          light, "PATCH", "/apis/example.com/v1/namespaces/team-a/backups/b-" + std::to_string(i));
      events.push_back({at, other});
    }
    sim.Run(std::move(events), 421 * kSec);
    auto firing = sim.Of(StormState::kFiring);
    ASSERT_EQ(firing.size(), 1u);
    const StormEvidence& e = firing[0].evidence;
    EXPECT_EQ(firing[0].at_ns, 420 * kSec);
    EXPECT_EQ(e.identity.user, kController.user);
    EXPECT_EQ(e.details["silent_controller"], kController.user);
    EXPECT_EQ(e.details["silent_controller_writes"], 1000.0);
    EXPECT_EQ(e.details["last_writer"], "system:serviceaccount:ops:helper");
  }
}

// The bound, both sides: with 4 slots the light writers cycle through the 3 the controller
// does not hold (the helper's one write took one first), each taking the smallest count + 1,
// so their 3 counts sum to 1 + the light writes. The controller's 100 writes keep it until
// those counts all reach 100 (299 light writes); the next one, tied with it at 100, pushes
// it out (among equal counts the longest held goes) like any other writer.
TEST(StuckFinalizersTest, ControllerKeptUntilLightWritesOutweighIt) {
  auto named = [](int light_writers) {
    StuckFinalizersConfig config;
    config.writers_per_resource = 4;
    StuckFinalizersDetector det(config);
    DetectorSim sim(det);
    std::vector<Event> events =
        Every(Write(kController, "c-0", kCleanup, false), kSec, 0, 100 * kSec);
    events.push_back({5 * kSec, Write(Sa("ops", "helper"), "d-0", kCleanup, false)});
    events.push_back({120 * kSec, Delete(kAlice, "d-0")});
    for (int i = 0; i < light_writers; ++i) {
      events.push_back({110 * kSec + i * (kSec / 10),
                        Write(Sa("tenants", "script-" + std::to_string(i)),
                              "x-" + std::to_string(i), kCleanup, false)});
    }
    sim.Run(std::move(events), 421 * kSec);
    auto firing = sim.Of(StormState::kFiring);
    return firing.size() == 1 ? firing[0].evidence.identity.user : std::string("no storm");
  };
  EXPECT_EQ(named(250), kController.user);
  EXPECT_EQ(named(299), kController.user);
  EXPECT_EQ(named(300), "system:serviceaccount:ops:helper");
  EXPECT_EQ(named(1000), "system:serviceaccount:ops:helper");
}

TEST(StuckFinalizersTest, AllowListedIdentitiesNeitherMarkNorAreNamedButStillClear) {
  StuckFinalizersConfig config;
  config.allow.users = {"system:serviceaccount:kube-system:*"};
  const Identity ns_controller = Sa("kube-system", "namespace-controller");
  const Identity gc = Sa("kube-system", "generic-garbage-collector");
  StuckFinalizersDetector det(config);
  DetectorSim sim(det);
  std::vector<Event> events;
  for (int i = 0; i < 60; ++i) {  // the garbage collector writes steadily, then goes quiet
    events.push_back({i * kSec, Write(gc, "c-" + std::to_string(i % 5), kCleanup, false)});
  }
  events.push_back({100 * kSec, Delete(ns_controller, "d-0")});  // allowed: not marked
  events.push_back({100 * kSec, Delete(kAlice, "d-1")});
  events.push_back({100 * kSec, Delete(kAlice, "d-2")});
  events.push_back({150 * kSec, Write(gc, "d-2", {})});  // allowed, but the facts clear d-2
  sim.Run(std::move(events), 500 * kSec);
  auto firing = sim.Of(StormState::kFiring);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].evidence.details["stuck_objects"], 1);
  EXPECT_EQ(firing[0].evidence.details["examples"][0]["name"], "d-1");
  EXPECT_EQ(firing[0].evidence.details["silent_controller"], "");
  EXPECT_EQ(firing[0].evidence.identity.user, "");
}

TEST(StuckFinalizersTest, StateIsBounded) {
  StuckFinalizersConfig config;
  config.max_objects = 100;
  config.writers_per_resource = 10;
  StuckFinalizersDetector det(config);
  for (int i = 0; i < 1000; ++i) {
    det.Observe(Delete(kAlice, "d-" + std::to_string(i)), i * kSec / 10);
    det.Observe(Write(Sa("w", std::to_string(i)), "x-" + std::to_string(i), kCleanup, false),
                i * kSec / 10);
  }
  DetectorStats stats = det.Stats();
  EXPECT_EQ(stats.tracked, 100u + 100u + 10u + 1u);
  EXPECT_EQ(stats.evictions, 900u + 900u + 990u);
  EXPECT_EQ(stats.observed, 2000u);
  // The oldest marks went first: d-900..d-999 are left, stuck 300 s after 99.9 s.
  auto transitions = det.Evaluate(400 * kSec);
  ASSERT_EQ(transitions.size(), 1u);
  EXPECT_EQ(transitions[0].evidence.details["stuck_objects"], 100);
  EXPECT_EQ(transitions[0].evidence.details["examples"][0]["name"], "d-900");
}

// More writers of a resource than writers_per_resource, each as light as the others: every
// write takes over a slot, as light writers do at 10,000 clients. The slot is given its
// client's identity packed before, not packed (allocated) again, so a write allocates nothing
// once its client and object are known.
TEST(StuckFinalizersTest, WritesThatTakeOverWriterSlotsAllocateNothing) {
  StuckFinalizersConfig config;
  config.writers_per_resource = 4;
  StuckFinalizersDetector det(config);
  std::vector<RequestRecord> writes;
  for (const char* resource : {"databases", "backups", "restores"}) {
    for (int client = 0; client < 10; ++client) {
      const std::string name = "o-" + std::to_string(client);
      RequestRecord r = sim::Request(Sa("team-a", "ctl-" + std::to_string(client)), "PUT",
                                     "/apis/example.com/v1/namespaces/team-a/" +
                                         std::string(resource) + "/" + name);
      r.response.object_seen = r.response.finalizers_seen = true;
      r.response.finalizers = kCleanup;
      writes.push_back(r);
    }
  }
  int64_t now = 0;
  auto observe_all = [&] {
    for (const RequestRecord& r : writes) det.Observe(r, now += kSec / 100);
  };
  observe_all();  // clients, objects and writer entries made
  const uint64_t evictions = det.Stats().evictions;
  EXPECT_EQ(testing::AllocationsDuring(observe_all), 0u);
  // Every write of the second pass took over a writer slot (10 clients a resource, 4 slots).
  EXPECT_EQ(det.Stats().evictions - evictions, writes.size());
}

TEST(StuckFinalizersTest, EvictedFiringResourceResolvesOnce) {
  StuckFinalizersConfig config;
  config.max_resources = 1;
  StuckFinalizersDetector det(config);
  DetectorSim sim(det);
  RequestRecord other = sim::Request(kAlice, "DELETE", "/api/v1/namespaces/team-a/pods/p", 200);
  sim.Run({{0, Delete(kAlice, "d-0")}, {310 * kSec + 5, other}}, 400 * kSec);
  ASSERT_EQ(sim.Of(StormState::kFiring).size(), 1u);
  auto resolved = sim.Of(StormState::kResolved);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].at_ns, 310 * kSec + 5);
  EXPECT_EQ(resolved[0].evidence.resource, "databases");
  EXPECT_EQ(det.Stats().tracked, 1u);  // the orphaned mark was dropped with its resource
}

}  // namespace
}  // namespace stormwatch

namespace stormwatch {
namespace {

// Who wrote each stuck object last is kept by client key; the DELETE that marks an object
// names that client from the resource's top writers or, once its slot was taken over, from the
// packed identities of the last max_writing_clients writing clients. Among the stuck objects the
// latest write names the last writer; a write after the DELETE replaces the name.
TEST(StuckFinalizersTest, LastWriterIsNamedAfterItsWriterSlotWasTakenOver) {
  auto last_writer = [](int64_t helper_at, int64_t controller_at, int writing_clients) {
    StuckFinalizersConfig config;
    config.writers_per_resource = 2;
    config.max_writing_clients = 8;
    StuckFinalizersDetector det(config);
    det.Observe(Write(Sa("ops", "helper"), "d-0", kCleanup, false), helper_at);
    det.Observe(Write(kController, "d-1", kCleanup, false), controller_at);
    // Light writers of the same resource take both writer slots over, one after the other.
    for (int i = 0; i < writing_clients; ++i) {
      det.Observe(Write(Sa("tenants", "script-" + std::to_string(i)), "x-" + std::to_string(i),
                        kCleanup, false),
                  20 * kSec + i);
    }
    det.Observe(Delete(kAlice, "d-0"), 30 * kSec);
    det.Observe(Delete(kAlice, "d-1"), 30 * kSec);
    auto transitions = det.Evaluate(330 * kSec);
    EXPECT_EQ(transitions.size(), 1u);
    return transitions.empty() ? std::string("no storm")
                               : transitions[0].evidence.details["last_writer"].get<std::string>();
  };
  // 5 light writers: both writers still among the last 8 packed.
  EXPECT_EQ(last_writer(5 * kSec, 8 * kSec, 5), kController.user);
  EXPECT_EQ(last_writer(8 * kSec, 5 * kSec, 5), "system:serviceaccount:ops:helper");
  // 7: the helper (packed first) let go, the controller still known: named though older.
  EXPECT_EQ(last_writer(8 * kSec, 5 * kSec, 7), kController.user);
  // 20: both let go; nobody is named rather than a wrong client.
  EXPECT_EQ(last_writer(8 * kSec, 5 * kSec, 20), "");
}

TEST(StuckFinalizersTest, AWriteAfterTheDeleteNamesItsWriterAndForgottenOnesAreCounted) {
  StuckFinalizersConfig config;
  config.writers_per_resource = 2;
  config.max_writing_clients = 4;
  StuckFinalizersDetector det(config);
  det.Observe(Write(Sa("ops", "helper"), "d-0", kCleanup, false), 5 * kSec);
  for (int i = 0; i < 10; ++i) {
    det.Observe(Write(Sa("tenants", "script-" + std::to_string(i)), "x-" + std::to_string(i),
                      kCleanup, false),
                10 * kSec + i);
  }
  const uint64_t evictions = det.Stats().evictions;
  det.Observe(Delete(kAlice, "d-0"), 20 * kSec);
  EXPECT_EQ(det.Stats().evictions - evictions, 1u);  // the helper's name was let go
  // The controller removes one finalizer at 40 s; one is left: still stuck, and now it is
  // the last writer.
  det.Observe(Write(kController, "d-0", {"other.example.com/hold"}), 40 * kSec);
  auto transitions = det.Evaluate(320 * kSec);
  ASSERT_EQ(transitions.size(), 1u);
  EXPECT_EQ(transitions[0].evidence.details["last_writer"], kController.user);
  EXPECT_EQ(transitions[0].evidence.details["examples"][0]["finalizers"],
            "other.example.com/hold");
}

}  // namespace
}  // namespace stormwatch
