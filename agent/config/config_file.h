// The agent's YAML configuration file (--config FILE; docs/configuration.md). One schema
// table maps every key path ("detectors.list_storm.sustain_s") to a parser that checks type
// and range and stores the value, and to a printer. Unknown keys, wrong types, out-of-range
// values and malformed YAML are refused with the file, the key path and the line.
// docs/stormwatch.example.yaml holds every key with its default (a unit test keeps it so).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "agent/core/result.h"
#include "agent/config/agent_options.h"

namespace stormwatch {

// Applies the YAML document `yaml` over `options`: keys it sets replace those values, others
// keep theirs. `source` names the document in errors (the file path).
Result<AgentOptions> ApplyConfigYaml(const std::string& yaml, const std::string& source,
                                     AgentOptions options);
// Reads `path` and applies it as above.
Result<AgentOptions> ApplyConfigFile(const std::string& path, AgentOptions options);

// Every key path the file accepts, in schema order.
std::vector<std::string> ConfigKeys();
// The configuration `options` amount to, with every key: logged at start-up, and what the
// example file is checked against.
std::string EffectiveConfigYaml(const AgentOptions& options);

// What the file accepts, as a JSON Schema (draft-07) document: every key with its type and
// range, unknown keys refused. `stormwatch config-schema` prints it; the Helm chart's
// values.schema.json carries it under `config` (a test keeps the two equal).
std::string ConfigJsonSchema();

// Checks shared by the file and the flags: "" when the value is usable, else what is wrong.
std::string AddressProblem(std::string_view host_port);
std::string RingBufferBytesProblem(size_t bytes);
std::string LogLevelProblem(std::string_view level);
std::string HttpUrlProblem(std::string_view url);

}  // namespace stormwatch
