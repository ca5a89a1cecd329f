#include "server/base/log.h"

#include <atomic>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "lib/json.h"
#include "lib/sync.h"

namespace aside::server {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<bool> g_json{false};
aside::Mutex g_write_mu;

absl::string_view LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

void AppendTextValue(std::string& out, absl::string_view s) {
  bool quote = s.empty();
  for (char c : s) {
    if (c == ' ' || c == '"' || c == '=' ||
        static_cast<unsigned char>(c) < 0x20) {
      quote = true;
    }
  }
  if (quote) {
    AppendJsonString(&out, s);
  } else {
    out.append(s.data(), s.size());
  }
}

}  // namespace

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  for (LogLevel l :
       {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
    if (LevelName(l) == name) {
      return l;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown log level '", name, "' (allowed: debug, info, warn, error)"));
}

void SetLogLevel(LogLevel level) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

void SetLogJson(bool json) { g_json.store(json, std::memory_order_relaxed); }

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed);
}

void Log(LogLevel level, absl::string_view event,
         std::initializer_list<LogField> fields) {
  if (!LogEnabled(level)) {
    return;
  }
  const std::string ts = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                                          absl::UTCTimeZone());
  std::string line;
  if (g_json.load(std::memory_order_relaxed)) {
    line = absl::StrCat("{\"ts\":\"", ts, "\",\"level\":\"", LevelName(level),
                        "\",\"event\":");
    AppendJsonString(&line, event);
    for (const auto& [key, value] : fields) {
      line.push_back(',');
      AppendJsonString(&line, key);
      line.push_back(':');
      AppendJsonString(&line, value);
    }
    line += "}\n";
  } else {
    line = absl::StrCat("ts=", ts, " level=", LevelName(level), " event=");
    AppendTextValue(line, event);
    for (const auto& [key, value] : fields) {
      absl::StrAppend(&line, " ", key, "=");
      AppendTextValue(line, value);
    }
    line.push_back('\n');
  }
  aside::MutexLock lock(&g_write_mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace aside::server
