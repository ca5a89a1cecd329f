// Structured logs: one line per event on stderr, either
//   ts=2026-11-29T18:30:00.123Z level=info event=listening grpc=0.0.0.0:50051
// or the same as a JSON object. Thread-safe.
#ifndef ASIDE_SERVER_BASE_LOG_H_
#define ASIDE_SERVER_BASE_LOG_H_

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace aside::server {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);

// Process-wide settings; set once at start-up.
void SetLogLevel(LogLevel level);
void SetLogJson(bool json);
bool LogEnabled(LogLevel level);

using LogField = std::pair<absl::string_view, std::string>;

void Log(LogLevel level, absl::string_view event,
         std::initializer_list<LogField> fields = {});

// Log for events a peer can cause at will (a NACK, a refused report or
// request, a backend's oversized answer): at most kThrottleBurst lines of
// one event at once, then kThrottlePerSecond a second. The next line of the
// event that is written says how many were left out before it
// (`suppressed=N`); LogSuppressed() counts them all, for
// aside_log_lines_suppressed_total{event}.
inline constexpr int kThrottleBurst = 20;
inline constexpr int kThrottlePerSecond = 1;
void LogThrottled(LogLevel level, absl::string_view event,
                  std::initializer_list<LogField> fields = {});
// Lines LogThrottled left out so far, by event.
std::vector<std::pair<std::string, uint64_t>> LogSuppressed();

}  // namespace aside::server

#endif  // ASIDE_SERVER_BASE_LOG_H_
