#include "server/base/log.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <map>
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

// LogThrottled's token bucket of one event, and what it left out.
struct Throttle {
  double tokens = kThrottleBurst;
  absl::Time last;
  uint64_t pending = 0;  // left out since the event's last line
  uint64_t total = 0;
};
// By event name; events are the code's own literals, so few. Under the
// write lock, taken apart from the write itself.
std::map<std::string, Throttle, std::less<>>& Throttles()
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_write_mu) {
  static auto* throttles = new std::map<std::string, Throttle, std::less<>>();
  return *throttles;
}

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

namespace {

void Write(LogLevel level, absl::string_view event,
           std::initializer_list<LogField> fields,
           const LogField* extra = nullptr) {
  const std::string ts = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                                          absl::UTCTimeZone());
  std::string line;
  if (g_json.load(std::memory_order_relaxed)) {
    line = absl::StrCat("{\"ts\":\"", ts, "\",\"level\":\"", LevelName(level),
                        "\",\"event\":");
    AppendJsonString(&line, event);
    auto append = [&line](const LogField& field) {
      line.push_back(',');
      AppendJsonString(&line, field.first);
      line.push_back(':');
      AppendJsonString(&line, field.second);
    };
    for (const LogField& field : fields) append(field);
    if (extra != nullptr) append(*extra);
    line += "}\n";
  } else {
    line = absl::StrCat("ts=", ts, " level=", LevelName(level), " event=");
    AppendTextValue(line, event);
    auto append = [&line](const LogField& field) {
      absl::StrAppend(&line, " ", field.first, "=");
      AppendTextValue(line, field.second);
    };
    for (const LogField& field : fields) append(field);
    if (extra != nullptr) append(*extra);
    line.push_back('\n');
  }
  aside::MutexLock lock(&g_write_mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace

void Log(LogLevel level, absl::string_view event,
         std::initializer_list<LogField> fields) {
  if (LogEnabled(level)) {
    Write(level, event, fields);
  }
}

void LogThrottled(LogLevel level, absl::string_view event,
                  std::initializer_list<LogField> fields) {
  if (!LogEnabled(level)) {
    return;
  }
  uint64_t left_out = 0;
  {
    aside::MutexLock lock(&g_write_mu);
    auto& throttles = Throttles();
    auto it = throttles.find(event);
    if (it == throttles.end()) {
      it = throttles.emplace(std::string(event), Throttle{}).first;
      it->second.last = absl::Now();
    }
    Throttle& t = it->second;
    const absl::Time now = absl::Now();
    t.tokens = std::min<double>(
        kThrottleBurst,
        t.tokens + absl::ToDoubleSeconds(now - t.last) * kThrottlePerSecond);
    t.last = now;
    if (t.tokens < 1) {
      ++t.pending;
      ++t.total;
      return;
    }
    t.tokens -= 1;
    left_out = std::exchange(t.pending, 0);
  }
  if (left_out == 0) {
    Write(level, event, fields);
  } else {
    const LogField extra{"suppressed", absl::StrCat(left_out)};
    Write(level, event, fields, &extra);
  }
}

std::vector<std::pair<std::string, uint64_t>> LogSuppressed() {
  std::vector<std::pair<std::string, uint64_t>> out;
  aside::MutexLock lock(&g_write_mu);
  for (const auto& [event, t] : Throttles()) {
    out.emplace_back(event, t.total);
  }
  return out;
}

}  // namespace aside::server
