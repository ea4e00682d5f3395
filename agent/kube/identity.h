// Who sent a request, from its Authorization and User-Agent headers.
//
// Claims are decoded, never verified (DESIGN.md): an attacker can forge any claim, so an
// identity here is "what the client says it is"; the response code (401) tells whether the
// apiserver agreed. The credential itself is never stored, returned or logged: unknown
// bearer tokens are named by a keyed hash (SipHash-2-4 under a 128-bit key drawn from
// std::random_device once per process), so names are stable within one agent run, differ
// between runs, and cannot be checked against a guessed token outside this process.
#pragma once

#include <absl/numeric/int128.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "agent/core/request_record.h"

namespace stormwatch {

// Longest Authorization value decoded; longer ones are kUnknown (a bound token is ~1 KiB).
inline constexpr size_t kMaxTokenBytes = 16 * 1024;
// Longest user agent kept (it becomes a label value).
inline constexpr size_t kMaxUserAgentBytes = 256;

// Maps credentials to an Identity:
//  - no Authorization (or only whitespace): kAnonymous "system:anonymous". The request may
//    still carry a client certificate, which the capture layer sees and this does not.
//  - "Bearer <JWT>": a bound service-account token (claim "kubernetes.io") or a legacy
//    secret-based one (iss "kubernetes/serviceaccount") gives kServiceAccount; any other
//    JWT with email or sub gives kUser ("email", else "iss#sub" as the OIDC authenticator
//    names users without a prefix).
//  - "Bearer <id>.<secret>" in bootstrap-token form: kUser "system:bootstrap:<id>".
//  - any other bearer: kUnknown, user "token:<12 hex of the keyed hash>".
//  - anything malformed (bad base64, not a JSON object, claims of the wrong type, too
//    long, another scheme): kUnknown with `reason`; never throws.
Identity IdentityFromHeaders(std::string_view authorization, std::string_view user_agent);

// The `client` label: who an operator can act on ("unknown" when nobody is named).
const std::string& ClientLabel(const Identity& identity);

// The keyed 64-bit hash of "token:" names (SipHash-2-4 under a per-process key): a PRF, since
// its values leave the process in labels and must tell nothing of the token.
uint64_t KeyedHash(std::string_view data);

// The keyed 64-bit hash of the agent's own tables (record keys, client keys: HashFields):
// XXH3-64 under a 192-byte secret drawn once per process, a third of SipHash-2-4's
// instructions over a short name. Its values never leave the process (names that do, such as
// "token:...", use KeyedHash); without the secret nobody can aim two names at one key.
uint64_t TableHash(std::string_view data);

// The identity cache's key for one (authorization, user agent) pair: XXH3-128 of the token under
// TableHash's secret, with TableHash of the user agent folded in. It never leaves the process,
// so a fast keyed hash suffices: a third of SipHash's instructions over a ~1.2 KiB token; 128
// bits put an accidental collision of two clients' tokens out of reach, and without the secret
// nobody can aim one at another client's headers.
absl::uint128 CredentialKey(std::string_view authorization, std::string_view user_agent);

// The fingerprint a connection's last authenticated credential is remembered by
// (agent/pipeline/connection_credentials.h): TableHash-keyed, of the token's length, its last 32
// bytes and the user agent; 0 (never remembered) unless `authorization` is "Bearer " and a JWS
// (header.payload.signature, the header a JSON object) whose signature segment holds those 32
// bytes (at least 43 characters: 256 bits and more). Two JWTs a server accepted end alike only
// if their signatures do, and a signature is over its header and payload: among accepted tokens
// the last 32 bytes tell one from another (a chance match of 192 signature bits aside). A
// refused token may end as an accepted one does; the caller confines that to one connection,
// whose accepted token then names it. ~380 instructions per request where CredentialKey takes
// ~1,360 (the whole token hashed).
uint64_t CredentialFingerprint(std::string_view authorization, std::string_view user_agent);

// SipHash-2-4 of `data` under the key (k0, k1), little-endian as in the reference code.
uint64_t SipHash24(uint64_t k0, uint64_t k1, std::string_view data);

// Base64url (RFC 4648 §5) decoding, padding optional; false on any other character.
// Exposed for tests. The caller owns (and should wipe) `out`.
bool Base64UrlDecode(std::string_view in, std::string& out);

}  // namespace stormwatch
