#include "bytecomp/common/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/stubs/logging.h"

namespace bytecomp {
namespace {

// The prefix of every line; set by the main thread, read by every thread that logs.
struct LogIdentity {
  absl::Mutex mutex;
  std::string name ABSL_GUARDED_BY(mutex) = "bytecomp";
};
// Never destroyed: threads may still log while the process exits.
LogIdentity& Identity() {
  static LogIdentity* const identity = new LogIdentity();
  return *identity;
}

LogLevel LevelFromEnv() {
  const char* env = std::getenv("BYTECOMP_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "warning") == 0) return LogLevel::kWarning;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& Level() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnv())};
  return level;
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "D";
    case LogLevel::kInfo:
      return "I";
    case LogLevel::kWarning:
      return "W";
    case LogLevel::kError:
      return "E";
  }
  return "?";
}

}  // namespace

void SetLogIdentity(absl::string_view identity) {
  LogIdentity& id = Identity();
  absl::MutexLock lock(&id.mutex);
  id.name = std::string(identity);
}

LogLevel CurrentLogLevel() {
  return static_cast<LogLevel>(Level().load(std::memory_order_relaxed));
}

void SetLogLevel(LogLevel level) { Level().store(static_cast<int>(level)); }

// "2026-11-23T16:38:42.147Z": ISO 8601, UTC, milliseconds.
std::string Iso8601Utc(std::chrono::system_clock::time_point when) {
  using namespace std::chrono;
  const int64_t ms = duration_cast<milliseconds>(when.time_since_epoch()).count();
  const time_t seconds = static_cast<time_t>(ms / 1000);
  std::tm utc;
  gmtime_r(&seconds, &utc);
  return absl::StrFormat("%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1,
                         utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                         static_cast<int>(ms % 1000));
}

void LogLine(LogLevel level, absl::string_view message) {
  const std::string t = Iso8601Utc(std::chrono::system_clock::now());
  std::string identity;
  {
    LogIdentity& id = Identity();
    absl::MutexLock lock(&id.mutex);
    identity = id.name;
  }
  // One fprintf per line keeps lines from different threads whole.
  std::fprintf(stderr, "%s %s [%s] %.*s\n", LevelName(level), t.c_str(), identity.c_str(),
               static_cast<int>(message.size()), message.data());
}

namespace {

std::atomic<int64_t>& ProtobufLines() {
  static std::atomic<int64_t> lines{0};
  return lines;
}

}  // namespace

void RouteProtobufLogs() {
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char* file, int line, const std::string& message) {
        const int64_t n = ProtobufLines().fetch_add(1) + 1;
        if (n <= 20 || n % 1000 == 0) {
          LogAt(LogLevel::kWarning, "libprotobuf (", file, ":", line, "): ", message, " (line ", n,
                " from libprotobuf; the first 20 and every 1000th are printed)");
        }
      });
}

int64_t ProtobufLogLines() { return ProtobufLines().load(); }

}  // namespace bytecomp
