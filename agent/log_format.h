// The agent's own logs on stderr: spdlog's text lines (log_format: text), or one JSON object
// per line (log_format: json) for log pipelines that parse them: {"time": RFC 3339 UTC with
// milliseconds, "level", "logger", "msg"}. Messages can carry anything a target or a request
// put in them (quotes, control bytes, invalid UTF-8): the JSON formatter escapes them.
#pragma once

#include <spdlog/formatter.h>

#include <memory>
#include <string>
#include <string_view>

namespace stormwatch {

// `text` as the inside of a JSON string: " \ and control bytes escaped, invalid UTF-8 bytes
// replaced by U+FFFD (a JSON document must be valid UTF-8).
std::string JsonEscape(std::string_view text);
std::unique_ptr<spdlog::formatter> JsonLogFormatter();
// "" when `format` is text or json, else what is wrong.
std::string LogFormatProblem(std::string_view format);

// The default logger "stormwatch" on stderr at `level` in `format`; libbpf's own messages go
// through it too (else they would be lines of plain text among the JSON ones).
void ConfigureLogging(const std::string& format, const std::string& level);

}  // namespace stormwatch
