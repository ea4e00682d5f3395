// Identity from Authorization + User-Agent. Tokens are built here; none is ever valid.
#include "agent/kube/identity.h"
#include "tests/unit/base64url.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace stormwatch {
namespace {

const char kHeader[] = R"({"alg":"RS256","kid":"k1"})";

std::string Jwt(std::string_view payload_json) {
  return Base64UrlEncode(kHeader) + "." + Base64UrlEncode(payload_json) + "." +
         Base64UrlEncode("not-a-real-signature-0123456789");
}

const char kBoundClaims[] = R"({
  "aud": ["https://kubernetes.default.svc"], "exp": 1900000000, "iat": 1700000000,
  "iss": "https://kubernetes.default.svc", "sub": "system:serviceaccount:data:datajob-operator",
  "kubernetes.io": {
    "namespace": "data",
    "pod": {"name": "datajob-operator-7d9f8-x2x4q", "uid": "6f1c0a0e-0000-4000-8000-000000000001"},
    "serviceaccount": {"name": "datajob-operator", "uid": "6f1c0a0e-0000-4000-8000-000000000002"},
    "warnafter": 1700003607
  }
})";

const char kLegacyClaims[] = R"({
  "iss": "kubernetes/serviceaccount",
  "kubernetes.io/serviceaccount/namespace": "monitoring",
  "kubernetes.io/serviceaccount/secret.name": "agent-token-abcde",
  "kubernetes.io/serviceaccount/service-account.name": "agent",
  "kubernetes.io/serviceaccount/service-account.uid": "6f1c0a0e-0000-4000-8000-000000000003",
  "sub": "system:serviceaccount:monitoring:agent"
})";

// No field of an Identity may contain the credential or its payload.
void ExpectNoSecret(const Identity& id, const std::string& token) {
  std::vector<std::string> secrets = {token};
  size_t dot1 = token.find('.');
  size_t dot2 = dot1 == std::string::npos ? std::string::npos : token.find('.', dot1 + 1);
  if (dot2 != std::string::npos) secrets.push_back(token.substr(dot1 + 1, dot2 - dot1 - 1));
  for (const std::string* field :
       {&id.user, &id.sa_namespace, &id.sa_name, &id.pod_name, &id.user_agent, &id.reason}) {
    for (const std::string& secret : secrets) {
      if (secret.size() < 8) continue;
      EXPECT_EQ(field->find(secret), std::string::npos) << "leaked into: " << *field;
    }
  }
}

TEST(IdentityTest, BoundServiceAccountToken) {
  std::string token = Jwt(kBoundClaims);
  Identity id =
      IdentityFromHeaders("Bearer " + token, "manager/v0.0.0 (linux/amd64) kubernetes/$Format");
  EXPECT_EQ(id.kind, Identity::Kind::kServiceAccount);
  EXPECT_EQ(id.user, "system:serviceaccount:data:datajob-operator");
  EXPECT_EQ(id.sa_namespace, "data");
  EXPECT_EQ(id.sa_name, "datajob-operator");
  EXPECT_EQ(id.pod_name, "datajob-operator-7d9f8-x2x4q");
  EXPECT_EQ(id.user_agent, "manager/v0.0.0 (linux/amd64) kubernetes/$Format");
  ExpectNoSecret(id, token);
}

TEST(IdentityTest, BoundTokenWithoutPod) {
  std::string token = Jwt(R"({"sub":"system:serviceaccount:a:b",
      "kubernetes.io":{"namespace":"a","serviceaccount":{"name":"b","uid":"u"}}})");
  Identity id = IdentityFromHeaders("Bearer " + token, "");
  EXPECT_EQ(id.kind, Identity::Kind::kServiceAccount);
  EXPECT_EQ(id.user, "system:serviceaccount:a:b");
  EXPECT_EQ(id.pod_name, "");
}

TEST(IdentityTest, LegacySecretToken) {
  std::string token = Jwt(kLegacyClaims);
  Identity id = IdentityFromHeaders("Bearer " + token, "agent/1.0");
  EXPECT_EQ(id.kind, Identity::Kind::kServiceAccount);
  EXPECT_EQ(id.user, "system:serviceaccount:monitoring:agent");
  EXPECT_EQ(id.sa_namespace, "monitoring");
  EXPECT_EQ(id.sa_name, "agent");
  EXPECT_EQ(id.pod_name, "");
  ExpectNoSecret(id, token);
}

TEST(IdentityTest, SchemeIsCaseInsensitiveAndHeaderTrimmed) {
  std::string token = Jwt(kBoundClaims);
  for (std::string header : {"bearer " + token, "BEARER " + token, "  Bearer " + token + " \t",
                             "Bearer " + token + " trailing"}) {
    Identity id = IdentityFromHeaders(header, "");
    EXPECT_EQ(id.kind, Identity::Kind::kServiceAccount) << header.substr(0, 12);
  }
}

TEST(IdentityTest, OidcUser) {
  Identity by_email = IdentityFromHeaders(
      "Bearer " +
          Jwt(R"({"iss":"https://dex.example.com","sub":"Cg1","email":"jane@example.com"})"),
      "kubectl/v1.28.7");
  EXPECT_EQ(by_email.kind, Identity::Kind::kUser);
  EXPECT_EQ(by_email.user, "jane@example.com");
  Identity by_sub =
      IdentityFromHeaders("Bearer " + Jwt(R"({"iss":"https://dex.example.com","sub":"Cg1"})"), "");
  EXPECT_EQ(by_sub.kind, Identity::Kind::kUser);
  EXPECT_EQ(by_sub.user, "https://dex.example.com#Cg1");
  Identity sub_only = IdentityFromHeaders("Bearer " + Jwt(R"({"sub":"alice"})"), "");
  EXPECT_EQ(sub_only.user, "alice");
}

TEST(IdentityTest, ServiceAccountSubjectWithoutPrivateClaim) {
  Identity id = IdentityFromHeaders(
      "Bearer " + Jwt(R"({"iss":"https://oidc.example","sub":"system:serviceaccount:ns:sa"})"), "");
  EXPECT_EQ(id.kind, Identity::Kind::kServiceAccount);
  EXPECT_EQ(id.sa_namespace, "ns");
  EXPECT_EQ(id.sa_name, "sa");
}

TEST(IdentityTest, Anonymous) {
  for (std::string_view header : {"", "   ", "\t"}) {
    Identity id = IdentityFromHeaders(header, "curl/8.0");
    EXPECT_EQ(id.kind, Identity::Kind::kAnonymous);
    EXPECT_EQ(id.user, "system:anonymous");
    EXPECT_EQ(id.user_agent, "curl/8.0");
  }
}

TEST(IdentityTest, BootstrapToken) {
  Identity id = IdentityFromHeaders("Bearer abcdef.0123456789abcdef", "kubeadm");
  EXPECT_EQ(id.kind, Identity::Kind::kUser);
  EXPECT_EQ(id.user, "system:bootstrap:abcdef");
  ExpectNoSecret(id, "0123456789abcdef");
}

TEST(IdentityTest, OpaqueBearerIsHashed) {
  const std::string token = "s3cr3t-static-token-value-0001";
  Identity a = IdentityFromHeaders("Bearer " + token, "");
  Identity b = IdentityFromHeaders("Bearer " + token, "other-agent");
  Identity c = IdentityFromHeaders("Bearer s3cr3t-static-token-value-0002", "");
  EXPECT_EQ(a.kind, Identity::Kind::kUnknown);
  ASSERT_EQ(a.user.size(), std::string("token:").size() + 12);
  EXPECT_EQ(a.user.rfind("token:", 0), 0u);
  EXPECT_EQ(a.user.find_first_not_of("0123456789abcdef", 6), std::string::npos);
  EXPECT_EQ(a.user, b.user);  // stable within the process
  EXPECT_NE(a.user, c.user);
  EXPECT_FALSE(a.reason.empty());
  ExpectNoSecret(a, token);
}

TEST(IdentityTest, MalformedTokensAreUnknownWithReason) {
  const std::string huge_payload = "{\"sub\":\"" + std::string(20000, 'a') + "\"}";
  struct Case {
    const char* what;
    std::string header;
  };
  std::vector<Case> cases = {
      {"bad base64 payload", "Bearer " + Base64UrlEncode(kHeader) + ".%%%%.sig"},
      {"bad base64 char in payload", "Bearer " + Base64UrlEncode(kHeader) + ".ab+c.sig"},
      {"lone sextet", "Bearer " + Base64UrlEncode(kHeader) + ".abcde.sig"},
      {"two segments", "Bearer " + Base64UrlEncode(kHeader) + "." + Base64UrlEncode(kBoundClaims)},
      {"four segments", "Bearer " + Jwt(kBoundClaims) + ".x"},
      {"empty payload", "Bearer " + Base64UrlEncode(kHeader) + "..sig"},
      {"huge token", "Bearer " + Jwt(huge_payload)},
      {"payload not JSON", "Bearer " + Jwt("this is not json")},
      {"truncated JSON", "Bearer " + Jwt(R"({"sub":"system:serviceaccount:a:b")")},
      {"JSON array", "Bearer " + Jwt(R"(["system:serviceaccount:a:b"])")},
      {"JSON string", "Bearer " + Jwt(R"("system:serviceaccount:a:b")")},
      {"JSON number", "Bearer " + Jwt("42")},
      {"deep nesting", "Bearer " + Jwt(std::string(5000, '[') + std::string(5000, ']'))},
      {"kubernetes.io not object", "Bearer " + Jwt(R"({"kubernetes.io":"data"})")},
      {"namespace not string",
       "Bearer " + Jwt(R"({"kubernetes.io":{"namespace":7,"serviceaccount":{"name":"b"}}})")},
      {"serviceaccount not object",
       "Bearer " + Jwt(R"({"kubernetes.io":{"namespace":"a","serviceaccount":["b"]}})")},
      {"sa name not string",
       "Bearer " + Jwt(R"({"kubernetes.io":{"namespace":"a","serviceaccount":{"name":true}}})")},
      {"pod not object", "Bearer " + Jwt(R"({"kubernetes.io":{"namespace":"a",)"
                                         R"("serviceaccount":{"name":"b"},"pod":"p"}})")},
      {"pod name not string",
       "Bearer " + Jwt(R"({"kubernetes.io":{"namespace":"a",)"
                       R"("serviceaccount":{"name":"b"},"pod":{"name":1}}})")},
      {"bound without namespace",
       "Bearer " + Jwt(R"({"kubernetes.io":{"serviceaccount":{"name":"b"}}})")},
      {"names with bad characters",
       "Bearer " + Jwt(R"({"kubernetes.io":{"namespace":"A B","serviceaccount":{"name":"b"}}})")},
      {"legacy without name",
       "Bearer " +
           Jwt(R"({"iss":"kubernetes/serviceaccount","kubernetes.io/serviceaccount/namespace":"a"})")},
      {"legacy claim wrong type",
       "Bearer " + Jwt(R"({"kubernetes.io/serviceaccount/namespace":["a"],)"
                       R"("kubernetes.io/serviceaccount/service-account.name":"b"})")},
      {"sub wrong type", "Bearer " + Jwt(R"({"sub":{"x":1}})")},
      {"email wrong type", "Bearer " + Jwt(R"({"sub":"a","email":5})")},
      {"iss wrong type", "Bearer " + Jwt(R"({"sub":"a","iss":[]})")},
      {"no sub or email", "Bearer " + Jwt(R"({"iss":"https://x"})")},
      {"control characters in sub", "Bearer " + Jwt("{\"sub\":\"a\\u0001b\"}")},
      {"invalid UTF-8", "Bearer " + Jwt("{\"sub\":\"\xff\xfe\"}")},
      {"empty bearer", "Bearer "},
      {"bearer with two spaces", "Bearer  " + Jwt(kBoundClaims)},
      {"basic auth", "Basic YWRtaW46cGFzc3dvcmQ="},
      {"over 16 KiB", "Bearer " + std::string(kMaxTokenBytes, 'x')},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Identity id;
    ASSERT_NO_THROW(id = IdentityFromHeaders(c.header, "ua"));
    EXPECT_EQ(id.kind, Identity::Kind::kUnknown);
    EXPECT_FALSE(id.reason.empty());
    EXPECT_EQ(id.user.rfind("token:", 0), 0u) << id.user;
    EXPECT_EQ(id.sa_namespace, "");
    EXPECT_EQ(id.sa_name, "");
    EXPECT_EQ(id.pod_name, "");
    std::string credential = c.header.size() > 7 ? c.header.substr(7) : c.header;
    ExpectNoSecret(id, credential);
  }
}

// A value without a scheme is the credential itself: its first word must not reach the reason
// (which is exported); only registered scheme names are named.
TEST(IdentityTest, SchemeOnlyNamedWhenRegistered) {
  struct Case {
    std::string header;
    std::string reason;
  } cases[] = {
      {"s3cr3tT0ken12345", "authorization value has no scheme"},
      {"s3cr3tT0ken12345 more", "unrecognized authorization scheme (not Bearer)"},
      {"basic YWRtaW46cGFzc3dvcmQ=", "authorization scheme Basic is not Bearer"},
      {"Negotiate abc", "authorization scheme Negotiate is not Bearer"},
  };
  for (const Case& c : cases) {
    Identity id = IdentityFromHeaders(c.header, "ua");
    EXPECT_EQ(id.kind, Identity::Kind::kUnknown) << c.header;
    EXPECT_EQ(id.reason, c.reason) << c.header;
    EXPECT_EQ(id.reason.find("s3cr3t"), std::string::npos);
  }
}

TEST(IdentityTest, UserAgentIsCapped) {
  Identity id = IdentityFromHeaders("", std::string(1000, 'u'));
  EXPECT_EQ(id.user_agent.size(), kMaxUserAgentBytes);
}

TEST(IdentityTest, Base64Url) {
  std::string out;
  EXPECT_TRUE(Base64UrlDecode("aGVsbG8", out));
  EXPECT_EQ(out, "hello");
  EXPECT_TRUE(Base64UrlDecode("aGVsbG8=", out));
  EXPECT_EQ(out, "hello");
  EXPECT_TRUE(Base64UrlDecode("_-8", out));
  EXPECT_EQ(out, "\xff\xef");
  EXPECT_TRUE(Base64UrlDecode("", out));
  EXPECT_EQ(out, "");
  EXPECT_FALSE(Base64UrlDecode("aGV+bG8", out));
  EXPECT_FALSE(Base64UrlDecode("a", out));
  for (const char* s : {"", "f", "fo", "foo", "foob", "fooba", "foobar"}) {
    EXPECT_TRUE(Base64UrlDecode(Base64UrlEncode(s), out));
    EXPECT_EQ(out, s);
  }
}

// RFC 4648 section 10's vectors, in the URL-safe alphabet without padding (as JWTs carry them),
// both ways: the test's encoder and the agent's decoder.
TEST(IdentityTest, Base64UrlReferenceVectors) {
  const std::pair<std::string, std::string> vectors[] = {
      {"", ""},         {"f", "Zg"},        {"fo", "Zm8"},         {"foo", "Zm9v"},
      {"foob", "Zm9vYg"}, {"fooba", "Zm9vYmE"}, {"foobar", "Zm9vYmFy"}, {"\xfb\xff", "-_8"}};
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(Base64UrlEncode(plain), encoded);
    std::string out;
    EXPECT_TRUE(Base64UrlDecode(encoded, out)) << encoded;
    EXPECT_EQ(out, plain);
  }
  std::string out;
  EXPECT_FALSE(Base64UrlDecode("Zm9v/w", out));  // the standard alphabet's '/' is not URL-safe
  EXPECT_FALSE(Base64UrlDecode("Zm 9v", out));
  EXPECT_TRUE(out.empty());
}

TEST(IdentityTest, SipHashReferenceVectors) {
  // From the SipHash paper's reference implementation (vectors.h): key 00..0f, input
  // 00..(n-1).
  const uint64_t k0 = 0x0706050403020100ULL, k1 = 0x0f0e0d0c0b0a0908ULL;
  std::string input;
  EXPECT_EQ(SipHash24(k0, k1, input), 0x726fdb47dd0e0e31ULL);
  input.push_back('\0');
  EXPECT_EQ(SipHash24(k0, k1, input), 0x74f839c593dc67fdULL);
  for (int i = 1; i < 8; ++i) input.push_back(static_cast<char>(i));
  EXPECT_EQ(SipHash24(k0, k1, input), 0x93f5f5799a932462ULL);
  for (int i = 8; i < 15; ++i) input.push_back(static_cast<char>(i));
  EXPECT_EQ(SipHash24(k0, k1, input), 0xa129ca6149be45e5ULL);
}

// The identity cache's key: every byte of either header counts, and so does where one header
// ends (the same bytes split differently are another client).
TEST(IdentityTest, CredentialKeyTellsEveryByteAndTheSplit) {
  const std::string token = "Bearer " + Jwt(kBoundClaims);
  const std::string agent = "datajob-operator/v1.4.2 (linux/amd64) kubernetes/$Format";
  const absl::uint128 key = CredentialKey(token, agent);
  EXPECT_EQ(CredentialKey(token, agent), key);
  for (size_t i = 0; i < token.size(); ++i) {
    std::string changed = token;
    changed[i] ^= 0x01;
    ASSERT_NE(CredentialKey(changed, agent), key) << "byte " << i << " of " << token.size();
  }
  for (size_t i = 0; i < agent.size(); ++i) {
    std::string changed = agent;
    changed[i] ^= 0x01;
    ASSERT_NE(CredentialKey(token, changed), key) << "user agent byte " << i;
  }
  EXPECT_NE(CredentialKey(token + "x", agent), key);
  EXPECT_NE(CredentialKey("Bearer ab", "c"), CredentialKey("Bearer a", "bc"));
  EXPECT_NE(CredentialKey("", agent), CredentialKey(agent, ""));
}

// The connections' memo of authenticated credentials: only a bearer JWS whose signature segment
// holds the last 32 bytes gets a fingerprint; it tells the token's length, each of those bytes and
// the user agent, and (by design) not the rest of the token.
TEST(IdentityTest, CredentialFingerprintOnlyForAJwsAndTellsItsEnd) {
  const std::string signature = Base64UrlEncode(std::string(256, '\x5a'));  // RS256's size
  const std::string jws = Base64UrlEncode(kHeader) + "." + Base64UrlEncode(kBoundClaims) + "." + signature;
  const std::string token = "Bearer " + jws;
  const std::string agent = "datajob-operator/v1.4.2 (linux/amd64) kubernetes/$Format";
  const uint64_t fingerprint = CredentialFingerprint(token, agent);
  ASSERT_NE(fingerprint, 0u);
  EXPECT_EQ(CredentialFingerprint(token, agent), fingerprint);
  // Each of the last 32 bytes, the length and the user agent tell one credential from another.
  for (size_t i = token.size() - 32; i < token.size(); ++i) {
    std::string changed = token;
    changed[i] ^= 0x01;
    ASSERT_NE(CredentialFingerprint(changed, agent), fingerprint) << "byte " << i;
  }
  std::string longer = token;
  longer.insert(40, "A");  // the same last 32 bytes, one more before them
  EXPECT_NE(CredentialFingerprint(longer, agent), fingerprint);
  EXPECT_NE(CredentialFingerprint(token, agent + " "), fingerprint);
  // User agents at and past the 256 bytes hashed with the token's end in one go (longer ones
  // are hashed first): each still tells its credentials apart, its last byte included.
  for (size_t length : {255, 256, 257, 300, 4096}) {
    const std::string long_agent(length, 'u');
    std::string changed_agent = long_agent;
    changed_agent.back() = 'v';
    const uint64_t with_long = CredentialFingerprint(token, long_agent);
    EXPECT_NE(with_long, 0u) << length;
    EXPECT_EQ(CredentialFingerprint(token, long_agent), with_long) << length;
    EXPECT_NE(CredentialFingerprint(token, changed_agent), with_long) << length;
    EXPECT_NE(CredentialFingerprint(token, long_agent + "u"), with_long) << length;
    EXPECT_NE(with_long, fingerprint) << length;
  }
  // No user-agent header: an empty view (no data pointer), its own fingerprint.
  const uint64_t without_agent = CredentialFingerprint(token, std::string_view());
  EXPECT_NE(without_agent, 0u);
  EXPECT_NE(without_agent, fingerprint);
  EXPECT_EQ(CredentialFingerprint(token, ""), without_agent);
  // The payload is not read: what tells accepted tokens apart is their signature.
  std::string other_payload = token;
  other_payload[40] ^= 0x01;
  EXPECT_EQ(CredentialFingerprint(other_payload, agent), fingerprint);

  // No fingerprint: not a bearer token, not a JWS, a signature shorter than 43 characters.
  EXPECT_EQ(CredentialFingerprint("Basic " + jws, agent), 0u);
  EXPECT_EQ(CredentialFingerprint("bearer " + jws, agent), 0u);
  EXPECT_EQ(CredentialFingerprint("Bearer " + std::string(400, 'a'), agent), 0u);  // opaque
  EXPECT_EQ(CredentialFingerprint("Bearer " + std::string(200, 'a') + "." + signature, agent), 0u);
  EXPECT_EQ(CredentialFingerprint("Bearer " + Jwt(kBoundClaims), agent), 0u);  // 42-character signature
  EXPECT_EQ(CredentialFingerprint("Bearer abcdef.0123456789abcdef", agent), 0u);  // bootstrap token
  EXPECT_EQ(CredentialFingerprint("", agent), 0u);
  EXPECT_EQ(CredentialFingerprint("Bearer v2.local." + std::string(200, 'a'), agent), 0u);  // PASETO
  EXPECT_EQ(CredentialFingerprint("Bearer a.b." + std::string(43, 'c'), agent), 0u);  // no JSON header
  EXPECT_NE(CredentialFingerprint("Bearer eyJ.b." + std::string(43, 'c'), agent), 0u);
}

}  // namespace
}  // namespace stormwatch
