#include "agent/config/config_file.h"
#include "agent/log_format.h"

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>

namespace stormwatch {
namespace {

// What is wrong with a value, and where it is in the file.
struct Problem {
  std::string what;
  YAML::Mark where;
};
using Check = std::optional<Problem>;

// One key of the file: reads its node into the options (after checking it), prints the
// options' value back as a node, and describes what it accepts as a JSON Schema (draft-07),
// so the Helm chart's values.schema.json is generated from the same table.
struct ConfigKey {
  std::string path;
  std::function<Check(const YAML::Node&, AgentOptions&)> parse;
  std::function<YAML::Node(const AgentOptions&)> print;
  nlohmann::json schema;
};

// Whole numbers in full (10000000, not 1e+07: integer keys must read back), others shortest.
std::string FormatNumber(double v) {
  char buf[400];
  auto format = v == std::trunc(v) ? std::chars_format::fixed : std::chars_format::general;
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, format);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

// Allowed values of a number: [lo, hi], or (lo, hi] when lo_exclusive.
struct Range {
  double lo;
  double hi;
  bool lo_exclusive = false;
  std::string Violation(double v) const {
    bool above_lo = lo_exclusive ? v > lo : v >= lo;
    if (above_lo && v <= hi) return "";
    if (hi == std::numeric_limits<double>::max()) {
      return (lo_exclusive ? "must be > " : "must be >= ") + FormatNumber(lo);
    }
    return (lo_exclusive ? "must be > " + FormatNumber(lo) + " and <= "
                         : "must be between " + FormatNumber(lo) + " and ") +
           FormatNumber(hi);
  }
  nlohmann::json Schema(bool integer) const {
    // Whole bounds as JSON integers (1, not 1.0), as a person would write them.
    auto number = [](double v) -> nlohmann::json {
      if (v == std::trunc(v) && std::fabs(v) < 9.0e15) return static_cast<int64_t>(v);
      return v;
    };
    nlohmann::json s = {{"type", integer ? "integer" : "number"}};
    s[lo_exclusive ? "exclusiveMinimum" : "minimum"] = number(lo);
    if (hi != std::numeric_limits<double>::max()) s["maximum"] = number(hi);
    return s;
  }
};

constexpr double kUnbounded = std::numeric_limits<double>::max();
const Range kRate{0, kUnbounded, true};         // events or bytes per second
const Range kFraction{0, 1, true};              // a share of requests
const Range kTolerance{0, 1};
const Range kWeight{1, 1000};
// Seconds a detector keeps per-second buckets for: each costs memory per tracked key.
const Range kWindow{1, 3600};
const Range kLongWindow{1, 86400};  // timestamps only, no buckets
const Range kTracked{1, 10'000'000};  // keys, objects, clients held in memory
const Range kPerKey{1, 1024};         // slots kept per key (each key's own sketch)
const Range kCount{1, 1'000'000};
const Range kPid{1, 4'194'304};  // PID_MAX_LIMIT

// Text from the file as an error message shows it: bytes other than printable ASCII as \xNN
// (a terminal escape in a key name reaches the log as text), at most 100 of them.
std::string Shown(std::string_view text) {
  constexpr size_t kMaxShown = 100;
  std::string out;
  for (size_t i = 0; i < text.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += {'\\', 'x', kHex[c >> 4], kHex[c & 0xf]};
    }
  }
  if (text.size() > kMaxShown) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

std::string DescribeNode(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Null: return "nothing";
    default: return "'" + Shown(node.Scalar()) + "'";
  }
}

template <typename T>
Check ParseNumber(const YAML::Node& node, const Range& range, T& out) {
  constexpr bool kInteger = std::is_integral_v<T>;
  std::string expected = kInteger ? "expected an integer" : "expected a number";
  if (!node.IsScalar()) return Problem{expected + ", got " + DescribeNode(node), node.Mark()};
  const std::string& text = node.Scalar();
  const char* end = text.data() + text.size();
  double value = 0;
  std::from_chars_result parsed;
  if constexpr (kInteger) {
    long long whole = 0;
    parsed = std::from_chars(text.data(), end, whole);
    value = static_cast<double>(whole);
  } else {
    parsed = std::from_chars(text.data(), end, value);
  }
  if (parsed.ec != std::errc() || parsed.ptr != end || !std::isfinite(value)) {
    return Problem{expected + ", got " + DescribeNode(node), node.Mark()};
  }
  if (std::string v = range.Violation(value); !v.empty()) {
    return Problem{v + ", got " + Shown(text), node.Mark()};
  }
  out = static_cast<T>(value);
  return std::nullopt;
}

Check ParseString(const YAML::Node& node, std::string (*check)(std::string_view), std::string& out) {
  if (!node.IsScalar()) return Problem{"expected a string, got " + DescribeNode(node), node.Mark()};
  if (check) {
    if (std::string p = check(node.Scalar()); !p.empty()) return Problem{p, node.Mark()};
  }
  out = node.Scalar();
  return std::nullopt;
}

std::string NotEmpty(std::string_view s) { return s.empty() ? "must not be empty" : ""; }

// Prometheus label names; the alert's own labels cannot be overridden.
std::string ExtraLabelProblem(std::string_view name) {
  static const std::set<std::string, std::less<>> kOwn = {
      "alertname", "storm", "severity", "client", "group", "resource", "namespace"};
  bool valid = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
               name.substr(0, 2) != "__";
  for (char c : name) valid = valid && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  if (!valid) return "not a label name (letters, digits and '_', not starting with a digit or __)";
  if (kOwn.count(name)) return "the alert sets this label itself";
  return "";
}

const nlohmann::json kNonEmptyString = {{"type", "string"}, {"minLength", 1}};
// JSON Schema of what HttpUrlProblem accepts, and of "" or that.
const nlohmann::json kHttpUrl = {{"pattern", "^https?://."}};
const nlohmann::json kEmptyOrHttpUrl = {{"pattern", "^(https?://.|$)"}};
// What AddressProblem accepts: host:port, port 1-65535 (the pattern bounds the digits only).
const nlohmann::json kAddress = {{"pattern", "^.*:[1-9][0-9]{0,4}$"}};
// What ExtraLabelProblem accepts.
const nlohmann::json kExtraLabelName = {
    {"pattern", "^[a-zA-Z_][a-zA-Z0-9_]*$"},
    {"not", {{"anyOf", {{{"pattern", "^__"}},
                        {{"enum", {"alertname", "storm", "severity", "client", "group", "resource",
                                   "namespace"}}}}}}}};

// What RingBufferBytesProblem accepts, as an enum.
nlohmann::json PowersOfTwo(size_t lo, size_t hi) {
  nlohmann::json values = nlohmann::json::array();
  for (size_t v = lo; v <= hi; v *= 2) values.push_back(v);
  return {{"enum", values}};
}

nlohmann::json Merged(nlohmann::json base, const nlohmann::json& more) {
  if (more.is_object()) base.update(more);
  return base;
}

// Keys are built through typed adders so each field is named once with its range.
class Schema {
 public:
  // `get(options)` returns a reference to the field, const or not.
  // `extra` checks what a range cannot say; `constraints` says the same in JSON Schema.
  template <typename T, typename Get>
  void Number(std::string path, Get get, Range range, std::string (*extra)(T) = nullptr,
              const nlohmann::json& constraints = {}) {
    keys_.push_back({std::move(path),
                     [=](const YAML::Node& n, AgentOptions& o) -> Check {
                       T value{};
                       if (Check c = ParseNumber(n, range, value)) return c;
                       if (extra) {
                         if (std::string p = extra(value); !p.empty()) return Problem{p, n.Mark()};
                       }
                       get(o) = value;
                       return std::nullopt;
                     },
                     [=](const AgentOptions& o) {
                       return YAML::Node(FormatNumber(static_cast<double>(get(o))));
                     },
                     Merged(range.Schema(std::is_integral_v<T>), constraints)});
  }

  // A std::chrono::milliseconds field, written in seconds.
  template <typename Get>
  void Seconds(std::string path, Get get, Range range) {
    keys_.push_back({std::move(path),
                     [=](const YAML::Node& n, AgentOptions& o) -> Check {
                       double seconds = 0;
                       if (Check c = ParseNumber(n, range, seconds)) return c;
                       get(o) = std::chrono::milliseconds(std::llround(seconds * 1000));
                       return std::nullopt;
                     },
                     [=](const AgentOptions& o) {
                       return YAML::Node(FormatNumber(get(o).count() / 1000.0));
                     },
                     range.Schema(false)});
  }

  template <typename Get>
  void Bool(std::string path, Get get) {
    keys_.push_back({std::move(path),
                     [=](const YAML::Node& n, AgentOptions& o) -> Check {
                       bool value = false;
                       if (!n.IsScalar() || !YAML::convert<bool>::decode(n, value)) {
                         return Problem{"expected true or false, got " + DescribeNode(n), n.Mark()};
                       }
                       get(o) = value;
                       return std::nullopt;
                     },
                     [=](const AgentOptions& o) { return YAML::Node(get(o)); },
                     {{"type", "boolean"}}});
  }

  // `constraints` says in JSON Schema what `check` accepts (pattern, enum, minLength).
  template <typename Get>
  void String(std::string path, Get get, std::string (*check)(std::string_view),
              nlohmann::json constraints) {
    keys_.push_back({std::move(path),
                     [=](const YAML::Node& n, AgentOptions& o) -> Check {
                       return ParseString(n, check, get(o));
                     },
                     [=](const AgentOptions& o) { return YAML::Node(get(o)); },
                     Merged({{"type", "string"}}, constraints)});
  }

  // A list of strings (or of numbers, for T = pid_t); `nothing` is an empty list.
  template <typename T, typename Get>
  void List(std::string path, Get get) {
    keys_.push_back({std::move(path),
                     [=](const YAML::Node& n, AgentOptions& o) -> Check {
                       if (!n.IsNull() && !n.IsSequence()) {
                         return Problem{"expected a list, got " + DescribeNode(n), n.Mark()};
                       }
                       std::vector<T> items;
                       for (const YAML::Node& item : n) {
                         T value{};
                         Check c;
                         if constexpr (std::is_same_v<T, std::string>) {
                           c = ParseString(item, NotEmpty, value);
                         } else {
                           c = ParseNumber(item, kPid, value);
                         }
                         if (c) return c;
                         items.push_back(value);
                       }
                       get(o) = std::move(items);
                       return std::nullopt;
                     },
                     [=](const AgentOptions& o) {
                       YAML::Node list(YAML::NodeType::Sequence);
                       list.SetStyle(YAML::EmitterStyle::Flow);
                       for (const T& item : get(o)) list.push_back(item);
                       return list;
                     },
                     {{"type", "array"},
                      {"items", std::is_same_v<T, std::string> ? kNonEmptyString
                                                               : kPid.Schema(true)}}});
  }

  // A map of non-empty strings to non-empty strings; `nothing` is an empty map.
  template <typename Get>
  void StringMap(std::string path, Get get, std::string (*check_key)(std::string_view),
                 nlohmann::json key_constraints) {
    keys_.push_back({std::move(path),
                     [=](const YAML::Node& n, AgentOptions& o) -> Check {
                       if (!n.IsNull() && !n.IsMap()) {
                         return Problem{"expected a map, got " + DescribeNode(n), n.Mark()};
                       }
                       std::map<std::string, std::string> entries;
                       for (const auto& entry : n) {
                         std::string key, value;
                         if (Check c = ParseString(entry.first, check_key, key)) return c;
                         if (Check c = ParseString(entry.second, NotEmpty, value)) return c;
                         entries[key] = value;
                       }
                       get(o) = std::move(entries);
                       return std::nullopt;
                     },
                     [=](const AgentOptions& o) {
                       YAML::Node map(YAML::NodeType::Map);
                       map.SetStyle(YAML::EmitterStyle::Flow);
                       for (const auto& [key, value] : get(o)) map[key] = value;
                       return map;
                     },
                     {{"type", "object"},
                      {"propertyNames", key_constraints},
                      {"additionalProperties", kNonEmptyString}}});
  }

  // The fields of one detector's config struct, under "detectors.<storm>.".
  template <typename Config, typename GetConfig>
  class Detector {
   public:
    Detector(Schema& schema, std::string storm, GetConfig config)
        : schema_(schema), prefix_("detectors." + storm + "."), config_(config) {}
    template <typename T>
    Detector& Number(const char* name, T Config::*field, Range range) {
      schema_.Number<T>(prefix_ + name, Field(field), range);
      return *this;
    }
    Detector& Enabled() {
      schema_.Bool(prefix_ + "enabled", Field(&Config::enabled));
      return *this;
    }
    Detector& Allow() {
      schema_.List<std::string>(prefix_ + "allow", Field(&AllowList::users, &Config::allow));
      return *this;
    }

   private:
    template <typename T>
    auto Field(T Config::*field) const {
      return [get = config_, field](auto& o) -> auto& { return get(o).*field; };
    }
    template <typename T, typename Inner>
    auto Field(T Inner::*field, Inner Config::*inner) const {
      return [get = config_, field, inner](auto& o) -> auto& { return (get(o).*inner).*field; };
    }
    Schema& schema_;
    std::string prefix_;
    GetConfig config_;
  };

  template <typename Config, typename GetConfig>
  Detector<Config, GetConfig> DetectorKeys(std::string storm, GetConfig config) {
    return Detector<Config, GetConfig>(*this, std::move(storm), config);
  }

  const ConfigKey* Find(std::string_view path) const {
    for (const ConfigKey& k : keys_) {
      if (k.path == path) return &k;
    }
    return nullptr;
  }
  // Names directly under `section` ("" = the top level), in schema order.
  std::vector<std::string> Children(const std::string& section) const {
    std::string prefix = section.empty() ? "" : section + ".";
    std::vector<std::string> names;
    for (const ConfigKey& k : keys_) {
      if (k.path.compare(0, prefix.size(), prefix) != 0) continue;
      std::string name = k.path.substr(prefix.size(), k.path.find('.', prefix.size()) - prefix.size());
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
    return names;
  }
  const std::vector<ConfigKey>& keys() const { return keys_; }

 private:
  std::vector<ConfigKey> keys_;
};

Schema BuildSchema() {
  Schema s;
  s.List<std::string>("targets.names", [](auto& o) -> auto& { return o.target_names; });
  s.List<pid_t>("targets.pids", [](auto& o) -> auto& { return o.pids; });
  s.String("metrics_address", [](auto& o) -> auto& { return o.metrics_address; },
           [](std::string_view a) { return AddressProblem(a); }, kAddress);
  s.String("health_address", [](auto& o) -> auto& { return o.health_address; },
           [](std::string_view a) { return a.empty() ? std::string() : AddressProblem(a); },
           {{"pattern", "^(.*:[1-9][0-9]{0,4}|)$"}});
  s.String("debug_address", [](auto& o) -> auto& { return o.debug_address; },
           [](std::string_view a) { return a.empty() ? std::string() : AddressProblem(a); },
           {{"pattern", "^(.*:[1-9][0-9]{0,4}|)$"}});
  s.String("log_level", [](auto& o) -> auto& { return o.log_level; }, LogLevelProblem,
           {{"enum", {"trace", "debug", "info", "warn", "error", "critical", "off"}}});
  s.String("log_format", [](auto& o) -> auto& { return o.log_format; }, LogFormatProblem,
           {{"enum", {"text", "json"}}});
  s.Number<size_t>("capture.ring_buffer_bytes", [](auto& o) -> auto& { return o.ring_buffer_bytes; },
                   Range{4096, double{1u << 30}}, RingBufferBytesProblem, PowersOfTwo(4096, 1u << 30));
  s.Number<size_t>("limits.max_clients",
                   [](auto& o) -> auto& { return o.max_clients_per_metric; }, kTracked);
  s.Number<size_t>("limits.max_identities", [](auto& o) -> auto& { return o.max_identities; },
                   kTracked);

  s.DetectorKeys<UpdateLoopConfig>("update_loop",
                                   [](auto& o) -> auto& { return o.detectors.update_loop; })
      .Enabled()
      .Number("object_rate", &UpdateLoopConfig::object_rate, kRate)
      .Number("object_sustain_s", &UpdateLoopConfig::object_sustain_s, kWindow)
      .Number("resource_rate", &UpdateLoopConfig::resource_rate, kRate)
      .Number("resource_sustain_s", &UpdateLoopConfig::resource_sustain_s, kWindow)
      .Number("resolve_s", &UpdateLoopConfig::resolve_s, kWindow)
      .Number("evidence_window_s", &UpdateLoopConfig::evidence_window_s, kWindow)
      .Number("max_objects", &UpdateLoopConfig::max_objects, kTracked)
      .Number("max_resources", &UpdateLoopConfig::max_resources, kTracked)
      .Number("top_objects", &UpdateLoopConfig::top_objects, Range{1, 100});
  s.List<std::string>("detectors.update_loop.allow",
                      [](auto& o) -> auto& { return o.detectors.update_loop_allow.users; });

  s.DetectorKeys<ListStormConfig>("list_storm",
                                  [](auto& o) -> auto& { return o.detectors.list_storm; })
      .Enabled()
      .Number("list_rate", &ListStormConfig::list_rate, kRate)
      .Number("sustain_s", &ListStormConfig::sustain_s, kWindow)
      .Number("bytes_rate", &ListStormConfig::bytes_rate, kRate)
      .Number("expensive_weight", &ListStormConfig::expensive_weight, kWeight)
      .Number("resolve_s", &ListStormConfig::resolve_s, kWindow)
      .Number("max_keys", &ListStormConfig::max_keys, kTracked)
      .Allow();

  s.DetectorKeys<ExemptClientConfig>("exempt_client",
                                     [](auto& o) -> auto& { return o.detectors.exempt_client; })
      .Enabled()
      .Number("active_window_s", &ExemptClientConfig::active_window_s, kWindow)
      .Number("escalate_rate", &ExemptClientConfig::escalate_rate, kRate)
      .Number("escalate_sustain_s", &ExemptClientConfig::escalate_sustain_s, kWindow)
      .Number("resolve_s", &ExemptClientConfig::resolve_s, kWindow)
      .Number("max_clients", &ExemptClientConfig::max_clients, kTracked)
      .Allow();

  s.DetectorKeys<ConflictStormConfig>("conflict_storm",
                                      [](auto& o) -> auto& { return o.detectors.conflict_storm; })
      .Enabled()
      .Number("conflict_ratio", &ConflictStormConfig::conflict_ratio, kFraction)
      .Number("conflict_rate", &ConflictStormConfig::conflict_rate, kRate)
      .Number("sustain_s", &ConflictStormConfig::sustain_s, kWindow)
      .Number("min_conflict_seconds", &ConflictStormConfig::min_conflict_seconds, kFraction)
      .Number("resolve_s", &ConflictStormConfig::resolve_s, kWindow)
      .Number("flat_tolerance", &ConflictStormConfig::flat_tolerance, kTolerance)
      .Number("max_keys", &ConflictStormConfig::max_keys, kTracked)
      .Number("max_objects", &ConflictStormConfig::max_objects, kTracked)
      .Allow();

  s.DetectorKeys<ThrottledClientConfig>(
       "throttled_client", [](auto& o) -> auto& { return o.detectors.throttled_client; })
      .Enabled()
      .Number("throttled_rate", &ThrottledClientConfig::throttled_rate, kRate)
      .Number("sustain_s", &ThrottledClientConfig::sustain_s, kWindow)
      .Number("resolve_s", &ThrottledClientConfig::resolve_s, kWindow)
      .Number("flat_tolerance", &ThrottledClientConfig::flat_tolerance, kTolerance)
      .Number("max_clients", &ThrottledClientConfig::max_clients, kTracked)
      .Allow();

  s.DetectorKeys<StuckFinalizersConfig>(
       "stuck_finalizers", [](auto& o) -> auto& { return o.detectors.stuck_finalizers; })
      .Enabled()
      .Number("stuck_after_s", &StuckFinalizersConfig::stuck_after_s, kLongWindow)
      .Number("min_stuck_objects", &StuckFinalizersConfig::min_stuck_objects, kCount)
      .Number("writer_lookback_s", &StuckFinalizersConfig::writer_lookback_s, kLongWindow)
      .Number("silent_after_s", &StuckFinalizersConfig::silent_after_s, kLongWindow)
      .Number("steady_writer_writes", &StuckFinalizersConfig::steady_writer_writes, kCount)
      .Number("resolve_s", &StuckFinalizersConfig::resolve_s, kLongWindow)
      .Number("max_objects", &StuckFinalizersConfig::max_objects, kTracked)
      .Number("writers_per_resource", &StuckFinalizersConfig::writers_per_resource, kPerKey)
      .Number("max_writing_clients", &StuckFinalizersConfig::max_writing_clients, kTracked)
      .Number("max_resources", &StuckFinalizersConfig::max_resources, kTracked)
      .Allow();

  s.DetectorKeys<RelistChurnConfig>("relist_churn",
                                    [](auto& o) -> auto& { return o.detectors.relist_churn; })
      .Enabled()
      .Number("window_s", &RelistChurnConfig::window_s, kWindow)
      .Number("min_relists", &RelistChurnConfig::min_relists, kCount)
      .Number("watch_rate", &RelistChurnConfig::watch_rate, kRate)
      .Number("resolve_s", &RelistChurnConfig::resolve_s, kWindow)
      .Number("max_keys", &RelistChurnConfig::max_keys, kTracked)
      .Allow();

  s.DetectorKeys<EtcdRangeStormConfig>(
       "etcd_range_storm", [](auto& o) -> auto& { return o.detectors.etcd_range_storm; })
      .Enabled()
      .Number("range_rate", &EtcdRangeStormConfig::range_rate, kRate)
      .Number("bytes_rate", &EtcdRangeStormConfig::bytes_rate, kRate)
      .Number("sustain_s", &EtcdRangeStormConfig::sustain_s, kWindow)
      .Number("resolve_s", &EtcdRangeStormConfig::resolve_s, kWindow)
      .Number("max_keys", &EtcdRangeStormConfig::max_keys, kTracked)
      .Number("max_list_clients", &EtcdRangeStormConfig::max_list_clients, kTracked)
      .Allow();

  s.String("alertmanager.url", [](auto& o) -> auto& { return o.alertmanager.url; },
           [](std::string_view u) { return u.empty() ? std::string() : HttpUrlProblem(u); },
           kEmptyOrHttpUrl);
  // Held in whole milliseconds: a smaller value would be stored as 0 (no timeout at all).
  s.Seconds("alertmanager.timeout_s", [](auto& o) -> auto& { return o.alertmanager.timeout; },
            Range{0.001, 300});
  s.Seconds("alertmanager.resend_interval_s",
            [](auto& o) -> auto& { return o.alertmanager.resend_interval; }, kWindow);
  s.String("alertmanager.runbook_base_url",
           [](auto& o) -> auto& { return o.alertmanager.runbook_base_url; }, HttpUrlProblem,
           kHttpUrl);
  s.StringMap("alertmanager.labels", [](auto& o) -> auto& { return o.alertmanager.labels; },
              ExtraLabelProblem, kExtraLabelName);

  s.StringMap("apf.static_mapping", [](auto& o) -> auto& { return o.apf_static_names; }, NotEmpty,
              {{"minLength", 1}});
  s.String("apf.apiserver_url", [](auto& o) -> auto& { return o.apf_source.apiserver_url; },
           [](std::string_view u) { return u.empty() ? std::string() : HttpUrlProblem(u); },
           kEmptyOrHttpUrl);
  s.String("apf.token_file", [](auto& o) -> auto& { return o.apf_source.token_file; }, NotEmpty,
           {{"minLength", 1}});
  s.String("apf.ca_file", [](auto& o) -> auto& { return o.apf_source.ca_file; }, NotEmpty,
           {{"minLength", 1}});
  return s;
}

const Schema& TheSchema() {
  static const Schema schema = BuildSchema();
  return schema;
}

std::string Located(const std::string& source, const std::string& path, const Problem& p) {
  std::string out = source + ": " + (path.empty() ? "" : Shown(path) + ": ") + p.what;
  if (!p.where.is_null()) out += " (line " + std::to_string(p.where.line + 1) + ")";
  return out;
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// Applies the keys of `map` (the section `section`, "" at the top) to `o`; "" or the error.
std::string ApplySection(const YAML::Node& map, const std::string& section,
                         const std::string& source, AgentOptions& o) {
  const Schema& schema = TheSchema();
  std::set<std::string> seen;
  for (const auto& entry : map) {
    if (!entry.first.IsScalar()) {
      return Located(source, section, {"keys must be plain names", entry.first.Mark()});
    }
    const std::string& name = entry.first.Scalar();
    std::string path = section.empty() ? name : section + "." + name;
    // The value's position, or the key's when the value is empty.
    YAML::Mark where = entry.second.Mark().is_null() ? entry.first.Mark() : entry.second.Mark();
    if (!seen.insert(name).second) {
      return Located(source, path, {"duplicate key", entry.first.Mark()});
    }
    if (const ConfigKey* key = schema.Find(path)) {
      if (Check c = key->parse(entry.second, o)) {
        if (c->where.is_null()) c->where = where;
        return Located(source, path, *c);
      }
      continue;
    }
    std::vector<std::string> children = schema.Children(path);
    if (children.empty()) {
      return Located(source, path, {"unknown key", entry.first.Mark()}) +
             "; known keys: " + Join(schema.Children(section));
    }
    if (entry.second.IsNull()) continue;
    if (!entry.second.IsMap()) {
      return Located(source, path,
                     {"expected a map with keys " + Join(children) + ", got " +
                          DescribeNode(entry.second),
                      where});
    }
    if (std::string error = ApplySection(entry.second, path, source, o); !error.empty()) {
      return error;
    }
  }
  return "";
}

}  // namespace

std::string AddressProblem(std::string_view host_port) {
  size_t colon = host_port.rfind(':');
  if (colon == std::string_view::npos) return "expected host:port";
  std::string_view port_text = host_port.substr(colon + 1);
  int port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port < 1 || port > 65535) {
    return "expected host:port with a port from 1 to 65535";
  }
  return "";
}

std::string RingBufferBytesProblem(size_t bytes) {
  if (bytes < 4096 || (bytes & (bytes - 1)) != 0) return "must be a power of two >= 4096";
  return "";
}

std::string LogLevelProblem(std::string_view level) {
  for (std::string_view known : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    if (level == known) return "";
  }
  return "expected trace, debug, info, warn, error, critical or off";
}

std::string HttpUrlProblem(std::string_view url) {
  for (std::string_view scheme : {"http://", "https://"}) {
    if (url.substr(0, scheme.size()) == scheme && url.size() > scheme.size()) return "";
  }
  return "expected an http:// or https:// URL";
}

Result<AgentOptions> ApplyConfigYaml(const std::string& yaml, const std::string& source,
                                     AgentOptions options) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return Error{Located(source, "", {"malformed YAML: " + e.msg, e.mark})};
  }
  if (root.IsNull()) return options;
  if (!root.IsMap()) {
    return Error{Located(source, "", {"expected a map of keys at the top level", root.Mark()})};
  }
  if (std::string error = ApplySection(root, "", source, options); !error.empty()) {
    return Error{error};
  }
  std::vector<std::string> problems = options.detectors.update_loop.Problems();
  if (!problems.empty()) {
    return Error{source + ": detectors.update_loop: " + problems.front()};
  }
  return options;
}

Result<AgentOptions> ApplyConfigFile(const std::string& path, AgentOptions options) {
  std::ifstream in(path);
  if (!in) return Error{path + ": cannot read: " + std::strerror(errno)};
  std::ostringstream text;
  text << in.rdbuf();
  return ApplyConfigYaml(text.str(), path, std::move(options));
}

std::vector<std::string> ConfigKeys() {
  std::vector<std::string> paths;
  for (const ConfigKey& k : TheSchema().keys()) paths.push_back(k.path);
  return paths;
}

std::string ConfigJsonSchema() {
  auto section = [] {
    return nlohmann::json{{"type", "object"},
                          {"additionalProperties", false},
                          {"properties", nlohmann::json::object()}};
  };
  nlohmann::json root = section();
  root["$schema"] = "http://json-schema.org/draft-07/schema#";
  root["title"] = "stormwatch agent configuration file";
  for (const ConfigKey& k : TheSchema().keys()) {
    nlohmann::json* node = &root;
    std::string_view rest = k.path;
    for (size_t dot; (dot = rest.find('.')) != std::string_view::npos; rest.remove_prefix(dot + 1)) {
      nlohmann::json& child = (*node)["properties"][std::string(rest.substr(0, dot))];
      if (child.is_null()) child = section();
      node = &child;
    }
    (*node)["properties"][std::string(rest)] = k.schema;
  }
  return root.dump(2) + "\n";
}

std::string EffectiveConfigYaml(const AgentOptions& options) {
  YAML::Node root(YAML::NodeType::Map);
  for (const ConfigKey& k : TheSchema().keys()) {
    YAML::Node node = root;
    std::string_view rest = k.path;
    for (size_t dot; (dot = rest.find('.')) != std::string_view::npos; rest.remove_prefix(dot + 1)) {
      node.reset(node[std::string(rest.substr(0, dot))]);  // reset: rebind, never assign
    }
    node[std::string(rest)] = k.print(options);
  }
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

}  // namespace stormwatch
