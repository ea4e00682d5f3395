// The per-request state tables: BoundedLru (the detectors' bounded maps), the Space-Saving
// sketch of folded clients, and the record keys they are keyed by. Each checked against a
// plain reference implementation on a long random operation sequence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <list>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "agent/core/bounded_lru.h"
#include "agent/core/space_saving.h"
#include "agent/analysis/second_ring.h"
#include "agent/kube/identity.h"
#include "agent/kube/record_keys.h"
#include "exporters/client_cap.h"
#include "record_identity.h"

namespace stormwatch {
namespace {

TEST(BoundedLru, EvictsLeastRecentAndIteratesMostRecentFirst) {
  BoundedLru<uint64_t, std::string> lru(3);
  std::vector<uint64_t> evicted;
  auto on_evict = [&](uint64_t k, std::string&) { evicted.push_back(k); };
  for (uint64_t k : {1, 2, 3}) lru.FindOrInsert(k, [k] { return "v" + std::to_string(k); }, on_evict);
  std::string* one = lru.Touch(1);  // 1 is now the most recent
  ASSERT_NE(one, nullptr);
  lru.FindOrInsert(4, [] { return std::string("v4"); }, on_evict);
  EXPECT_EQ(evicted, std::vector<uint64_t>{2});
  std::vector<uint64_t> order;
  for (const auto& [k, v] : lru) order.push_back(k);
  EXPECT_EQ(order, (std::vector<uint64_t>{4, 1, 3}));
  EXPECT_EQ(lru.Find(1), one);  // values never move
  EXPECT_EQ(*one, "v1");
  EXPECT_EQ(lru.evictions(), 1u);
  for (auto it = lru.begin(); it != lru.end();) it = it->first == 1 ? lru.Erase(it) : std::next(it);
  EXPECT_EQ(lru.size(), 2u);
  EXPECT_EQ(lru.Find(1), nullptr);
  EXPECT_TRUE(lru.Erase(3));
  EXPECT_FALSE(lru.Erase(3));
  order.clear();
  for (const auto& [k, v] : lru) order.push_back(k);
  EXPECT_EQ(order, std::vector<uint64_t>{4});
}

// Against a std::list + std::map reference: 200k random finds, inserts and erases over 3,000
// keys with room for 1,000, including erasing while iterating; Oldest() is the list's back.
TEST(BoundedLru, AFullTableHandsTheEvictedValueToReuseInsteadOfMakingOne) {
  BoundedLru<uint64_t, std::vector<int>> lru(2);
  auto never = [](uint64_t, std::vector<int>&) { ADD_FAILURE() << "nothing to evict"; };
  auto no_reuse = [](std::vector<int>&) { ADD_FAILURE() << "not full: made, not reused"; };
  lru.FindOrInsert(1, [] { return std::vector<int>(100, 1); }, never, no_reuse);
  lru.FindOrInsert(2, [] { return std::vector<int>(100, 2); }, never, no_reuse);
  const std::vector<int>* first_value = lru.Find(1);
  const int* first_buffer = first_value->data();
  std::vector<uint64_t> evicted;
  int reused = 0;
  std::vector<int>& three = lru.FindOrInsert(
      3, []() -> std::vector<int> { ADD_FAILURE() << "full: reused, not made"; return {}; },
      [&](uint64_t key, std::vector<int>& v) {
        evicted.push_back(key);
        EXPECT_EQ(v.front(), 1);  // on_evict sees the value before reuse resets it
      },
      [&](std::vector<int>& v) {
        ++reused;
        std::fill(v.begin(), v.end(), 3);
      });
  EXPECT_EQ(evicted, std::vector<uint64_t>{1});
  EXPECT_EQ(reused, 1);
  EXPECT_EQ(three.data(), first_buffer);  // key 1's buffer, now key 3's: nothing allocated
  EXPECT_EQ(&three, first_value);          // the value itself stayed in its slot: not moved
  EXPECT_EQ(lru.begin()->first, 3u);       // and is the most recent
  EXPECT_EQ(three, std::vector<int>(100, 3));
  EXPECT_EQ(lru.Find(1), nullptr);
  EXPECT_EQ(*lru.Find(2), std::vector<int>(100, 2));
  EXPECT_EQ(lru.size(), 2u);
  EXPECT_EQ(lru.evictions(), 1u);
  // A key already held is only touched.
  lru.FindOrInsert(2, [] { return std::vector<int>(); }, never, no_reuse);
  EXPECT_EQ(lru.begin()->first, 2u);
}

TEST(BoundedLru, MatchesAReferenceLruOnRandomOperations) {
  constexpr size_t kCapacity = 1000;
  BoundedLru<uint64_t, uint64_t> lru(kCapacity);
  std::list<std::pair<uint64_t, uint64_t>> ref;  // front = most recent
  uint64_t seed = 42;
  auto next = [&] { return seed = seed * 6364136223846793005ULL + 1442695040888963407ULL; };
  auto ref_find = [&](uint64_t k) {
    return std::find_if(ref.begin(), ref.end(), [k](const auto& e) { return e.first == k; });
  };
  for (int i = 0; i < 200000; ++i) {
    const uint64_t r = next();
    const uint64_t key = (r >> 20) % 3000;
    switch ((r >> 8) % 10) {
      case 0: {
        auto it = ref_find(key);
        const bool present = it != ref.end();
        if (present) ref.erase(it);
        ASSERT_EQ(lru.Erase(key), present);
        break;
      }
      case 1: {
        const uint64_t* v = lru.Find(key);
        auto it = ref_find(key);
        ASSERT_EQ(v != nullptr, it != ref.end());
        if (v) {
          ASSERT_EQ(*v, it->second);
        }
        break;
      }
      default: {
        std::vector<uint64_t> evicted, expected;
        uint64_t& v = lru.FindOrInsert(key, [&] { return uint64_t{0}; },
                                       [&](uint64_t k, uint64_t&) { evicted.push_back(k); });
        ++v;
        auto it = ref_find(key);
        if (it != ref.end()) {
          ref.splice(ref.begin(), ref, it);
        } else {
          while (ref.size() >= kCapacity) {
            expected.push_back(ref.back().first);
            ref.pop_back();
          }
          ref.emplace_front(key, 0);
        }
        ++ref.front().second;
        ASSERT_EQ(evicted, expected);
      }
    }
    auto* oldest = lru.Oldest();  // the expiry end: the reference's back
    ASSERT_EQ(oldest != nullptr, !ref.empty());
    if (oldest) {
      ASSERT_EQ(oldest->first, ref.back().first);
    }
    if (i % 20000 == 0) {  // erase every 7th key while iterating
      for (auto it = lru.begin(); it != lru.end();) it = it->first % 7 == 0 ? lru.Erase(it) : std::next(it);
      ref.remove_if([](const auto& e) { return e.first % 7 == 0; });
    }
  }
  std::vector<std::pair<uint64_t, uint64_t>> got;
  for (const auto& [k, v] : lru) got.emplace_back(k, v);
  const std::vector<std::pair<uint64_t, uint64_t>> want(ref.begin(), ref.end());
  EXPECT_EQ(got, want);
  EXPECT_EQ(lru.size(), ref.size());
}

// Recency::kApproximate (CLOCK): a touch marks a key and moves nothing; a key about to be
// evicted that was touched since it was placed goes to the front unmarked instead.
TEST(BoundedLru, ApproximateRecencyGivesTouchedKeysASecondChance) {
  BoundedLru<uint64_t, int> lru(4, Recency::kApproximate);
  std::vector<uint64_t> evicted;
  auto on_evict = [&](uint64_t k, int&) { evicted.push_back(k); };
  for (uint64_t k : {1, 2, 3, 4}) lru.FindOrInsert(k, [] { return 0; }, on_evict);
  auto order = [&] {
    std::vector<uint64_t> keys;
    for (const auto& [k, v] : lru) keys.push_back(k);
    return keys;
  };
  ASSERT_NE(lru.Touch(1), nullptr);
  ASSERT_NE(lru.Touch(3), nullptr);
  EXPECT_EQ(order(), (std::vector<uint64_t>{4, 3, 2, 1}));  // touches move nothing
  EXPECT_EQ(lru.Oldest()->first, 1u);
  lru.FindOrInsert(5, [] { return 0; }, on_evict);  // 1 touched: to the front; 2 goes
  EXPECT_EQ(evicted, std::vector<uint64_t>{2});
  EXPECT_EQ(order(), (std::vector<uint64_t>{5, 1, 4, 3}));
  lru.FindOrInsert(6, [] { return 0; }, on_evict);  // 3 touched: to the front; 4 goes
  EXPECT_EQ(evicted, (std::vector<uint64_t>{2, 4}));
  EXPECT_EQ(order(), (std::vector<uint64_t>{6, 3, 5, 1}));
  lru.FindOrInsert(7, [] { return 0; }, on_evict);  // 1's mark was spent: it goes
  EXPECT_EQ(evicted, (std::vector<uint64_t>{2, 4, 1}));
  // Every key touched: each gets its second chance, then the oldest placed goes.
  for (uint64_t k : {7, 6, 3, 5}) lru.Touch(k);
  lru.FindOrInsert(8, [] { return 0; }, on_evict);
  EXPECT_EQ(evicted, (std::vector<uint64_t>{2, 4, 1, 5}));
  EXPECT_EQ(order(), (std::vector<uint64_t>{8, 7, 6, 3}));  // a full turn: the order kept
  // The same operations on an exact table evict what LRU evicts.
  BoundedLru<uint64_t, int> exact(4);
  std::vector<uint64_t> exact_evicted;
  auto exact_evict = [&](uint64_t k, int&) { exact_evicted.push_back(k); };
  for (uint64_t k : {1, 2, 3, 4}) exact.FindOrInsert(k, [] { return 0; }, exact_evict);
  exact.Touch(1);
  exact.Touch(3);
  for (uint64_t k : {5, 6, 7}) exact.FindOrInsert(k, [] { return 0; }, exact_evict);
  for (uint64_t k : {7, 6, 3, 5}) exact.Touch(k);
  exact.FindOrInsert(8, [] { return 0; }, exact_evict);
  EXPECT_EQ(exact_evicted, (std::vector<uint64_t>{2, 4, 1, 7}));
}

// Against a std::list reference of CLOCK (front = last placed, a touched mark per key): 300k
// random touches, finds, inserts and erases over 3,000 keys with room for 1,000, with both
// FindOrInsert forms and erasing while iterating. The evictions, Oldest() and the order match;
// some evictions differ from what exact LRU would evict (the order is approximate).
TEST(BoundedLru, FrequencyAdmissionLetsInOnlyKeysSeenMoreOftenThanTheVictim) {
  BoundedLru<uint64_t, int> lru(4, Recency::kApproximate, Admission::kFrequency);
  std::vector<uint64_t> evicted;
  auto make = [] { return 0; };
  auto on_evict = [&](uint64_t k, int&) { evicted.push_back(k); };
  auto reuse = [](int& v) { v = 0; };
  auto order = [&] {
    std::vector<uint64_t> keys;
    for (const auto& [k, v] : lru) keys.push_back(k);
    return keys;
  };
  for (uint64_t k : {1, 2, 3, 4}) ASSERT_NE(lru.FindOrAdmit(k, make, on_evict, reuse), nullptr);
  // The first time the table is full, its keys have no sightings yet (the sketch starts then):
  // a newcomer, seen once, outweighs the victim.
  ASSERT_NE(lru.FindOrAdmit(5, make, on_evict, reuse), nullptr);
  EXPECT_EQ(evicted, std::vector<uint64_t>{1});
  // Keys held and seen since: 2 (the next victim) three times, the others twice.
  for (int i = 0; i < 2; ++i) {
    for (uint64_t k : {2, 3, 4, 5}) *lru.FindOrAdmit(k, make, on_evict, reuse) += 1;
  }
  *lru.FindOrAdmit(2, make, on_evict, reuse) += 1;
  for (int i = 0; i < 4; ++i) ASSERT_NE(lru.Find(2 + i), nullptr);
  // The marks give every key its second chance first: the victim is the oldest placed, 2.
  // A newcomer seen once, twice, three times: refused while not seen more often than 2.
  for (int seen = 1; seen <= 3; ++seen) {
    EXPECT_EQ(lru.FindOrAdmit(6, make, on_evict, reuse), nullptr) << seen;
  }
  EXPECT_EQ(lru.refusals(), 3u);
  EXPECT_EQ(lru.Find(6), nullptr);
  EXPECT_EQ(evicted, std::vector<uint64_t>{1});  // nothing evicted by a refusal
  EXPECT_EQ(lru.size(), 4u);
  // The fourth sighting outweighs 2's three: 6 takes its place.
  int* six = lru.FindOrAdmit(6, make, on_evict, reuse);
  ASSERT_NE(six, nullptr);
  EXPECT_EQ(*six, 0);
  EXPECT_EQ(evicted, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(order().front(), 6u);
  EXPECT_EQ(lru.refusals(), 3u);
  EXPECT_EQ(lru.evictions(), 2u);
  // A key held is found whatever its sightings.
  EXPECT_NE(lru.FindOrAdmit(3, make, on_evict, reuse), nullptr);

  // Admission::kAll (the default): FindOrAdmit is FindOrInsert, no sketch, no refusal.
  BoundedLru<uint64_t, int> all(2, Recency::kApproximate);
  for (uint64_t k : {1, 2, 3, 4, 5}) ASSERT_NE(all.FindOrAdmit(k, make, [](uint64_t, int&) {}, reuse), nullptr);
  EXPECT_EQ(all.evictions(), 3u);
  EXPECT_EQ(all.refusals(), 0u);
}

TEST(BoundedLru, ApproximateRecencyMatchesAReferenceClock) {
  constexpr size_t kCapacity = 1000;
  BoundedLru<uint64_t, uint64_t> lru(kCapacity, Recency::kApproximate);
  struct Ref {
    uint64_t key, value;
    bool touched;
  };
  std::list<Ref> ref;
  std::map<uint64_t, uint64_t> last_touch;  // for what exact LRU would evict
  uint64_t seed = 7;
  auto next = [&] { return seed = seed * 6364136223846793005ULL + 1442695040888963407ULL; };
  auto ref_find = [&](uint64_t k) {
    return std::find_if(ref.begin(), ref.end(), [k](const Ref& e) { return e.key == k; });
  };
  size_t evictions = 0, not_least_recent = 0;
  for (uint64_t now = 1; now <= 300'000; ++now) {
    const uint64_t r = next();
    const uint64_t key = (r >> 20) % 3000;
    const auto op = (r >> 8) % 10;
    if (op == 0) {
      auto it = ref_find(key);
      const bool present = it != ref.end();
      if (present) ref.erase(it);
      last_touch.erase(key);
      ASSERT_EQ(lru.Erase(key), present);
    } else if (op == 1) {
      const uint64_t* v = lru.Find(key);
      auto it = ref_find(key);
      ASSERT_EQ(v != nullptr, it != ref.end());
      if (v) ASSERT_EQ(*v, it->value);
    } else {
      std::vector<uint64_t> evicted, expected;
      auto on_evict = [&](uint64_t k, uint64_t&) {
        evicted.push_back(k);
        const uint64_t victim_touch = last_touch.at(k);
        if (std::any_of(last_touch.begin(), last_touch.end(),
                        [&](const auto& e) { return e.second < victim_touch; })) {
          ++not_least_recent;
        }
        last_touch.erase(k);
        ++evictions;
      };
      auto make = [] { return uint64_t{0}; };
      uint64_t& v = op % 2 ? lru.FindOrInsert(key, make, on_evict)
                           : lru.FindOrInsert(key, make, on_evict, [](uint64_t& old) { old = 0; });
      ++v;
      if (auto it = ref_find(key); it != ref.end()) {
        it->touched = true;
        ++it->value;
      } else {
        while (ref.size() >= kCapacity) {
          while (ref.back().touched) {  // the second chance
            ref.back().touched = false;
            ref.splice(ref.begin(), ref, std::prev(ref.end()));
          }
          expected.push_back(ref.back().key);
          ref.pop_back();
        }
        ref.push_front({key, 1, false});
      }
      last_touch[key] = now;
      ASSERT_EQ(evicted, expected);
    }
    auto* oldest = lru.Oldest();
    ASSERT_EQ(oldest != nullptr, !ref.empty());
    if (oldest) ASSERT_EQ(oldest->first, ref.back().key);
    if (now % 20000 == 0) {  // erase every 7th key while iterating
      for (auto it = lru.begin(); it != lru.end();) it = it->first % 7 == 0 ? lru.Erase(it) : std::next(it);
      ref.remove_if([](const Ref& e) { return e.key % 7 == 0; });
      std::erase_if(last_touch, [](const auto& e) { return e.first % 7 == 0; });
    }
  }
  std::vector<std::pair<uint64_t, uint64_t>> got, want;
  for (const auto& [k, v] : lru) got.emplace_back(k, v);
  for (const Ref& e : ref) want.emplace_back(e.key, e.value);
  EXPECT_EQ(got, want);
  EXPECT_GT(evictions, 100'000u);
  EXPECT_GT(not_least_recent, 0u);
}

// The sketch's Stream-Summary against an ordered set of (count, when the key reached that
// count): the slot with the smallest such pair is replaced, so both keep exactly the same keys
// and counts.
class ReferenceSpaceSaving {
 public:
  explicit ReferenceSpaceSaving(size_t capacity) : slots_(capacity) {
    for (size_t i = capacity; i > 0; --i) free_.push_back(i - 1);
  }
  void Add(const std::string& key, uint64_t amount) {
    if (auto it = index_.find(key); it != index_.end()) {
      Slot& s = slots_[it->second];
      by_count_.erase({s.count, s.seq});
      s.count += amount;
      s.seq = next_seq_++;
      slot_of_seq_[s.seq] = it->second;
      by_count_.insert({s.count, s.seq});
      return;
    }
    size_t i;
    uint64_t error = 0;
    if (!free_.empty()) {
      i = free_.back();
      free_.pop_back();
    } else {
      i = slot_of_seq_.at(by_count_.begin()->second);
      by_count_.erase(by_count_.begin());
      index_.erase(slots_[i].key);
      error = slots_[i].count;
    }
    slots_[i] = {key, error + amount, error, next_seq_++};
    slot_of_seq_[slots_[i].seq] = i;
    index_[key] = i;
    by_count_.insert({slots_[i].count, slots_[i].seq});
  }
  void Erase(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return;
    by_count_.erase({slots_[it->second].count, slots_[it->second].seq});
    free_.push_back(it->second);
    index_.erase(it);
  }
  void Decay() {
    by_count_.clear();
    for (auto it = index_.begin(); it != index_.end();) {
      Slot& s = slots_[it->second];
      s.count /= 2;
      s.error /= 2;
      if (s.count == 0) {
        free_.push_back(it->second);
        it = index_.erase(it);
      } else {
        by_count_.insert({s.count, s.seq});  // the order it reached its count is kept
        ++it;
      }
    }
  }
  std::map<std::string, uint64_t> Guaranteed() const {
    std::map<std::string, uint64_t> out;
    for (const auto& [key, i] : index_) out[key] = slots_[i].count - slots_[i].error;
    return out;
  }

 private:
  struct Slot {
    std::string key;
    uint64_t count = 0, error = 0;
    uint64_t seq = 0;
  };
  std::vector<Slot> slots_;
  std::vector<size_t> free_;
  std::map<std::string, size_t> index_;
  std::set<std::pair<uint64_t, uint64_t>> by_count_;  // (count, seq)
  std::map<uint64_t, size_t> slot_of_seq_;
  uint64_t next_seq_ = 0;
};

// 64 slots find keys through the index, 8 by scanning (kScanCapacity): both as the reference,
// with string keys and with integer keys (ClientCap's: a client label's 64-bit key).
class SpaceSavingModelTest : public ::testing::TestWithParam<size_t> {};

TEST_P(SpaceSavingModelTest, SketchKeepsWhatTheOrderedSetKept) {
  SpaceSaving sketch(GetParam());
  SpaceSaving<std::monostate, uint64_t> numbered(GetParam());
  ReferenceSpaceSaving ref(GetParam());
  const std::string prefix = "system:serviceaccount:tenant:controller-";
  uint64_t seed = 7;
  auto next = [&] { return seed = seed * 6364136223846793005ULL + 1442695040888963407ULL; };
  for (int i = 0; i < 100000; ++i) {
    const uint64_t r = next();
    // A few heavy clients among many light ones.
    const uint64_t client = (r >> 12) % 4 == 0 ? (r >> 20) % 8 : (r >> 20) % 2000;
    const std::string key = prefix + std::to_string(client);
    if ((r >> 4) % 50 == 0) {
      sketch.Erase(key);
      numbered.Erase(client);
      ref.Erase(key);
    } else {
      sketch.Add(key, 1 + (r >> 40) % 3);
      numbered.Add(client, 1 + (r >> 40) % 3);
      ref.Add(key, 1 + (r >> 40) % 3);
    }
    if (i % 5000 == 4999) {
      sketch.Decay();
      numbered.Decay();
      ref.Decay();
    }
    if (i % 997 == 0) {
      std::map<std::string, uint64_t> got, got_numbered;
      for (const auto& [k, v] : ref.Guaranteed()) {
        got[k] = sketch.Guaranteed(k);
        got_numbered[k] = numbered.Guaranteed(std::stoull(k.substr(prefix.size())));
      }
      ASSERT_EQ(got, ref.Guaranteed()) << "after " << i << " operations";
      ASSERT_EQ(got_numbered, ref.Guaranteed()) << "after " << i << " operations";
      ASSERT_EQ(sketch.size(), ref.Guaranteed().size());
      ASSERT_EQ(numbered.size(), ref.Guaranteed().size());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(IndexedAndScanned, SpaceSavingModelTest,
                         ::testing::Values(size_t{64}, size_t{8}));

TEST(SpaceSavingTest, ClearedSketchCountsAsANewOne) {
  SpaceSaving<std::string> used(4), fresh(4);
  for (int i = 0; i < 50; ++i) *used.Add("k" + std::to_string(i % 7), 1 + i % 3) = "payload";
  used.Clear();
  EXPECT_EQ(used.size(), 0u);
  EXPECT_EQ(used.Guaranteed("k1"), 0u);
  EXPECT_TRUE(used.Top(10).empty());
  // The same stream (more keys than slots) into both: the same counts, slots and payloads.
  for (int i = 0; i < 40; ++i) {
    const std::string key = "n" + std::to_string((i * 5) % 9);
    std::string* a = used.Add(key, 1 + i % 2);
    std::string* b = fresh.Add(key, 1 + i % 2);
    EXPECT_EQ(*a, *b) << i;  // a payload is reset when its slot changes hands
    *a = *b = key;
  }
  EXPECT_EQ(used.Top(4), fresh.Top(4));
  EXPECT_EQ(used.size(), fresh.size());
}

// A small (scanned) sketch reads its slots only up to the last used one: a slot freed by Erase
// before used ones must not end the scan early, in Add, Guaranteed or Clear.
TEST(SpaceSavingTest, ScannedSketchLooksPastAFreedSlot) {
  SpaceSaving<std::string> sketch(8);
  for (const char* key : {"a", "b", "c", "d"}) sketch.Add(key);
  sketch.Erase("b");  // slot 1 free, "c" and "d" after it
  sketch.Add("a");    // the last added is "a" now: "d" is found by the scan
  sketch.Add("d");
  EXPECT_EQ(sketch.size(), 3u);
  EXPECT_EQ(sketch.Guaranteed("d"), 2u);
  EXPECT_EQ(sketch.Guaranteed("c"), 1u);
  EXPECT_EQ(sketch.Guaranteed("b"), 0u);
  sketch.Erase("a");  // slot 0 free too
  sketch.Clear();
  EXPECT_EQ(sketch.size(), 0u);
  EXPECT_TRUE(sketch.Top(8).empty());
  for (int i = 0; i < 8; ++i) sketch.Add("n" + std::to_string(i));
  EXPECT_EQ(sketch.size(), 8u);
  EXPECT_EQ(sketch.Guaranteed("d"), 0u);
  EXPECT_EQ(sketch.Top(8).size(), 8u);
}

TEST(RecordKeys, FieldsAreDelimitedAndKeysFollowTheRecord) {
  EXPECT_NE(HashFields({"ab", "c"}), HashFields({"a", "bc"}));
  EXPECT_EQ(HashFields({"a", "bc"}), HashFields({"a", "bc"}));
  EXPECT_NE(CombineKeys(1, 2), CombineKeys(2, 1));
  // The fields joined with \x1f after each, hashed with the process key: short fields on the
  // stack, long ones (past 256 bytes) in another buffer, the same hash either way.
  EXPECT_EQ(HashFields({"a", "bc"}), TableHash("a\x1f" "bc\x1f"));
  const std::string long_name(300, 'n'), longer(700, 'm');
  EXPECT_EQ(HashFields({"ns", long_name}), TableHash("ns\x1f" + long_name + "\x1f"));
  EXPECT_EQ(HashFields({longer}), TableHash(longer + "\x1f"));
  EXPECT_EQ(HashFields({"a", "bc"}), TableHash("a\x1f" "bc\x1f"));  // after a long one
  // At the stack's edge: 256 bytes joined fit, 257 take the other buffer.
  const std::string edge(254, 'e');
  EXPECT_EQ(HashFields({edge, ""}), TableHash(edge + "\x1f\x1f"));
  EXPECT_EQ(HashFields({edge, "f"}), TableHash(edge + "\x1f" "f\x1f"));
  EXPECT_EQ(HashFields({"f", edge}), TableHash("f\x1f" + edge + "\x1f"));

  RequestRecord r;
  EditIdentity(r).user = "system:serviceaccount:shop:carts";
  EditIdentity(r).pod_name = "carts-1";
  r.info.api_group = "apps";
  r.info.resource = "deployments";
  r.info.namespace_ = "shop";
  r.info.name = "carts";
  const RecordKeys k = KeysOf(r);  // not set: computed
  EXPECT_TRUE(k.set);
  RequestRecord replica = r;
  EditIdentity(replica).pod_name = "carts-2";
  const RecordKeys kr = KeysOf(replica);
  EXPECT_EQ(kr.user, k.user);           // the same user ...
  EXPECT_NE(kr.client, k.client);       // ... but another client (pod)
  EXPECT_EQ(kr.object, k.object);       // on the same object
  RequestRecord other_group = r;
  other_group.info.api_group = "extensions";
  EXPECT_NE(KeysOf(other_group).resource, k.resource);
  EXPECT_NE(KeysOf(other_group).object, k.object);
  r.keys = k;
  r.info.name = "changed";  // set keys stand as the pipeline computed them
  EXPECT_EQ(KeysOf(r).object, k.object);
}

// The resource key is remembered per (group, resource) in a bounded table: whatever pairs
// share or take a place in it, a record's key is the keyed hash of its own pair.
TEST(RecordKeys, RememberedResourceKeysAreTheHashOfTheirOwnPair) {
  RequestRecord r;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 1000; ++i) {  // more pairs than places: every place is taken over
      r.info.api_group = i % 3 == 0 ? "" : "group-" + std::to_string(i % 7) + ".example.com";
      r.info.resource = "resource-" + std::to_string(i) + (round == 2 ? "-a-name-past-15-bytes" : "");
      ASSERT_EQ(RecordKeysOf(r).resource, HashFields({r.info.api_group, r.info.resource}))
          << round << " " << r.info.api_group << "/" << r.info.resource;
    }
  }
  // One resource name in 300 groups (more than places: some share one), one after another.
  r.info.resource = "deployments";
  for (int i = 0; i < 600; ++i) {
    r.info.api_group = "g" + std::to_string(i % 300);
    ASSERT_EQ(RecordKeysOf(r).resource, HashFields({r.info.api_group, "deployments"})) << i;
  }
  // Fields that join alike are still told apart (the delimiter is hashed too).
  r.info.api_group = "ab";
  r.info.resource = "c";
  const uint64_t ab_c = RecordKeysOf(r).resource;
  r.info.api_group = "a";
  r.info.resource = "bc";
  EXPECT_NE(RecordKeysOf(r).resource, ab_c);
}

// A shared identity carries its user and client keys, computed once: records with it get the
// keys a record hashing the same identity itself gets, so state never splits between the two.
TEST(RecordKeys, SharedIdentityKeysEqualHashedOnes) {
  Identity id;
  id.user = "system:serviceaccount:shop:carts";
  id.pod_name = "carts-1";
  RequestRecord shared, hashed;
  shared.identity = ShareIdentity(id);
  hashed.identity = IdentityRef::Make(id);
  ASSERT_TRUE(shared.identity->keys_set);
  ASSERT_FALSE(hashed.identity->keys_set);
  EXPECT_EQ(RecordKeysOf(shared).user, RecordKeysOf(hashed).user);
  EXPECT_EQ(RecordKeysOf(shared).client, RecordKeysOf(hashed).client);
  // The keys are the identity's, not a constant: another pod is another client.
  id.pod_name = "carts-2";
  RequestRecord replica;
  replica.identity = ShareIdentity(id);
  EXPECT_EQ(RecordKeysOf(replica).user, RecordKeysOf(shared).user);
  EXPECT_NE(RecordKeysOf(replica).client, RecordKeysOf(shared).client);
}

}  // namespace
}  // namespace stormwatch

namespace stormwatch {
namespace {

// ForEachIn visits exactly the seconds At() would give, whatever the range and the ring's
// position: window sums through it equal the per-second sums.
TEST(SecondRingTest, ForEachInEqualsAtOverAnyRange) {
  SecondRing<uint32_t> ring(7);
  uint64_t seed = 3;
  auto next = [&] { return seed = seed * 6364136223846793005ULL + 1442695040888963407ULL; };
  int64_t now = 100;
  for (int step = 0; step < 5000; ++step) {
    now += static_cast<int64_t>((next() >> 33) % 4);  // sometimes skips seconds
    if (uint32_t* slot = ring.Slot(now - static_cast<int64_t>((next() >> 40) % 9))) *slot += 1;
    const int64_t from = now - static_cast<int64_t>((next() >> 20) % 12);
    const int64_t to = from + static_cast<int64_t>((next() >> 30) % 12) - 2;
    uint64_t by_at = 0, by_each = 0, visited = 0;
    for (int64_t s = from; s <= to; ++s) by_at += ring.At(s);
    ring.ForEachIn(from, to, [&](uint32_t v) {
      by_each += v;
      ++visited;
    });
    ASSERT_EQ(by_each, by_at) << "step " << step << " [" << from << ", " << to << "]";
    ASSERT_LE(visited, std::min<uint64_t>(7, to >= from ? to - from + 1 : 0));
  }
}


// Slot() against a model (second -> count, only the newest `n` seconds kept): small steps,
// jumps past the ring's span (the slots keep stale values, read as 0), late seconds (before a
// jump too), Clear(), and seconds before the epoch.
TEST(SecondRingTest, SlotsHoldExactlyTheNewestSecondsAcrossJumps) {
  constexpr int64_t kSeconds = 5;
  SecondRing<uint32_t> ring(kSeconds);
  std::map<int64_t, uint32_t> model;
  int64_t newest = INT64_MIN;
  uint64_t seed = 11;
  auto next = [&] { return seed = seed * 6364136223846793005ULL + 1442695040888963407ULL; };
  int64_t now = -23;  // monotonic seconds are positive; the ring does not rely on it
  for (int step = 0; step < 20000; ++step) {
    const uint64_t r = next() >> 33;
    if (r % 211 == 0) {  // emptied (a reused entry's): its slots' stale values read as 0
      ring.Clear();
      model.clear();
      newest = INT64_MIN;
    }
    now += r % 10 == 0 ? static_cast<int64_t>(r % 13) : static_cast<int64_t>(r % 3);
    const int64_t s = now - static_cast<int64_t>((next() >> 40) % 8);  // sometimes too late
    newest = std::max(newest, s);
    const bool kept = s > newest - kSeconds;
    uint32_t* slot = ring.Slot(s);
    ASSERT_EQ(slot != nullptr, kept) << "step " << step << " second " << s;
    if (slot) {
      *slot += 1;
      model[s] += 1;
    }
    for (int64_t t = newest - kSeconds - 2; t <= newest + 2; ++t) {
      const bool in_ring = t <= newest && t > newest - kSeconds;
      const uint32_t want = in_ring && model.count(t) ? model[t] : 0;
      ASSERT_EQ(ring.At(t), want) << "step " << step << " second " << t;
    }
  }
}

}  // namespace
}  // namespace stormwatch
