// Minimal leveled logging to stderr with the process's role and rank in every line:
//   I 2026-11-23T16:38:42.147Z [server 1] serving data on tcp://10.0.0.2:41234 ...
// (level, ISO 8601 UTC time with milliseconds, identity, message).
// Abseil 2022-06 (Debian 12) has no absl/log, so this is ours.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/strings/str_cat.h"

namespace bytecomp {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Sets the prefix printed before every line, e.g. "server 1". Thread-safe.
void SetLogIdentity(absl::string_view identity);
// Level from BYTECOMP_LOG_LEVEL (debug|info|warning|error), default info.
LogLevel CurrentLogLevel();
void SetLogLevel(LogLevel level);
void LogLine(LogLevel level, absl::string_view message);
// The timestamp format of log lines: "2026-11-23T16:38:42.147Z".
std::string Iso8601Utc(std::chrono::system_clock::time_point when);

// Sends libprotobuf's own log lines through LogLine as warnings: the first 20, then every
// 1000th. A peer's message with a string field that is not UTF-8 makes libprotobuf log one
// line per message, so without this a peer could flood a daemon's log. For the daemons'
// main(); a library inside someone else's process leaves protobuf's logging to its host.
void RouteProtobufLogs();
// Lines libprotobuf logged since RouteProtobufLogs (printed or not).
int64_t ProtobufLogLines();

template <typename... Args>
void LogAt(LogLevel level, const Args&... args) {
  if (level < CurrentLogLevel()) return;
  LogLine(level, absl::StrCat(args...));
}

}  // namespace bytecomp

#define BC_LOG_DEBUG(...) ::bytecomp::LogAt(::bytecomp::LogLevel::kDebug, __VA_ARGS__)
#define BC_LOG_INFO(...) ::bytecomp::LogAt(::bytecomp::LogLevel::kInfo, __VA_ARGS__)
#define BC_LOG_WARNING(...) ::bytecomp::LogAt(::bytecomp::LogLevel::kWarning, __VA_ARGS__)
#define BC_LOG_ERROR(...) ::bytecomp::LogAt(::bytecomp::LogLevel::kError, __VA_ARGS__)
