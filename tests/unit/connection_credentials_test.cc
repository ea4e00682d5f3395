// Each connection's last authenticated credential: found only for its own connection, process
// and fingerprint; one per slot; dropped with its process.
#include "agent/pipeline/connection_credentials.h"

#include <gtest/gtest.h>

namespace stormwatch {
namespace {

IdentityRef Named(const std::string& user) {
  Identity id;
  id.user = user;
  return IdentityRef::Make(std::move(id));
}

TEST(ConnectionCredentials, FoundOnlyForItsConnectionProcessAndFingerprint) {
  ConnectionCredentials credentials(64);
  const IdentityRef operator_sa = Named("system:serviceaccount:ops:operator");
  EXPECT_EQ(credentials.Find(42, 0xc000100000, 7), nullptr);
  credentials.Remember(42, 0xc000100000, 7, operator_sa);
  ASSERT_NE(credentials.Find(42, 0xc000100000, 7), nullptr);
  EXPECT_EQ(*credentials.Find(42, 0xc000100000, 7), operator_sa);  // the same shared identity
  EXPECT_EQ(credentials.Find(42, 0xc000100000, 8), nullptr);  // another credential
  EXPECT_EQ(credentials.Find(42, 0xc000200000, 7), nullptr);  // another connection
  EXPECT_EQ(credentials.Find(43, 0xc000100000, 7), nullptr);  // another process
  EXPECT_EQ(credentials.size(), 1u);
  // A rotated token on the same connection takes the entry's place.
  const IdentityRef rotated = Named("system:serviceaccount:ops:operator (rotated)");
  credentials.Remember(42, 0xc000100000, 9, rotated);
  EXPECT_EQ(credentials.Find(42, 0xc000100000, 7), nullptr);
  EXPECT_EQ(*credentials.Find(42, 0xc000100000, 9), rotated);
  EXPECT_EQ(credentials.size(), 1u);
  // A fingerprint of 0 (no JWS) is never remembered nor found.
  credentials.Remember(42, 0xc000300000, 0, operator_sa);
  EXPECT_EQ(credentials.Find(42, 0xc000300000, 0), nullptr);
  EXPECT_EQ(credentials.size(), 1u);
}

TEST(ConnectionCredentials, BoundedByItsSlotsAndForgottenWithTheProcess) {
  ConnectionCredentials credentials(100);
  ASSERT_EQ(credentials.slots(), 128u);
  const IdentityRef someone = Named("someone");
  for (uint64_t conn = 0; conn < 10'000; ++conn) {
    credentials.Remember(conn % 2 ? 1 : 2, 0xc000000000 + conn * 0x180, conn + 1, someone);
  }
  EXPECT_LE(credentials.size(), 128u);
  EXPECT_GE(credentials.size(), 100u);  // spread over the slots, not piled into a few
  // The last one is always found: a newer connection takes its slot.
  ASSERT_NE(credentials.Find(1, 0xc000000000 + 9'999 * 0x180, 10'000), nullptr);
  credentials.ForgetProcess(1);
  EXPECT_EQ(credentials.Find(1, 0xc000000000 + 9'999 * 0x180, 10'000), nullptr);
  const size_t left = credentials.size();
  EXPECT_GT(left, 0u);  // process 2's
  credentials.ForgetProcess(2);
  EXPECT_EQ(credentials.size(), 0u);
  ConnectionCredentials one(0);
  EXPECT_EQ(one.slots(), 1u);
  one.Remember(1, 2, 3, someone);
  EXPECT_NE(one.Find(1, 2, 3), nullptr);
  EXPECT_EQ(one.Find(1, 5, 3), nullptr);  // in the same slot: another connection
  EXPECT_EQ(one.Find(9, 2, 3), nullptr);  // another process's connection at that address
}

}  // namespace
}  // namespace stormwatch
