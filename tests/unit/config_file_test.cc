// The YAML configuration file: the example file is exactly the defaults and names every key,
// values land in the right fields, and every kind of bad input is refused with the file, the
// key path and the line, on both sides of each bound.
#include "agent/config/config_file.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <functional>

#include <sstream>
#include <string>
#include <vector>

namespace stormwatch {
namespace {

const std::string kExample = std::string(STORMWATCH_SOURCE_DIR) + "/docs/stormwatch.example.yaml";

Result<AgentOptions> Apply(const std::string& yaml) {
  return ApplyConfigYaml(yaml, "cfg.yaml", AgentOptions{});
}

TEST(ConfigFile, ExampleFileHoldsEveryKeyWithItsDefault) {
  auto loaded = ApplyConfigFile(kExample, AgentOptions{});
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(EffectiveConfigYaml(*loaded), EffectiveConfigYaml(AgentOptions{}));

  YAML::Node example = YAML::LoadFile(kExample);
  for (const std::string& path : ConfigKeys()) {
    YAML::Node node = example;
    for (size_t start = 0, dot;; start = dot + 1) {
      dot = path.find('.', start);
      node.reset(node[path.substr(start, dot - start)]);
      if (dot == std::string::npos) break;
    }
    EXPECT_TRUE(node.IsDefined()) << path << " is missing from " << kExample;
  }
}

TEST(ConfigFile, ExampleFileOverridesEarlierValues) {
  AgentOptions changed;
  changed.detectors.list_storm.sustain_s = 99;
  changed.alertmanager.labels["cluster"] = "x";
  auto loaded = ApplyConfigFile(kExample, changed);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->detectors.list_storm.sustain_s, 15);
  EXPECT_TRUE(loaded->alertmanager.labels.empty());
}

TEST(ConfigFile, ValuesLandInTheirFields) {
  auto o = Apply(R"(
targets:
  names: [kube-apiserver]
  pids: [12, 34]
metrics_address: 127.0.0.1:19847
health_address: ""
log_level: debug
capture: {ring_buffer_bytes: 4194304}
limits: {max_clients: 50}
detectors:
  update_loop:
    object_rate: 2.5
    resolve_s: 20
    allow: ["system:serviceaccount:ops:*"]
  list_storm:
    enabled: false
    sustain_s: 20
    allow: [alice, "system:node:*"]
  conflict_storm: {conflict_ratio: 1}
  relist_churn: {watch_rate: 0.25}
  etcd_range_storm: {bytes_rate: 1e6}
alertmanager:
  url: http://127.0.0.1:9093
  timeout_s: 0.5
  resend_interval_s: 30
  labels: {cluster: prod-eu-1}
apf:
  static_mapping: {1b2c-uid: workload-low}
)");
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->target_names, (std::vector<std::string>{"kube-apiserver"}));
  EXPECT_EQ(o->pids, (std::vector<pid_t>{12, 34}));
  EXPECT_EQ(o->metrics_address, "127.0.0.1:19847");
  EXPECT_EQ(o->health_address, "");
  EXPECT_EQ(o->log_level, "debug");
  EXPECT_EQ(o->ring_buffer_bytes, 4194304u);
  EXPECT_EQ(o->max_clients_per_metric, 50u);
  EXPECT_EQ(o->detectors.update_loop.object_rate, 2.5);
  EXPECT_EQ(o->detectors.update_loop.resolve_s, 20);
  EXPECT_EQ(o->detectors.update_loop_allow.users,
            (std::vector<std::string>{"system:serviceaccount:ops:*"}));
  EXPECT_FALSE(o->detectors.list_storm.enabled);
  EXPECT_EQ(o->detectors.list_storm.sustain_s, 20);
  EXPECT_EQ(o->detectors.list_storm.allow.users,
            (std::vector<std::string>{"alice", "system:node:*"}));
  EXPECT_EQ(o->detectors.conflict_storm.conflict_ratio, 1.0);
  EXPECT_EQ(o->detectors.relist_churn.watch_rate, 0.25);
  EXPECT_EQ(o->detectors.etcd_range_storm.bytes_rate, 1e6);
  EXPECT_EQ(o->alertmanager.url, "http://127.0.0.1:9093");
  EXPECT_EQ(o->alertmanager.timeout, std::chrono::milliseconds(500));
  EXPECT_EQ(o->alertmanager.resend_interval, std::chrono::seconds(30));
  EXPECT_EQ(o->alertmanager.labels, (std::map<std::string, std::string>{{"cluster", "prod-eu-1"}}));
  EXPECT_EQ(o->apf_static_names,
            (std::map<std::string, std::string>{{"1b2c-uid", "workload-low"}}));
  // Keys the file leaves out keep their defaults.
  EXPECT_EQ(o->detectors.list_storm.list_rate, 5.0);
  EXPECT_EQ(o->detectors.update_loop.object_sustain_s, 10);
  EXPECT_EQ(o->detectors.exempt_client.allow.users.size(), 5u);
}

TEST(ConfigFile, EmptySectionsAndEmptyFileChangeNothing) {
  for (const char* yaml : {"", "detectors:\n", "detectors:\n  list_storm:\n", "# only a comment\n"}) {
    auto o = Apply(yaml);
    ASSERT_TRUE(o.ok()) << yaml << ": " << o.error().message;
    EXPECT_EQ(EffectiveConfigYaml(*o), EffectiveConfigYaml(AgentOptions{})) << yaml;
  }
}

TEST(ConfigFile, EffectiveConfigReadsBackToTheSameOptions) {
  AgentOptions o;
  o.pids = {7};
  o.detectors.throttled_client.flat_tolerance = 0.05;
  o.detectors.stuck_finalizers.allow.users = {"system:node:*"};
  o.alertmanager.timeout = std::chrono::milliseconds(1500);
  o.apf_static_names = {{"uid-1", "exempt"}};
  std::string yaml = EffectiveConfigYaml(o);
  auto back = Apply(yaml);
  ASSERT_TRUE(back.ok()) << back.error().message << "\n" << yaml;
  EXPECT_EQ(EffectiveConfigYaml(*back), yaml);
  EXPECT_EQ(back->detectors.throttled_client.flat_tolerance, 0.05);
  EXPECT_EQ(back->alertmanager.timeout, std::chrono::milliseconds(1500));
}

// A key or value from the file reaches the error (and the log) as text: control and non-ASCII
// bytes as \xNN, at most 100 bytes of it.
TEST(ConfigFile, HostileKeysAndValuesAreShownEscapedAndCut) {
  auto escape = Apply("detectors:\n  \"\\e[2J\\u00e9\": 1\n");
  ASSERT_FALSE(escape.ok());
  const std::string& m = escape.error().message;
  EXPECT_EQ(m.substr(0, m.find(';')), "cfg.yaml: detectors.\\x1b[2J\\xc3\\xa9: unknown key (line 2)");
  EXPECT_EQ(m.find('\x1b'), std::string::npos) << m;

  auto value = Apply("detectors:\n  list_storm:\n    list_rate: \"5\\a\"\n");
  ASSERT_FALSE(value.ok());
  EXPECT_NE(value.error().message.find("'5\\x07'"), std::string::npos) << value.error().message;
  EXPECT_EQ(value.error().message.find('\a'), std::string::npos) << value.error().message;

  auto long_key = Apply("detectors:\n  " + std::string(300, 'k') + ": 1\n");
  ASSERT_FALSE(long_key.ok());
  const std::string& l = long_key.error().message;
  EXPECT_EQ(l.substr(0, l.find(';')),
            "cfg.yaml: detectors." + std::string(90, 'k') + "... (310 bytes): unknown key (line 2)");
}

TEST(ConfigFile, UnknownKeyNamesPathLineAndTheKnownKeys) {
  auto o = Apply(R"(
detectors:
  list_storm:
    list_rate: 5
    sustian_s: 20
)");
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.error().message,
            "cfg.yaml: detectors.list_storm.sustian_s: unknown key (line 5); known keys: enabled, "
            "list_rate, sustain_s, bytes_rate, expensive_weight, resolve_s, max_keys, allow");

  auto top = Apply("metrics:\n  address: 1.2.3.4:5\n");
  ASSERT_FALSE(top.ok());
  EXPECT_EQ(top.error().message.substr(0, top.error().message.find(';')), "cfg.yaml: metrics: unknown key (line 1)");
  EXPECT_NE(top.error().message.find("known keys: targets, metrics_address, health_address"),
            std::string::npos)
      << top.error().message;

  // update_loop has its `enabled` switch like every storm.
  auto off = Apply("detectors:\n  update_loop:\n    enabled: false\n");
  ASSERT_TRUE(off.ok()) << off.error().message;
  EXPECT_FALSE(off->detectors.update_loop.enabled);
  EXPECT_TRUE(AgentOptions{}.detectors.update_loop.enabled);
}

TEST(ConfigFile, BadValuesAreRefusedWithPathAndLine) {
  struct Case {
    std::string yaml;
    std::string error;  // the whole message
  } cases[] = {
      {"detectors:\n  list_storm:\n    sustain_s: abc\n",
       "cfg.yaml: detectors.list_storm.sustain_s: expected an integer, got 'abc' (line 3)"},
      {"detectors:\n  list_storm:\n    sustain_s: 1.5\n",
       "cfg.yaml: detectors.list_storm.sustain_s: expected an integer, got '1.5' (line 3)"},
      {"detectors:\n  list_storm:\n    list_rate: -1\n",
       "cfg.yaml: detectors.list_storm.list_rate: must be > 0, got -1 (line 3)"},
      {"detectors:\n  list_storm:\n    list_rate: [5]\n",
       "cfg.yaml: detectors.list_storm.list_rate: expected a number, got a list (line 3)"},
      {"detectors:\n  relist_churn:\n    window_s: 0\n",
       "cfg.yaml: detectors.relist_churn.window_s: must be between 1 and 3600, got 0 (line 3)"},
      {"detectors:\n  list_storm:\n    enabled: maybe\n",
       "cfg.yaml: detectors.list_storm.enabled: expected true or false, got 'maybe' (line 3)"},
      {"detectors:\n  list_storm:\n    allow: alice\n",
       "cfg.yaml: detectors.list_storm.allow: expected a list, got 'alice' (line 3)"},
      {"detectors:\n  list_storm:\n    allow:\n      - alice\n      - \"\"\n",
       "cfg.yaml: detectors.list_storm.allow: must not be empty (line 5)"},
      {"detectors: [list_storm]\n",
       "cfg.yaml: detectors: expected a map with keys update_loop, list_storm, exempt_client, "
       "conflict_storm, throttled_client, stuck_finalizers, relist_churn, etcd_range_storm, got a "
       "list (line 1)"},
      {"targets:\n  pids: [12, -3]\n",
       "cfg.yaml: targets.pids: must be between 1 and 4194304, got -3 (line 2)"},
      {"metrics_address: 9847\n",
       "cfg.yaml: metrics_address: expected host:port (line 1)"},
      {"health_address: \"localhost:0\"\n",
       "cfg.yaml: health_address: expected host:port with a port from 1 to 65535 (line 1)"},
      {"log_level: verbose\n",
       "cfg.yaml: log_level: expected trace, debug, info, warn, error, critical or off (line 1)"},
      {"capture:\n  ring_buffer_bytes: 100000\n",
       "cfg.yaml: capture.ring_buffer_bytes: must be a power of two >= 4096 (line 2)"},
      {"alertmanager:\n  url: alertmanager:9093\n",
       "cfg.yaml: alertmanager.url: expected an http:// or https:// URL (line 2)"},
      {"alertmanager:\n  labels:\n    severity: page\n",
       "cfg.yaml: alertmanager.labels: the alert sets this label itself (line 3)"},
      {"alertmanager:\n  labels:\n    team-name: x\n",
       "cfg.yaml: alertmanager.labels: not a label name (letters, digits and '_', not starting "
       "with a digit or __) (line 3)"},
      {"alertmanager:\n  timeout_s: 0\n",
       "cfg.yaml: alertmanager.timeout_s: must be between 0.001 and 300, got 0 (line 2)"},
      // Held in milliseconds: 0.0004 s would be stored as 0 and the printed config refused.
      {"alertmanager:\n  timeout_s: 0.0004\n",
       "cfg.yaml: alertmanager.timeout_s: must be between 0.001 and 300, got 0.0004 (line 2)"},
      {"limits:\n  max_clients: 0\n",
       "cfg.yaml: limits.max_clients: must be between 1 and 10000000, got 0 (line 2)"},
      {"log_level: info\nlog_level: debug\n", "cfg.yaml: log_level: duplicate key (line 2)"},
      {"- a\n- b\n", "cfg.yaml: expected a map of keys at the top level (line 1)"},
  };
  for (const Case& c : cases) {
    auto o = Apply(c.yaml);
    ASSERT_FALSE(o.ok()) << c.yaml;
    EXPECT_EQ(o.error().message, c.error) << c.yaml;
  }
}

TEST(ConfigFile, MalformedYamlNamesFileAndLine) {
  auto o = Apply("detectors:\n  list_storm:\n    sustain_s: [1, 2\n");
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.error().message.rfind("cfg.yaml: malformed YAML: ", 0), 0u) << o.error().message;
  EXPECT_NE(o.error().message.find("(line "), std::string::npos) << o.error().message;
}

// Both sides of each kind of bound.
TEST(ConfigFile, BoundsAreInclusiveWhereDocumented) {
  struct Case {
    std::string yaml;
    bool ok;
  } cases[] = {
      {"detectors: {list_storm: {sustain_s: 1}}", true},
      {"detectors: {list_storm: {sustain_s: 0}}", false},
      {"detectors: {list_storm: {sustain_s: 3600}}", true},
      {"detectors: {list_storm: {sustain_s: 3601}}", false},
      {"detectors: {list_storm: {list_rate: 0.001}}", true},
      {"detectors: {list_storm: {list_rate: 0}}", false},
      {"detectors: {list_storm: {list_rate: .nan}}", false},
      {"detectors: {conflict_storm: {conflict_ratio: 1}}", true},
      {"detectors: {conflict_storm: {conflict_ratio: 1.01}}", false},
      {"detectors: {conflict_storm: {conflict_ratio: 0}}", false},
      {"detectors: {throttled_client: {flat_tolerance: 0}}", true},
      {"detectors: {stuck_finalizers: {stuck_after_s: 86400}}", true},
      {"detectors: {stuck_finalizers: {stuck_after_s: 86401}}", false},
      {"capture: {ring_buffer_bytes: 4096}", true},
      {"capture: {ring_buffer_bytes: 2048}", false},
      {"alertmanager: {resend_interval_s: 1}", true},
      {"alertmanager: {resend_interval_s: 0.5}", false},
  };
  for (const Case& c : cases) {
    auto o = Apply(c.yaml);
    EXPECT_EQ(o.ok(), c.ok) << c.yaml << (o.ok() ? "" : ": " + o.error().message);
  }
}

TEST(ConfigFile, SmallestTimeoutSurvivesTheRoundTrip) {
  auto o = Apply("alertmanager: {timeout_s: 0.001}");
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->alertmanager.timeout.count(), 1);
  auto again = Apply(EffectiveConfigYaml(*o));
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(again->alertmanager.timeout.count(), 1);
}

// ---- the JSON Schema (stormwatch config-schema, the chart's values.schema.json) ----

// `value` (YAML flow text) at the key path `path`, as a one-key document.
std::string AtPath(const std::string& path, const std::string& value) {
  std::string doc = value;
  size_t end = path.size();
  while (true) {
    size_t dot = path.rfind('.', end - 1);
    size_t start = dot == std::string::npos ? 0 : dot + 1;
    doc = "{" + path.substr(start, end - start) + ": " + doc + "}";
    if (dot == std::string::npos) break;
    end = dot;
  }
  return doc;
}

std::string Num(double v) {
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}

// Every leaf of the schema with its key path.
void Leaves(const nlohmann::json& node, const std::string& path,
            const std::function<void(const std::string&, const nlohmann::json&)>& visit) {
  if (node.value("type", "") != "object" || !node.contains("properties")) {
    visit(path, node);
    return;
  }
  for (const auto& [name, child] : node["properties"].items()) {
    Leaves(child, path.empty() ? name : path + "." + name, visit);
  }
}

TEST(ConfigSchema, NamesEveryKeyAndRefusesUnknownOnes) {
  nlohmann::json schema = nlohmann::json::parse(ConfigJsonSchema());
  EXPECT_EQ(schema["$schema"], "http://json-schema.org/draft-07/schema#");
  std::vector<std::string> leaves;
  Leaves(schema, "", [&](const std::string& path, const nlohmann::json&) { leaves.push_back(path); });
  std::vector<std::string> keys = ConfigKeys();
  std::sort(keys.begin(), keys.end());
  std::sort(leaves.begin(), leaves.end());
  EXPECT_EQ(leaves, keys);
  // Every section refuses unknown keys, as the loader does.
  std::function<void(const nlohmann::json&, const std::string&)> sections =
      [&](const nlohmann::json& node, const std::string& path) {
        if (node.value("type", "") != "object" || !node.contains("properties")) return;
        EXPECT_EQ(node["additionalProperties"], false) << path;
        std::string probe = path.empty() ? "no_such_key" : path + ".no_such_key";
        EXPECT_FALSE(Apply(AtPath(probe, "1")).ok()) << probe;
        for (const auto& [name, child] : node["properties"].items()) {
          sections(child, path.empty() ? name : path + "." + name);
        }
      };
  sections(schema, "");
}

TEST(ConfigSchema, ExactFragments) {
  nlohmann::json schema = nlohmann::json::parse(ConfigJsonSchema());
  const nlohmann::json& detectors = schema["properties"]["detectors"]["properties"];
  EXPECT_EQ(detectors["list_storm"]["properties"]["sustain_s"],
            nlohmann::json::parse(R"({"type": "integer", "minimum": 1, "maximum": 3600})"));
  EXPECT_EQ(detectors["list_storm"]["properties"]["list_rate"],
            nlohmann::json::parse(R"({"type": "number", "exclusiveMinimum": 0})"));
  EXPECT_EQ(detectors["list_storm"]["properties"]["enabled"],
            nlohmann::json::parse(R"({"type": "boolean"})"));
  EXPECT_EQ(schema["properties"]["alertmanager"]["properties"]["timeout_s"],
            nlohmann::json::parse(R"({"type": "number", "minimum": 0.001, "maximum": 300})"));
  EXPECT_EQ(schema["properties"]["log_level"]["enum"].size(), 7u);
  EXPECT_EQ(schema["properties"]["capture"]["properties"]["ring_buffer_bytes"]["enum"].front(), 4096);
  EXPECT_EQ(schema["properties"]["capture"]["properties"]["ring_buffer_bytes"]["enum"].back(),
            1 << 30);
}

// What the schema says about each key's bounds, types and enums, the loader does: the bound
// itself is accepted, one step beyond is refused, a value of another type is refused.
TEST(ConfigSchema, AgreesWithTheLoaderOnEveryKey) {
  nlohmann::json schema = nlohmann::json::parse(ConfigJsonSchema());
  int checked = 0;
  auto expect = [&](const std::string& path, const std::string& value, bool ok) {
    auto o = Apply(AtPath(path, value));
    EXPECT_EQ(o.ok(), ok) << path << " = " << value << (o.ok() ? "" : ": " + o.error().message);
    ++checked;
  };
  Leaves(schema, "", [&](const std::string& path, const nlohmann::json& s) {
    const std::string type = s.value("type", "");
    if (type != "object") expect(path, "{x: 1}", false);  // a map is no other key's value
    if (s.contains("enum")) {
      for (const auto& v : s["enum"]) expect(path, v.is_string() ? v.get<std::string>() : v.dump(), true);
      expect(path, type == "string" ? "no-such-value" : "12345", false);
      return;
    }
    if (type == "integer" || type == "number") {
      double step = type == "integer" ? 1 : 0.0005;
      if (type == "integer") expect(path, "1.5", false);
      expect(path, "abc", false);
      if (s.contains("minimum")) {
        expect(path, Num(s["minimum"].get<double>()), true);
        expect(path, Num(s["minimum"].get<double>() - step), false);
      }
      if (s.contains("exclusiveMinimum")) {
        expect(path, Num(s["exclusiveMinimum"].get<double>()), false);
        expect(path, Num(s["exclusiveMinimum"].get<double>() + step), true);
      }
      if (s.contains("maximum")) {
        expect(path, Num(s["maximum"].get<double>()), true);
        expect(path, Num(s["maximum"].get<double>() + step), false);
      }
    } else if (type == "boolean") {
      expect(path, "true", true);
      expect(path, "maybe", false);
    } else if (type == "array") {
      expect(path, "[]", true);
      expect(path, "abc", false);
      if (s["items"]["type"] == "string") {
        expect(path, "[a, b]", true);
        expect(path, "[\"\"]", false);
      } else {
        expect(path, "[" + Num(s["items"]["minimum"].get<double>()) + "]", true);
        expect(path, "[" + Num(s["items"]["minimum"].get<double>() - 1) + "]", false);
      }
    } else if (type == "object") {
      expect(path, "{}", true);
      expect(path, "[a]", false);
      expect(path, "{cluster: \"\"}", false);  // values must not be empty
    } else if (type == "string") {
      expect(path, "[a]", false);
      if (s.contains("minLength")) expect(path, "\"\"", false);
    } else {
      ADD_FAILURE() << path << ": unexpected schema " << s.dump();
    }
  });
  EXPECT_GT(checked, 300);
}

TEST(ConfigFile, MissingFileIsNamed) {
  auto o = ApplyConfigFile("/nonexistent/stormwatch.yaml", AgentOptions{});
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.error().message, "/nonexistent/stormwatch.yaml: cannot read: No such file or directory");
}

}  // namespace
}  // namespace stormwatch
