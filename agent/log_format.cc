#include "agent/log_format.h"

#include <bpf/libbpf.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdarg>
#include <cstdio>

namespace stormwatch {
namespace {

// Length of the valid UTF-8 sequence at s[i], 0 when there is none (RFC 3629: no overlongs,
// no surrogates, nothing above U+10FFFF).
size_t Utf8Length(std::string_view s, size_t i) {
  auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = at(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((at(i + k) & 0xC0) != 0x80) return 0;
  }
  if (n == 2 && c < 0xC2) return 0;                              // overlong
  if (n == 3 && c == 0xE0 && at(i + 1) < 0xA0) return 0;         // overlong
  if (n == 3 && c == 0xED && at(i + 1) >= 0xA0) return 0;        // surrogate
  if (n == 4 && c == 0xF0 && at(i + 1) < 0x90) return 0;         // overlong
  if (n == 4 && (c > 0xF4 || (c == 0xF4 && at(i + 1) >= 0x90))) return 0;  // > U+10FFFF
  return n;
}

template <typename Out>
void AppendEscaped(std::string_view s, Out& out) {
  auto put = [&](std::string_view piece) { out.append(piece.data(), piece.data() + piece.size()); };
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': put("\\\""); ++i; continue;
      case '\\': put("\\\\"); ++i; continue;
      case '\n': put("\\n"); ++i; continue;
      case '\r': put("\\r"); ++i; continue;
      case '\t': put("\\t"); ++i; continue;
    }
    if (c < 0x20 || c == 0x7F) {
      char u[8];
      std::snprintf(u, sizeof(u), "\\u%04x", c);
      put(u);
      ++i;
      continue;
    }
    size_t n = Utf8Length(s, i);
    if (n == 0) {
      put("\\ufffd");
      ++i;
      continue;
    }
    put(s.substr(i, n));
    i += n;
  }
}

// %* in the pattern: the message, escaped.
class EscapedMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    AppendEscaped(std::string_view(msg.payload.data(), msg.payload.size()), dest);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<EscapedMessage>();
  }
};

// %N: the logger's name, escaped (names are ours, but a line must parse whatever they are).
class EscapedLoggerName final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    AppendEscaped(std::string_view(msg.logger_name.data(), msg.logger_name.size()), dest);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<EscapedLoggerName>();
  }
};

int LibbpfPrint(enum libbpf_print_level level, const char* format, va_list args) {
  char buf[1024];
  int n = std::vsnprintf(buf, sizeof(buf), format, args);
  std::string_view text(buf, n < 0 ? 0 : std::min<size_t>(n, sizeof(buf) - 1));
  while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  auto spd_level = level == LIBBPF_WARN ? spdlog::level::warn
                   : level == LIBBPF_INFO ? spdlog::level::info
                                          : spdlog::level::debug;
  spdlog::log(spd_level, "libbpf: {}", text);
  return n;
}

}  // namespace

std::string JsonEscape(std::string_view text) {
  std::string out;
  AppendEscaped(text, out);
  return out;
}

std::unique_ptr<spdlog::formatter> JsonLogFormatter() {
  auto f = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  f->add_flag<EscapedMessage>('*').add_flag<EscapedLoggerName>('N').set_pattern(
      R"({"time":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","logger":"%N","msg":"%*"})");
  return f;
}

std::string LogFormatProblem(std::string_view format) {
  return format == "text" || format == "json" ? "" : "expected text or json";
}

void ConfigureLogging(const std::string& format, const std::string& level) {
  std::shared_ptr<spdlog::logger> logger;
  if (format == "json") {
    logger = spdlog::stderr_logger_mt("stormwatch");  // no colour codes inside the JSON
    logger->set_formatter(JsonLogFormatter());
  } else {
    logger = spdlog::stderr_color_mt("stormwatch");
  }
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(level));
  libbpf_set_print(LibbpfPrint);
}

}  // namespace stormwatch
