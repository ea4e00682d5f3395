// PackedIdentity keeps every field of an Identity: unpacked, it equals the original.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "agent/analysis/packed_identity.h"
#include "tests/unit/allocation_count.h"

namespace stormwatch {
namespace {

TEST(PackedIdentity, EmptyUnpacksToDefault) {
  PackedIdentity packed;
  EXPECT_TRUE(packed.empty());
  EXPECT_EQ(packed.Unpack(), Identity{});
  EXPECT_FALSE(PackedIdentity(Identity{}).empty());
  EXPECT_EQ(PackedIdentity(Identity{}).Unpack(), Identity{});
}

TEST(PackedIdentity, RoundTripsEveryField) {
  Identity id;
  id.kind = Identity::Kind::kServiceAccount;
  id.user = "system:serviceaccount:team-a:operator";
  id.sa_namespace = "team-a";
  id.sa_name = "operator";
  id.pod_name = "operator-7d9f8";
  id.user_agent = std::string(300, 'u') + "/v1.2.3";  // long: beyond one length byte
  id.groups = {"system:masters", "", "ops"};
  id.system_masters = true;
  id.component = "operator";
  id.component_version = "v1.2.3";
  id.reason = "bound token";
  const PackedIdentity packed(id);
  EXPECT_EQ(packed.Unpack(), id);
  const PackedIdentity copy = packed;  // copies share the bytes
  EXPECT_EQ(copy.Unpack(), id);
}

// Copies share one block (the count and the bytes): a copy allocates nothing, and the block is
// freed with the last copy.
TEST(PackedIdentity, CopiesShareOneBlockFreedWithTheLast) {
  using testing::AllocationsDuring;
  using testing::FreesDuring;
  Identity id;
  id.user = "system:serviceaccount:team-a:operator";
  PackedIdentity packed;
  EXPECT_EQ(AllocationsDuring([&] { packed = PackedIdentity(id); }), 1u);
  PackedIdentity copy;
  EXPECT_EQ(AllocationsDuring([&] {
              copy = packed;
              PackedIdentity& alias = copy;
              copy = alias;  // self-assignment keeps it
            }),
            0u);
  EXPECT_EQ(FreesDuring([&] { packed = PackedIdentity(); }), 0u);  // `copy` still shares it
  EXPECT_EQ(copy.Unpack(), id);
  EXPECT_EQ(FreesDuring([&] { copy = PackedIdentity(); }), 1u);
  EXPECT_TRUE(copy.empty());
}

TEST(PackedIdentity, RoundTripsRandomIdentities) {
  std::mt19937 rng(7);
  auto text = [&] {
    std::string s(rng() % 40, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 256);  // any byte, NUL included
    return s;
  };
  for (int i = 0; i < 1000; ++i) {
    Identity id;
    id.kind = static_cast<Identity::Kind>(rng() % 4);
    id.user = text();
    id.sa_namespace = text();
    id.sa_name = text();
    id.pod_name = text();
    id.user_agent = text();
    for (size_t g = rng() % 4; g > 0; --g) id.groups.push_back(text());
    id.system_masters = rng() % 2;
    id.component = text();
    id.component_version = text();
    id.reason = text();
    ASSERT_EQ(PackedIdentity(id).Unpack(), id) << "identity " << i;
  }
}

}  // namespace
}  // namespace stormwatch
