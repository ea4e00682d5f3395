#include "agent/kube/request_info.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <set>

#include <absl/container/inlined_vector.h>

namespace stormwatch {
namespace {

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Splits a request target into raw path and raw query the way Go's url.Parse does
// (fragment dropped, first '?' separates the query).
std::pair<std::string_view, std::string_view> SplitTarget(std::string_view target) {
  if (size_t hash = target.find('#'); hash != std::string_view::npos) {
    target = target.substr(0, hash);
  }
  // Absolute form: skip scheme and authority (an origin-form target, "/...", has neither:
  // nearly every request's).
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.empty() || target[0] == '/') break;
    if (target.size() >= scheme.size() &&
        std::equal(scheme.begin(), scheme.end(), target.begin(), [](char a, char b) {
          return a == std::tolower(static_cast<unsigned char>(b));
        })) {
      std::string_view rest = target.substr(scheme.size());
      size_t slash = rest.find_first_of("/?");
      target = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
      break;
    }
  }
  size_t q = target.find('?');
  if (q == std::string_view::npos) return {target, {}};
  return {target.substr(0, q), target.substr(q + 1)};
}

// splitPath in requestinfo.go: trim every leading and trailing '/', then split on '/'. Views
// into `path`; kept in a small inline buffer, since API paths have at most a few segments.
absl::InlinedVector<std::string_view, 8> SplitPath(std::string_view path) {
  size_t b = path.find_first_not_of('/');
  if (b == std::string_view::npos) return {};
  size_t e = path.find_last_not_of('/');
  path = path.substr(b, e - b + 1);
  absl::InlinedVector<std::string_view, 8> parts;
  size_t start = 0;
  while (true) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) {
      parts.emplace_back(path.substr(start));
      break;
    }
    parts.emplace_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return parts;
}

// First value of `key` among parsed query pairs.
const std::string* FirstValue(const QueryParams& query,
                              std::string_view key) {
  for (const auto& [k, v] : query) {
    if (k == key) return &v;
  }
  return nullptr;
}

// strconv.ParseInt(s, 10, 64) succeeds.
bool ParsesAsInt64(std::string_view s) {
  // Go takes one optional sign; from_chars takes only '-', so strip a '+' by hand.
  if (!s.empty() && s[0] == '+') {
    s.remove_prefix(1);
    if (!s.empty() && s[0] == '-') return false;
  }
  if (s.empty()) return false;
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// k8s.io/apimachinery/pkg/api/validation/path.IsValidPathSegmentName.
bool IsValidPathSegmentName(std::string_view name) {
  if (name == "." || name == "..") return false;
  return name.find('/') == std::string_view::npos && name.find('%') == std::string_view::npos;
}

// Whether metainternalversionscheme.ParameterCodec.DecodeParameters would fail on these
// query values for ListOptions: selectors that do not parse, or integer fields that are
// not integers. Bool and string fields never fail.
bool ListOptionsDecodeFails(const QueryParams& query) {
  if (const std::string* v = FirstValue(query, "labelSelector");
      v && !ValidateLabelSelector(*v).ok()) {
    return true;
  }
  if (const std::string* v = FirstValue(query, "fieldSelector");
      v && !ParseFieldSelector(*v).ok()) {
    return true;
  }
  for (std::string_view int_field : {"limit", "timeoutSeconds"}) {
    if (const std::string* v = FirstValue(query, int_field); v && !ParsesAsInt64(*v)) {
      return true;
    }
  }
  return false;
}

// --- label selector validation (k8s.io/apimachinery/pkg/labels/selector.go) ---

bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9], the qualified name / label value body.
bool MatchesQualifiedNamePart(std::string_view s) {
  if (s.empty() || !IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return IsAlnum(c) || c == '-' || c == '_' || c == '.'; });
}

// IsDNS1123Subdomain.
bool IsDns1123Subdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    std::string_view label = s.substr(start, dot == std::string_view::npos ? s.npos : dot - start);
    auto lower_alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
    if (label.empty() || !lower_alnum(label.front()) || !lower_alnum(label.back())) return false;
    if (!std::all_of(label.begin(), label.end(),
                     [&](char c) { return lower_alnum(c) || c == '-'; })) {
      return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// validation.IsQualifiedName.
bool IsQualifiedName(std::string_view s) {
  std::string_view name = s;
  size_t slash = s.find('/');
  if (slash != std::string_view::npos) {
    if (s.find('/', slash + 1) != std::string_view::npos) return false;
    std::string_view prefix = s.substr(0, slash);
    if (!IsDns1123Subdomain(prefix)) return false;
    name = s.substr(slash + 1);
  }
  return !name.empty() && name.size() <= 63 && MatchesQualifiedNamePart(name);
}

// validation.IsValidLabelValue.
bool IsValidLabelValue(std::string_view s) {
  return s.size() <= 63 && (s.empty() || MatchesQualifiedNamePart(s));
}

enum class Tok {
  kError,
  kEnd,
  kIdentifier,
  kClosedPar,
  kComma,
  kDoesNotExist,
  kDoubleEquals,
  kEquals,
  kGreaterThan,
  kIn,
  kLessThan,
  kNotEquals,
  kNotIn,
  kOpenPar,
};

struct Token {
  Tok tok;
  std::string lit;
};

std::optional<Tok> KeywordToken(std::string_view s) {
  static const std::pair<std::string_view, Tok> kTokens[] = {
      {")", Tok::kClosedPar},     {",", Tok::kComma},    {"!", Tok::kDoesNotExist},
      {"==", Tok::kDoubleEquals}, {"=", Tok::kEquals},   {">", Tok::kGreaterThan},
      {"in", Tok::kIn},           {"<", Tok::kLessThan}, {"!=", Tok::kNotEquals},
      {"notin", Tok::kNotIn},     {"(", Tok::kOpenPar},
  };
  for (const auto& [lit, tok] : kTokens) {
    if (lit == s) return tok;
  }
  return std::nullopt;
}

bool IsSpecialSymbol(char c) {
  return c == '=' || c == '!' || c == '(' || c == ')' || c == ',' || c == '>' || c == '<';
}

bool IsLabelWhitespace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// The labels Lexer, run to the end; a NUL byte ends input as in upstream's read().
std::vector<Token> LexLabelSelector(std::string_view s) {
  std::vector<Token> out;
  size_t i = 0;
  auto at = [&](size_t k) { return k < s.size() ? s[k] : '\0'; };
  while (true) {
    while (IsLabelWhitespace(at(i))) ++i;
    char c = at(i);
    if (c == '\0') {
      out.push_back({Tok::kEnd, ""});
      return out;
    }
    if (IsSpecialSymbol(c)) {
      // Longest run of special symbols that still names a token.
      std::string buffer;
      std::optional<Token> last;
      while (IsSpecialSymbol(at(i))) {
        buffer.push_back(at(i));
        if (auto tok = KeywordToken(buffer)) {
          last = Token{*tok, buffer};
          ++i;
        } else if (last) {
          break;
        } else {
          ++i;
        }
      }
      if (!last) {
        out.push_back({Tok::kError, buffer});
        return out;
      }
      out.push_back(*last);
      continue;
    }
    size_t start = i;
    while (at(i) != '\0' && !IsLabelWhitespace(at(i)) && !IsSpecialSymbol(at(i))) ++i;
    std::string lit(s.substr(start, i - start));
    auto kw = KeywordToken(lit);
    out.push_back({kw ? *kw : Tok::kIdentifier, lit});
  }
}

class LabelParser {
 public:
  explicit LabelParser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Result<size_t> Parse() {
    size_t count = 0;
    while (true) {
      Tok t = Lookahead();
      if (t == Tok::kEnd) return count;
      if (t != Tok::kIdentifier && t != Tok::kDoesNotExist) {
        return Error{"found '" + Current().lit + "', expected: !, identifier, or 'end of string'"};
      }
      if (auto err = ParseRequirement()) return Error{"unable to parse requirement: " + *err};
      ++count;
      Token next = Consume();
      if (next.tok == Tok::kEnd) return count;
      if (next.tok != Tok::kComma) {
        return Error{"found '" + next.lit + "', expected: ',' or 'end of string'"};
      }
      Tok after = Lookahead();
      if (after != Tok::kIdentifier && after != Tok::kDoesNotExist) {
        return Error{"found '" + Current().lit + "', expected: identifier after ','"};
      }
    }
  }

 private:
  enum class Op { kExists, kDoesNotExist, kEquals, kNotEquals, kIn, kNotIn, kGt, kLt };

  const Token& Current() const { return tokens_[std::min(pos_, tokens_.size() - 1)]; }

  // Lookahead/consume in the "Values" context: "in" and "notin" read as identifiers.
  Tok Lookahead() const {
    Tok t = Current().tok;
    return (t == Tok::kIn || t == Tok::kNotIn) ? Tok::kIdentifier : t;
  }
  Token Consume(bool values_context = true) {
    Token t = Current();
    if (pos_ < tokens_.size() - 1) ++pos_;
    if (values_context && (t.tok == Tok::kIn || t.tok == Tok::kNotIn)) t.tok = Tok::kIdentifier;
    return t;
  }

  // Returns an error message, or nullopt when the requirement is valid.
  std::optional<std::string> ParseRequirement() {
    Op op = Op::kEquals;
    bool has_op = false;
    Token key = Consume();
    if (key.tok == Tok::kDoesNotExist) {
      op = Op::kDoesNotExist;
      has_op = true;
      key = Consume();
    }
    if (key.tok != Tok::kIdentifier) return "found '" + key.lit + "', expected: identifier";
    if (!IsQualifiedName(key.lit)) return "invalid label key \"" + key.lit + "\"";
    if (Tok t = Lookahead(); t == Tok::kEnd || t == Tok::kComma) {
      if (!has_op) op = Op::kExists;
      return std::nullopt;  // Exists / DoesNotExist take no values
    }
    if (has_op) return std::nullopt;  // "!key" followed by more: caller reports the token

    Token op_tok = Consume(/*values_context=*/false);
    switch (op_tok.tok) {
      case Tok::kDoesNotExist:
        return std::nullopt;  // "key!" is accepted upstream
      case Tok::kEquals:
      case Tok::kDoubleEquals:
        op = Op::kEquals;
        break;
      case Tok::kNotEquals:
        op = Op::kNotEquals;
        break;
      case Tok::kGreaterThan:
        op = Op::kGt;
        break;
      case Tok::kLessThan:
        op = Op::kLt;
        break;
      case Tok::kIn:
        op = Op::kIn;
        break;
      case Tok::kNotIn:
        op = Op::kNotIn;
        break;
      default:
        return "found '" + op_tok.lit + "', expected: operator";
    }
    std::set<std::string> values;
    if (op == Op::kIn || op == Op::kNotIn) {
      if (auto err = ParseValues(values)) return err;
    } else {
      Tok t = Lookahead();
      if (t == Tok::kEnd || t == Tok::kComma) {
        values.insert("");
      } else {
        Token v = Consume();
        if (v.tok != Tok::kIdentifier) return "found '" + v.lit + "', expected: identifier";
        values.insert(v.lit);
      }
    }
    // NewRequirement's checks.
    if ((op == Op::kIn || op == Op::kNotIn) && values.empty()) return "values empty";
    if (op == Op::kGt || op == Op::kLt) {
      if (values.size() != 1 || !ParsesAsInt64(*values.begin())) return "not an integer";
    }
    for (const std::string& v : values) {
      if (!IsValidLabelValue(v)) return "invalid label value \"" + v + "\"";
    }
    return std::nullopt;
  }

  std::optional<std::string> ParseValues(std::set<std::string>& values) {
    Token open = Consume();
    if (open.tok != Tok::kOpenPar) return "found '" + open.lit + "' expected: '('";
    Tok t = Lookahead();
    if (t == Tok::kClosedPar) {  // "()"
      Consume();
      values.insert("");
      return std::nullopt;
    }
    if (t != Tok::kIdentifier && t != Tok::kComma) {
      return "found '" + Current().lit + "', expected: ',', ')' or identifier";
    }
    while (true) {
      Token v = Consume();
      if (v.tok == Tok::kIdentifier) {
        values.insert(v.lit);
        Tok next = Lookahead();
        if (next == Tok::kComma) continue;
        if (next == Tok::kClosedPar) break;
        return "found '" + Current().lit + "', expected: ',' or ')'";
      }
      if (v.tok == Tok::kComma) {
        if (values.empty()) values.insert("");  // "(,"
        Tok next = Lookahead();
        if (next == Tok::kClosedPar) {
          values.insert("");  // ",)"
          break;
        }
        if (next == Tok::kComma) {
          Consume();
          values.insert("");  // ",,"
        }
        continue;
      }
      return "found '" + v.lit + "', expected: ',', or identifier";
    }
    if (Consume().tok != Tok::kClosedPar) return "expected: ')'";
    return std::nullopt;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
};

}  // namespace

bool PercentDecodeInto(std::string_view s, bool plus_is_space, std::string& out) {
  // Most paths and query values have nothing to decode: one copy (`s` never views `out`).
  if (s.find('%') == std::string_view::npos &&
      (!plus_is_space || s.find('+') == std::string_view::npos)) {
    SetField(out, s);
    return true;
  }
  out.clear();
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size()) return false;
      int hi = HexValue(s[i + 1]);
      int lo = HexValue(s[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return true;
}

std::optional<std::string> PercentDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  if (!PercentDecodeInto(s, plus_is_space, out)) return std::nullopt;
  return out;
}

QueryParams ParseQuery(std::string_view raw_query) {
  QueryParams out;
  while (!raw_query.empty()) {
    size_t amp = raw_query.find('&');
    std::string_view pair = raw_query.substr(0, amp);
    raw_query = amp == std::string_view::npos ? std::string_view() : raw_query.substr(amp + 1);
    if (pair.find(';') != std::string_view::npos || pair.empty()) continue;
    size_t eq = pair.find('=');
    std::string_view raw_key = pair.substr(0, eq);
    std::string_view raw_value =
        eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    // Decoded in place: no temporary strings to move in.
    auto& [key, value] = out.emplace_back();
    if (!PercentDecodeInto(raw_key, /*plus_is_space=*/true, key) ||
        !PercentDecodeInto(raw_value, /*plus_is_space=*/true, value)) {
      out.pop_back();
    }
  }
  return out;
}

std::string_view RawQuery(std::string_view path_and_query) {
  return SplitTarget(path_and_query).second;
}

std::optional<std::string> QueryParam(std::string_view path_and_query, std::string_view key) {
  std::string_view raw_query = RawQuery(path_and_query);
  // Cheap pre-check: most targets do not mention the key at all.
  if (raw_query.find(key) == std::string_view::npos &&
      raw_query.find('%') == std::string_view::npos) {
    return std::nullopt;
  }
  for (auto& [k, v] : ParseQuery(raw_query)) {
    if (k == key) return std::move(v);
  }
  return std::nullopt;
}

bool QueryBool(std::string_view value) { return !(value == "0" || ToLower(value) == "false"); }

Result<std::vector<FieldSelectorTerm>> ParseFieldSelector(std::string_view selector) {
  // splitTerms: split on commas not escaped by a backslash.
  std::vector<std::string_view> parts;
  if (!selector.empty()) {
    size_t start = 0;
    bool in_slash = false;
    for (size_t i = 0; i < selector.size(); ++i) {
      char c = selector[i];
      if (in_slash) {
        in_slash = false;
      } else if (c == '\\') {
        in_slash = true;
      } else if (c == ',') {
        parts.push_back(selector.substr(start, i - start));
        start = i + 1;
      }
    }
    parts.push_back(selector.substr(start));
  }
  std::sort(parts.begin(), parts.end());

  std::vector<FieldSelectorTerm> terms;
  for (std::string_view part : parts) {
    if (part.empty()) continue;
    // splitTerm: the first position where "!=", "==" or "=" starts (in that preference).
    size_t at = std::string_view::npos;
    std::string_view op;
    for (size_t i = 0; i < part.size() && at == std::string_view::npos; ++i) {
      for (std::string_view candidate : {"!=", "==", "="}) {
        if (part.substr(i).starts_with(candidate)) {
          at = i;
          op = candidate;
          break;
        }
      }
    }
    if (at == std::string_view::npos) {
      return Error{"invalid selector: '" + std::string(selector) + "'; can't understand '" +
                   std::string(part) + "'"};
    }
    // UnescapeValue: only \\, \, and \= are escapes; a bare ',' or '=' is an error.
    std::string_view rhs = part.substr(at + op.size());
    std::string value;
    bool slash = false;
    for (char c : rhs) {
      if (slash) {
        if (c != '\\' && c != ',' && c != '=') {
          return Error{"invalid field selector: invalid escape sequence"};
        }
        value.push_back(c);
        slash = false;
      } else if (c == '\\') {
        slash = true;
      } else if (c == ',' || c == '=') {
        return Error{"invalid field selector: unescaped character in value"};
      } else {
        value.push_back(c);
      }
    }
    if (slash) return Error{"invalid field selector: invalid escape sequence"};
    terms.push_back({std::string(part.substr(0, at)), std::string(op), std::move(value)});
  }
  return terms;
}

std::optional<std::string> RequiresExactMatch(const std::vector<FieldSelectorTerm>& terms,
                                              std::string_view field) {
  for (const FieldSelectorTerm& t : terms) {
    if (t.field == field && t.op != "!=") return t.value;
  }
  return std::nullopt;
}

Result<size_t> ValidateLabelSelector(std::string_view selector) {
  // Lexing runs to the end up front; an error token makes the parser fail when it reaches it,
  // just as upstream's on-demand lexer would.
  return LabelParser(LexLabelSelector(selector)).Parse();
}

namespace {

// KubeVerb's names, in its order ("" for kOther: no verb upstream names).
constexpr std::string_view kVerbNames[] = {
    "", "get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "proxy"};
static_assert(std::size(kVerbNames) == static_cast<size_t>(KubeVerb::kProxy) + 1);

constexpr std::string_view VerbName(KubeVerb kind) { return kVerbNames[static_cast<size_t>(kind)]; }

}  // namespace

KubeVerb KubeVerbOf(std::string_view verb) {
  // By length and first letters: one string compare at most (this runs per request).
  auto is = [&](KubeVerb kind) { return verb == VerbName(kind) ? kind : KubeVerb::kOther; };
  switch (verb.size()) {
    case 3: return is(KubeVerb::kGet);
    case 4: return is(KubeVerb::kList);
    case 5:
      if (verb[0] == 'w') return is(KubeVerb::kWatch);
      return verb[1] == 'a' ? is(KubeVerb::kPatch) : is(KubeVerb::kProxy);
    case 6:
      if (verb[0] == 'c') return is(KubeVerb::kCreate);
      return verb[0] == 'u' ? is(KubeVerb::kUpdate) : is(KubeVerb::kDelete);
    case 16: return is(KubeVerb::kDeleteCollection);
    default: return KubeVerb::kOther;
  }
}

RequestInfo ParseRequestInfo(std::string_view method, std::string_view path_and_query,
                             std::vector<std::string>* parts_out) {
  RequestInfo info;
  ParseRequestInfoInto(method, path_and_query, info, parts_out);
  return info;
}

namespace {

// A kube verb upstream's rules name, as both the string and the number.
void SetVerb(RequestInfo& info, KubeVerb kind) {
  SetField(info.verb, VerbName(kind));
  info.verb_kind = kind;
}

// ParseRequestInfoInto's rules; `query` is parsed from `raw_query` when a rule needs it
// (query_parsed says whether it was).
void ParseTargetInto(std::string_view method, std::string_view raw_path,
                     std::string_view raw_query, RequestInfo& info,
                     std::vector<std::string>* parts_out, QueryParams& query,
                     bool& query_parsed) {
  auto parsed_query = [&]() -> const QueryParams& {
    if (!query_parsed) {
      query = ParseQuery(raw_query);
      query_parsed = true;
    }
    return query;
  };

  // Start as a non-resource request until proven otherwise: every field as a new RequestInfo
  // has it, the strings' buffers kept. Go's URL.Path is the decoded path; a target Go could
  // not parse never reaches the apiserver, so keep it raw.
  info.Clear();
  if (!PercentDecodeInto(raw_path, /*plus_is_space=*/false, info.path)) SetField(info.path, raw_path);
  SetField(info.verb, method);
  for (char& c : info.verb) {  // ASCII, as std::tolower in the C locale (no call per char)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  info.verb_kind = KubeVerbOf(info.verb);
  if (parts_out) parts_out->clear();

  const auto parts = SplitPath(info.path);
  if (parts.size() < 3) return;
  if (parts[0] != "api" && parts[0] != "apis") return;
  SetField(info.api_prefix, parts[0]);
  size_t i = 1;
  if (info.api_prefix != "api") {  // not groupless: needs group, version and a resource
    if (parts.size() - i < 3) return;
    SetField(info.api_group, parts[i++]);
  }
  info.is_resource_request = true;
  SetField(info.api_version, parts[i++]);

  // /{specialVerb}/* (legacy watch and proxy prefixes).
  if (parts[i] == "proxy" || parts[i] == "watch") {
    if (parts.size() - i < 2) return;  // upstream: error, "unable to determine kind"
    SetVerb(info, parts[i++] == "proxy" ? KubeVerb::kProxy : KubeVerb::kWatch);
    info.verb_via_path_prefix = true;
  } else if (method == "POST") {
    SetVerb(info, KubeVerb::kCreate);
  } else if (method == "GET" || method == "HEAD") {
    SetVerb(info, KubeVerb::kGet);
  } else if (method == "PUT") {
    SetVerb(info, KubeVerb::kUpdate);
  } else if (method == "PATCH") {
    SetVerb(info, KubeVerb::kPatch);
  } else if (method == "DELETE") {
    SetVerb(info, KubeVerb::kDelete);
  } else {
    SetVerb(info, KubeVerb::kOther);  // "": upstream names no verb for other methods here
  }

  // /namespaces/{namespace}/{resource}/*: parts become relative to the resource, unless
  // what follows the namespace name is one of its own subresources.
  if (parts[i] == "namespaces") {
    if (parts.size() - i > 1) {
      SetField(info.namespace_, parts[i + 1]);
      if (parts.size() - i > 2 && parts[i + 2] != "status" && parts[i + 2] != "finalize") {
        i += 2;
      }
    }
  }
  const std::string_view* p = parts.data() + i;  // resource/name/subresource/other/stuff
  info.parts_count = parts.size() - i;
  if (parts_out) parts_out->assign(p, p + info.parts_count);

  // Proxy takes no subresource.
  if (info.parts_count >= 3 && info.verb_kind != KubeVerb::kProxy) SetField(info.subresource, p[2]);
  if (info.parts_count >= 2) SetField(info.name, p[1]);
  if (info.parts_count >= 1) SetField(info.resource, p[0]);

  // No name and a GET: a list or a watch, decided by ListOptions from the query.
  if (info.name.empty() && info.verb_kind == KubeVerb::kGet) {
    const auto& q = parsed_query();
    const std::string* watch = FirstValue(q, "watch");
    SetVerb(info, (watch && QueryBool(*watch)) ? KubeVerb::kWatch : KubeVerb::kList);
    // The name comes from fieldSelector=metadata.name=X, but only when every ListOptions
    // field decodes (upstream resets the options on any decode error).
    if (!ListOptionsDecodeFails(q)) {
      if (const std::string* fs = FirstValue(q, "fieldSelector")) {
        if (auto terms = ParseFieldSelector(*fs); terms.ok()) {
          if (auto name = RequiresExactMatch(*terms, "metadata.name");
              name && IsValidPathSegmentName(*name)) {
            SetField(info.name, *name);
          }
        }
      }
    }
  }

  // No name and a DELETE: deletecollection.
  if (info.name.empty() && info.verb_kind == KubeVerb::kDelete) {
    SetVerb(info, KubeVerb::kDeleteCollection);
  }

  // AuthorizeWithSelectors: raw selectors for the verbs that honour them, except on the
  // deprecated verb-via-path endpoints.
  if (!info.verb_via_path_prefix &&
      (info.verb_kind == KubeVerb::kList || info.verb_kind == KubeVerb::kWatch ||
       info.verb_kind == KubeVerb::kDeleteCollection)) {
    const auto& q = parsed_query();
    if (const std::string* v = FirstValue(q, "fieldSelector")) SetField(info.field_selector, *v);
    if (const std::string* v = FirstValue(q, "labelSelector")) SetField(info.label_selector, *v);
  }
}

}  // namespace

void ParseRequestInfoInto(std::string_view method, std::string_view path_and_query,
                          RequestInfo& info, std::vector<std::string>* parts_out,
                          QueryParams* query_out) {
  const auto [raw_path, raw_query] = SplitTarget(path_and_query);
  QueryParams own_query;
  QueryParams& query = query_out ? *query_out : own_query;
  bool query_parsed = false;
  ParseTargetInto(method, raw_path, raw_query, info, parts_out, query, query_parsed);
  if (!query_out) return;
  if (!IsRead(info.verb_kind)) {
    query.clear();
  } else if (!query_parsed) {
    query = ParseQuery(raw_query);
  }
}

}  // namespace stormwatch
