#include "bytecomp/common/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/base/thread_annotations.h"
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
    case LogLevel::kDebug: return "D";
    case LogLevel::kInfo: return "I";
    case LogLevel::kWarning: return "W";
    case LogLevel::kError: return "E";
  }
  return "?";
}

}  // namespace

void SetLogIdentity(absl::string_view identity) {
  LogIdentity& id = Identity();
  absl::MutexLock lock(&id.mutex);
  id.name = std::string(identity);
}

LogLevel CurrentLogLevel() { return static_cast<LogLevel>(Level().load(std::memory_order_relaxed)); }

void SetLogLevel(LogLevel level) { Level().store(static_cast<int>(level)); }

void LogLine(LogLevel level, absl::string_view message) {
  using namespace std::chrono;
  const double t = duration<double>(system_clock::now().time_since_epoch()).count();
  std::string identity;
  {
    LogIdentity& id = Identity();
    absl::MutexLock lock(&id.mutex);
    identity = id.name;
  }
  // One fprintf per line keeps lines from different threads whole.
  std::fprintf(stderr, "%s %.3f [%s] %.*s\n", LevelName(level), t, identity.c_str(),
               static_cast<int>(message.size()), message.data());
}

namespace {

std::atomic<int64_t>& ProtobufLines() {
  static std::atomic<int64_t> lines{0};
  return lines;
}

}  // namespace

void RouteProtobufLogs() {
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char* file, int line,
                                     const std::string& message) {
    const int64_t n = ProtobufLines().fetch_add(1) + 1;
    if (n <= 20 || n % 1000 == 0) {
      LogAt(LogLevel::kWarning, "libprotobuf (", file, ":", line, "): ", message, " (line ", n,
            " from libprotobuf; the first 20 and every 1000th are printed)");
    }
  });
}

int64_t ProtobufLogLines() { return ProtobufLines().load(); }

}  // namespace bytecomp
