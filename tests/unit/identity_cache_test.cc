// The identity cache: one decode per distinct (authorization, user agent), and never one
// client's identity for another's headers, however alike their tokens are.
#include "agent/pipeline/request_pipeline.h"
#include "tests/unit/base64url.h"

#include <gtest/gtest.h>

#include <string>

namespace stormwatch {
namespace {

// Two bound service-account tokens that differ only near their end: the pod's name is the
// last claim, and the signature is the same.
std::string BoundToken(std::string_view pod) {
  const std::string claims =
      R"({"iss":"https://kubernetes.default.svc","sub":"system:serviceaccount:data:worker",)"
      R"("kubernetes.io":{"namespace":"data","serviceaccount":{"name":"worker"},)"
      R"("pod":{"name":")" + std::string(pod) + R"("}}})";
  return "Bearer " + Base64UrlEncode(R"({"alg":"RS256"})") + "." + Base64UrlEncode(claims) + "." +
         Base64UrlEncode("one-signature-for-both");
}

TEST(IdentityCache, TokensAlikeButForTheirLastBytesAreTwoClients) {
  IdentityCache cache(16);
  const std::string a = BoundToken("worker-a"), b = BoundToken("worker-b");
  ASSERT_EQ(a.size(), b.size());
  const std::string agent = "worker/1.0";
  const IdentityRef first = cache.Resolve(a, agent);
  const IdentityRef second = cache.Resolve(b, agent);
  EXPECT_EQ(first->pod_name, "worker-a");
  EXPECT_EQ(second->pod_name, "worker-b");
  EXPECT_EQ(cache.Resolve(a, agent), first);  // the same shared identity, not decoded again
  EXPECT_EQ(cache.Resolve(b, agent), second);
  EXPECT_EQ(cache.misses(), 2u);
  EXPECT_EQ(cache.hits(), 2u);
  // The same token from another program is another client (its user agent is part of it).
  EXPECT_EQ(cache.Resolve(a, "kubectl/v1.31.0")->user_agent, "kubectl/v1.31.0");
  EXPECT_EQ(cache.misses(), 3u);
}

}  // namespace
}  // namespace stormwatch
