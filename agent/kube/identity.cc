#include "agent/kube/identity.h"

#include <sodium.h>
// Inlined: TableHash hashes a few short keys per request (tens of bytes), where the library
// call's dispatch and length checks were a sixth of its instructions (callgrind: 206 -> 175 per
// request); the vector code is the compiler's baseline (SSE2), as the library's
// non-dispatching functions are.
#define XXH_INLINE_ALL
#include <xxhash.h>
#include <string.h>  // explicit_bzero

#include <array>
#include <cctype>
#include <cstddef>
#include <cstring>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <vector>

#include "agent/kube/user_agent.h"

namespace stormwatch {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kAnonymousUser = "system:anonymous";
constexpr std::string_view kServiceAccountPrefix = "system:serviceaccount:";
constexpr std::string_view kLegacyIssuer = "kubernetes/serviceaccount";
constexpr std::string_view kLegacyNamespaceClaim = "kubernetes.io/serviceaccount/namespace";
constexpr std::string_view kLegacyNameClaim = "kubernetes.io/serviceaccount/service-account.name";
// Deeper JSON than this is not a token; refusing it keeps parsing cheap and shallow.
constexpr int kMaxJsonDepth = 32;
// Longest user name taken from claims (it becomes a label value).
constexpr size_t kMaxUserBytes = 512;

// Overwrites a buffer that held decoded credential bytes before it is freed.
void Wipe(std::string& s) {
  if (!s.empty()) explicit_bzero(s.data(), s.size());
  s.clear();
}

// Owns decoded credential bytes and wipes them on every exit path.
struct WipedString {
  std::string value;
  ~WipedString() { Wipe(value); }
};

std::string_view TrimSpace(std::string_view s) {
  auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

struct HashKey {
  uint64_t k0;
  uint64_t k1;
};

const HashKey& ProcessKey() {
  static const HashKey key = [] {
    std::random_device rd;
    auto draw64 = [&rd] { return (static_cast<uint64_t>(rd()) << 32) ^ rd(); };
    return HashKey{draw64(), draw64()};
  }();
  return key;
}

std::string TokenName(std::string_view credential) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "token:%012llx",
                static_cast<unsigned long long>(KeyedHash(credential) >> 16));
  return buf;
}

Identity Unknown(std::string_view credential, std::string reason) {
  Identity id;
  id.kind = Identity::Kind::kUnknown;
  id.user = TokenName(credential);
  id.reason = std::move(reason);
  return id;
}

// Plain comparisons: std::isalnum is a call per character (19% of a token's decode).
bool IsBase64UrlChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

// [a-z0-9]{6}.[a-z0-9]{16}: kubeadm bootstrap tokens; the id half is public.
bool IsBootstrapToken(std::string_view token) {
  if (token.size() != 23 || token[6] != '.') return false;
  for (size_t i = 0; i < token.size(); ++i) {
    if (i == 6) continue;
    char c = token[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  }
  return true;
}

// Maximum bracket nesting outside strings; stops early once over the limit.
int JsonDepth(std::string_view s) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '{' || c == '[')
      max_depth = std::max(max_depth, ++depth);
    else if (c == '}' || c == ']')
      --depth;
    if (max_depth > kMaxJsonDepth) break;
  }
  return max_depth;
}

// DNS-1123 style names (namespaces, service accounts, pods): what the apiserver would
// accept; anything else in a claim is forged or garbage.
bool IsObjectName(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) return false;
  }
  return true;
}

// A user name from claims: bounded and printable.
bool IsPrintableName(std::string_view s) {
  if (s.empty() || s.size() > kMaxUserBytes) return false;
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return false;
  }
  return true;
}

// Reads an optional string member; nullopt with `error` set if present but not a string.
std::optional<std::string> StringClaim(const Json& obj, std::string_view key, std::string& error) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) {
    error = "claim " + std::string(key) + " is not a string";
    return std::nullopt;
  }
  return it->get_ref<const std::string&>();
}

Identity ServiceAccount(std::string_view credential, const std::string& ns, const std::string& name,
                        const std::string& pod, std::string reason) {
  if (!IsObjectName(ns) || !IsObjectName(name) || (!pod.empty() && !IsObjectName(pod))) {
    return Unknown(credential, "service-account claims hold invalid names");
  }
  Identity id;
  id.kind = Identity::Kind::kServiceAccount;
  id.user = std::string(kServiceAccountPrefix) + ns + ":" + name;
  id.sa_namespace = ns;
  id.sa_name = name;
  id.pod_name = pod;
  id.reason = std::move(reason);
  return id;
}

// Bound token: "kubernetes.io": {namespace, serviceaccount{name,uid}, pod{name,uid}}.
Identity FromBoundClaims(std::string_view credential, const Json& k8s) {
  if (!k8s.is_object()) return Unknown(credential, "claim kubernetes.io is not an object");
  std::string error;
  auto ns = StringClaim(k8s, "namespace", error);
  if (!error.empty()) return Unknown(credential, error);
  auto sa = k8s.find("serviceaccount");
  if (sa == k8s.end() || !sa->is_object()) {
    return Unknown(credential, "claim kubernetes.io.serviceaccount missing or not an object");
  }
  auto name = StringClaim(*sa, "name", error);
  if (!error.empty()) return Unknown(credential, error);
  std::string pod_name;
  if (auto pod = k8s.find("pod"); pod != k8s.end() && !pod->is_null()) {
    if (!pod->is_object()) return Unknown(credential, "claim kubernetes.io.pod is not an object");
    auto p = StringClaim(*pod, "name", error);
    if (!error.empty()) return Unknown(credential, error);
    pod_name = p.value_or("");
  }
  if (!ns || !name) return Unknown(credential, "bound token without namespace or name");
  return ServiceAccount(credential, *ns, *name, pod_name, "bound service-account token");
}

Identity FromClaims(std::string_view credential, const Json& claims) {
  std::string error;
  if (auto k8s = claims.find("kubernetes.io"); k8s != claims.end()) {
    return FromBoundClaims(credential, *k8s);
  }
  auto iss = StringClaim(claims, "iss", error);
  if (!error.empty()) return Unknown(credential, error);
  auto legacy_ns = StringClaim(claims, kLegacyNamespaceClaim, error);
  if (!error.empty()) return Unknown(credential, error);
  auto legacy_name = StringClaim(claims, kLegacyNameClaim, error);
  if (!error.empty()) return Unknown(credential, error);
  if (iss == kLegacyIssuer || legacy_ns || legacy_name) {
    if (!legacy_ns || !legacy_name) {
      return Unknown(credential, "legacy service-account token without namespace or name");
    }
    return ServiceAccount(credential, *legacy_ns, *legacy_name, "",
                          "legacy secret-based service-account token");
  }

  auto sub = StringClaim(claims, "sub", error);
  if (!error.empty()) return Unknown(credential, error);
  // A service-account subject without the private claim (e.g. a re-issued token).
  if (sub && sub->starts_with(kServiceAccountPrefix)) {
    std::string_view rest = std::string_view(*sub).substr(kServiceAccountPrefix.size());
    size_t colon = rest.find(':');
    if (colon != std::string_view::npos) {
      return ServiceAccount(credential, std::string(rest.substr(0, colon)),
                            std::string(rest.substr(colon + 1)), "",
                            "service-account subject without kubernetes.io claim");
    }
  }
  auto email = StringClaim(claims, "email", error);
  if (!error.empty()) return Unknown(credential, error);
  std::string user;
  if (email && !email->empty()) {
    user = *email;
  } else if (sub && !sub->empty()) {
    user = (iss && !iss->empty()) ? *iss + "#" + *sub : *sub;
  } else {
    return Unknown(credential, "JWT without sub or email");
  }
  if (!IsPrintableName(user)) return Unknown(credential, "JWT user name too long or unprintable");
  Identity id;
  id.kind = Identity::Kind::kUser;
  id.user = std::move(user);
  id.reason = "JWT (not a service-account token)";
  return id;
}

Identity FromJwt(std::string_view token) {
  size_t dot1 = token.find('.');
  size_t dot2 = token.find('.', dot1 + 1);
  std::string_view payload_b64 = token.substr(dot1 + 1, dot2 - dot1 - 1);
  WipedString payload;
  if (payload_b64.empty() || !Base64UrlDecode(payload_b64, payload.value)) {
    return Unknown(token, "JWT payload is not base64url");
  }
  if (JsonDepth(payload.value) > kMaxJsonDepth) {
    return Unknown(token, "JWT payload nested too deeply");
  }
  Json claims = Json::parse(payload.value, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (claims.is_discarded()) return Unknown(token, "JWT payload is not JSON");
  if (!claims.is_object()) return Unknown(token, "JWT payload is not a JSON object");
  return FromClaims(token, claims);
}

// Three dot-separated segments of base64url characters.
bool LooksLikeJwt(std::string_view token) {
  int dots = 0;
  for (char c : token) {
    if (c == '.') {
      ++dots;
    } else if (!IsBase64UrlChar(c) && c != '=') {
      return false;
    }
  }
  return dots == 2;
}

Identity FromAuthorization(std::string_view authorization) {
  // As the apiserver's bearer-token authenticator reads the header.
  std::string_view auth = TrimSpace(authorization);
  if (auth.empty()) {
    Identity id;
    id.kind = Identity::Kind::kAnonymous;
    id.user = std::string(kAnonymousUser);
    id.reason = "no Authorization header";
    return id;
  }
  if (auth.size() > kMaxTokenBytes) return Unknown(auth, "credential longer than 16 KiB");
  size_t space = auth.find(' ');
  std::string_view scheme = auth.substr(0, space);
  if (!EqualsIgnoreCase(scheme, "bearer")) {
    if (space == std::string_view::npos) return Unknown(auth, "authorization value has no scheme");
    // Only a registered scheme name is shown: the first word of a malformed value may be the
    // secret itself, and the reason is exported.
    static constexpr std::string_view kKnownSchemes[] = {
        "Basic", "Digest", "Negotiate", "NTLM", "Token", "HOBA", "Mutual", "OAuth",
        "SCRAM-SHA-1", "SCRAM-SHA-256", "vapid", "AWS4-HMAC-SHA256", "DPoP", "PrivateToken"};
    for (std::string_view known : kKnownSchemes) {
      if (EqualsIgnoreCase(scheme, known)) {
        return Unknown(auth, "authorization scheme " + std::string(known) + " is not Bearer");
      }
    }
    return Unknown(auth, "unrecognized authorization scheme (not Bearer)");
  }
  std::string_view rest =
      space == std::string_view::npos ? std::string_view() : auth.substr(space + 1);
  std::string_view token = rest.substr(0, rest.find(' '));
  if (token.empty()) return Unknown(auth, "empty bearer token");
  if (IsBootstrapToken(token)) {
    Identity id;
    id.kind = Identity::Kind::kUser;
    id.user = "system:bootstrap:" + std::string(token.substr(0, 6));
    id.reason = "bootstrap token";
    return id;
  }
  if (LooksLikeJwt(token)) return FromJwt(token);
  Identity id = Unknown(token, "opaque bearer token");
  return id;
}

}  // namespace

namespace {

// SipHash-2-4 with a 16-byte key as the reference code takes it (little-endian k0, k1).
using SipKey = std::array<unsigned char, crypto_shorthash_siphash24_KEYBYTES>;

SipKey SipKeyBytes(uint64_t k0, uint64_t k1) {
  SipKey key;
  for (int i = 0; i < 8; ++i) {
    key[i] = static_cast<unsigned char>(k0 >> (8 * i));
    key[8 + i] = static_cast<unsigned char>(k1 >> (8 * i));
  }
  return key;
}

uint64_t SipHash24(const SipKey& key, std::string_view data) {
  unsigned char out[crypto_shorthash_siphash24_BYTES];
  crypto_shorthash_siphash24(out, reinterpret_cast<const unsigned char*>(data.data()), data.size(),
                             key.data());
  uint64_t h = 0;
  for (int i = 0; i < 8; ++i) h |= static_cast<uint64_t>(out[i]) << (8 * i);
  return h;
}

}  // namespace

uint64_t SipHash24(uint64_t k0, uint64_t k1, std::string_view data) {
  // libsodium's crypto_shorthash_siphash24 is SipHash-2-4; the key and the result are
  // little-endian byte strings, as in the reference code.
  return SipHash24(SipKeyBytes(k0, k1), data);
}

uint64_t KeyedHash(std::string_view data) {
  // The process key's bytes, once: this runs several times per request.
  static const SipKey key = [] {
    const HashKey& k = ProcessKey();
    return SipKeyBytes(k.k0, k.k1);
  }();
  return SipHash24(key, data);
}

namespace {

// The secret of TableHash and CredentialKey, drawn once per process.
const std::array<unsigned char, XXH3_SECRET_DEFAULT_SIZE>& TableSecret() {
  static const std::array<unsigned char, XXH3_SECRET_DEFAULT_SIZE> secret = [] {
    std::array<unsigned char, XXH3_SECRET_DEFAULT_SIZE> bytes;
    std::random_device rd;
    for (unsigned char& b : bytes) b = static_cast<unsigned char>(rd());
    return bytes;
  }();
  return secret;
}

}  // namespace

// libxxhash's SSE2 code on purpose: its run-time dispatch picks AVX-512 where the CPU has it,
// which cut instructions but made the whole loop slower on this machine (cached identities
// 264-274 ns -> 373-406 ns per request, timed side by side).
uint64_t TableHash(std::string_view data) {
  const auto& secret = TableSecret();
  return XXH3_64bits_withSecret(data.data(), data.size(), secret.data(), secret.size());
}

absl::uint128 CredentialKey(std::string_view authorization, std::string_view user_agent) {
  const auto& secret = TableSecret();
  // Each header hashed where it lies (the token is not copied, not even to a buffer of ours);
  // the user agent's 64 bits folded into one half. Two pairs with the same token differ
  // exactly when their user agents' hashes do; two with different tokens, in 128 bits.
  const XXH128_hash_t h =
      XXH3_128bits_withSecret(authorization.data(), authorization.size(), secret.data(), secret.size());
  return absl::MakeUint128(h.high64 ^ TableHash(user_agent), h.low64);
}

uint64_t CredentialFingerprint(std::string_view authorization, std::string_view user_agent) {
  constexpr std::string_view kBearer = "Bearer ";
  constexpr size_t kTail = 32;
  constexpr size_t kMinSignature = 43;  // base64url of 32 bytes (HS256); RS256's is 342
  if (!authorization.starts_with(kBearer)) return 0;
  const std::string_view token = authorization.substr(kBearer.size());
  // A JWS's header is a JSON object: base64url of '{"' is "eyJ". (Not an opaque token or a
  // PASETO, whose last segment could end alike for two clients.)
  if (token.size() < kMinSignature + 5 || !token.starts_with("eyJ")) return 0;
  // The signature segment: after the last '.', with another '.' (header from payload) before.
  const auto* last = static_cast<const char*>(memrchr(token.data(), '.', token.size()));
  if (last == nullptr || token.data() + token.size() - (last + 1) < static_cast<ptrdiff_t>(kMinSignature) ||
      std::memchr(token.data(), '.', static_cast<size_t>(last - token.data())) == nullptr) {
    return 0;
  }
  // One hash over the token's size, its tail and the user agent, laid out in one buffer: a
  // second hash per request for the user agent alone cost ~50 instructions (docs/benchmark.md).
  // A user agent too long for the buffer is hashed first, and the size's top bit (never set in
  // a real size) tells the two layouts apart.
  constexpr size_t kMaxInlineUserAgent = 256;
  struct {
    uint64_t token_size;
    char tail[kTail];
    char user_agent[kMaxInlineUserAgent];
  } fields;
  static_assert(offsetof(decltype(fields), user_agent) == sizeof(uint64_t) + kTail, "no padding hashed");
  std::memcpy(fields.tail, token.data() + token.size() - kTail, kTail);
  size_t used = offsetof(decltype(fields), user_agent);
  if (user_agent.size() <= kMaxInlineUserAgent) {
    fields.token_size = token.size();
    // (No header: an empty view whose data may be null, which memcpy may not be given.)
    if (!user_agent.empty()) std::memcpy(fields.user_agent, user_agent.data(), user_agent.size());
    used += user_agent.size();
  } else {
    fields.token_size = token.size() | uint64_t{1} << 63;
    const uint64_t agent = TableHash(user_agent);
    std::memcpy(fields.user_agent, &agent, sizeof(agent));
    used += sizeof(agent);
  }
  const uint64_t fingerprint = TableHash(std::string_view(reinterpret_cast<const char*>(&fields), used));
  explicit_bzero(fields.tail, sizeof(fields.tail));  // signature bytes: part of a credential
  return fingerprint == 0 ? 1 : fingerprint;          // 0 means "not remembered"
}

bool Base64UrlDecode(std::string_view in, std::string& out) {
  out.clear();
  // JWT segments are unpadded; tolerate padding as Go's decoders used by the apiserver do.
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  if (in.size() % 4 == 1) return false;  // no whole byte in a lone sextet
  out.resize(in.size() * 3 / 4 + 1);
  size_t decoded = 0;
  const char* end = nullptr;
  int rc = sodium_base642bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), in.data(),
                             in.size(), /*ignore=*/nullptr, &decoded, &end,
                             sodium_base64_VARIANT_URLSAFE_NO_PADDING);
  if (rc != 0 || end != in.data() + in.size()) {
    Wipe(out);  // a partly decoded token payload is still a secret
    return false;
  }
  out.resize(decoded);
  return true;
}

Identity IdentityFromHeaders(std::string_view authorization, std::string_view user_agent) {
  // Only allocation failure can throw in here; it must not cross into the caller.
  try {
    Identity id = FromAuthorization(authorization);
    id.user_agent = std::string(user_agent.substr(0, kMaxUserAgentBytes));
    UserAgentInfo ua = ParseUserAgent(id.user_agent);
    id.component = std::move(ua.component);
    id.component_version = std::move(ua.version);
    return id;
  } catch (const std::exception&) {
    // Only allocation failure throws in here. The request still counts, as an unknown client
    // whose reason says so (13 characters: kept inline in the string, no allocation to fail).
    Identity id;
    id.reason = "out of memory";
    return id;
  }
}

const std::string& ClientLabel(const Identity& identity) {
  static const std::string kUnknown = "unknown";
  return identity.user.empty() ? kUnknown : identity.user;
}

}  // namespace stormwatch
