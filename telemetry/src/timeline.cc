#include "bytecomp/telemetry/timeline.h"

#include <pthread.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/logging.h"

namespace bytecomp::telemetry {

// One recording thread's events: a single-producer single-consumer ring. The thread writes
// `head`, the writer (under mu_) advances `tail`.
struct Timeline::Ring {
  static constexpr uint64_t kCapacity = 8192;  // about 400 KB per thread
  TimelineEvent events[kCapacity];
  std::atomic<uint64_t> head{0};
  std::atomic<uint64_t> tail{0};
  int tid = 0;
  std::string thread_name;
};

namespace {

std::atomic<uint64_t> next_serial{1};

// Each thread's rings, by timeline serial: a thread that records into a few timelines in turn
// (tests run several nodes in one process) finds its ring without a lock.
struct ThreadRings {
  static constexpr int kSlots = 4;
  uint64_t serial[kSlots] = {};
  void* ring[kSlots] = {};
  int next = 0;
};
thread_local ThreadRings this_thread_rings;

void AppendJsonString(std::string& out, absl::string_view s) {
  out += '"';
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(&out, "\\u00", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
    } else {
      out += c;
    }
  }
  out += '"';
}

}  // namespace

const char* StageName(Stage stage) {
  switch (stage) {
    case Stage::kReady:
      return "ready";
    case Stage::kQueued:
      return "queued";
    case Stage::kEncode:
      return "encode";
    case Stage::kPushSent:
      return "push sent";
    case Stage::kRoundTrip:
      return "push..pull";
    case Stage::kSummed:
      return "summed on server";
    case Stage::kPullReceived:
      return "pull received";
    case Stage::kDecode:
      return "decode";
    case Stage::kDone:
      return "done";
    case Stage::kNumStages:
      break;
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<Timeline>> Timeline::Open(const std::string& path,
                                                         const std::string& process_name) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeline: cannot write ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<Timeline>(new Timeline(path, file, process_name));
}

Timeline::Timeline(std::string path, std::FILE* file, std::string process_name)
    : path_(std::move(path)),
      process_name_(std::move(process_name)),
      serial_(next_serial.fetch_add(1)),
      file_(file) {
  std::string head = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  absl::StrAppend(&head, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":");
  AppendJsonString(head, process_name_);
  head += "}}";
  std::fwrite(head.data(), 1, head.size(), file);
  writer_ = std::thread([this] { WriterLoop(); });
}

Timeline::~Timeline() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    wake_.Signal();
  }
  writer_.join();
  Flush();
  absl::MutexLock lock(&mu_);
  std::string tail = absl::StrCat("\n],\"otherData\":{\"process\":");
  AppendJsonString(tail, process_name_);
  absl::StrAppend(
      &tail, ",\"clock_offset_us\":", clock_ != nullptr ? clock_->offset_us() : offset_us_.load(),
      ",\"dropped_events\":", dropped_.load(), "}}\n");
  std::fwrite(tail.data(), 1, tail.size(), file_);
  std::fclose(file_);
  file_ = nullptr;
}

uint16_t Timeline::CodecId(absl::string_view codec) {
  if (codec.empty()) return 0;
  const int known = codec_count_.load(std::memory_order_acquire);
  for (int i = 1; i < known; ++i) {
    if (codecs_[i] == codec) return static_cast<uint16_t>(i);
  }
  absl::MutexLock lock(&mu_);
  const int count = codec_count_.load();
  for (int i = 1; i < count; ++i) {
    if (codecs_[i] == codec) return static_cast<uint16_t>(i);
  }
  if (count == kMaxCodecs) return 0;
  codecs_[count] = std::string(codec);
  codec_count_.store(count + 1, std::memory_order_release);
  return static_cast<uint16_t>(count);
}

void Timeline::FollowClock(std::shared_ptr<const ClockOffset> clock) {
  absl::MutexLock lock(&mu_);
  clock_ = std::move(clock);
}

void Timeline::NameTensor(uint32_t tensor_id, absl::string_view name) {
  absl::MutexLock lock(&mu_);
  tensor_names_[tensor_id] = std::string(name);
}

Timeline::Ring* Timeline::RingOfThisThread() {
  ThreadRings& mine = this_thread_rings;
  for (int i = 0; i < ThreadRings::kSlots; ++i) {
    if (mine.serial[i] == serial_) return static_cast<Ring*>(mine.ring[i]);
  }
  Ring* ring = Register();
  const int slot = mine.next;
  mine.next = (mine.next + 1) % ThreadRings::kSlots;
  mine.serial[slot] = serial_;
  mine.ring[slot] = ring;
  return ring;
}

Timeline::Ring* Timeline::Register() {
  auto ring = std::make_unique<Ring>();
  char name[32] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  ring->thread_name = name;
  absl::MutexLock lock(&mu_);
  ring->tid = static_cast<int>(rings_.size()) + 1;
  rings_.push_back(std::move(ring));
  return rings_.back().get();
}

void Timeline::Record(const TimelineEvent& event) {
  Ring* ring = RingOfThisThread();
  const uint64_t head = ring->head.load(std::memory_order_relaxed);
  if (head - ring->tail.load(std::memory_order_acquire) >= Ring::kCapacity) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  ring->events[head % Ring::kCapacity] = event;
  ring->head.store(head + 1, std::memory_order_release);
}

void Timeline::WriterLoop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    wake_.WaitWithTimeout(&mu_, absl::Milliseconds(50));
    if (stop_) break;
    mu_.Unlock();
    Flush();
    mu_.Lock();
  }
}

void Timeline::Append(std::string& out, const TimelineEvent& e, int tid) {
  const int64_t ts = e.start_us;
  const char* name = StageName(e.stage);
  const bool async = e.stage == Stage::kRoundTrip || e.stage == Stage::kSummed;
  out += ",\n";
  if (async) {
    // Overlapping spans (several partitions in flight) as async events: one row each in viewers.
    const std::string id = absl::StrCat("\"", e.tensor_id, ".", e.partition, ".", e.round, "\"");
    absl::StrAppend(&out, "{\"name\":\"", name, "\",\"cat\":\"", name,
                    "\",\"ph\":\"b\",\"id\":", id, ",\"pid\":0,\"tid\":", tid, ",\"ts\":", ts);
    AppendArgs(out, e);
    absl::StrAppend(&out, "},\n{\"name\":\"", name, "\",\"cat\":\"", name,
                    "\",\"ph\":\"e\",\"id\":", id, ",\"pid\":0,\"tid\":", tid,
                    ",\"ts\":", ts + std::max<int64_t>(e.duration_us, 0), "}");
    return;
  }
  absl::StrAppend(&out, "{\"name\":\"", name, "\",\"cat\":\"", name, "\",\"pid\":0,\"tid\":", tid,
                  ",\"ts\":", ts);
  if (e.duration_us >= 0) {
    absl::StrAppend(&out, ",\"ph\":\"X\",\"dur\":", e.duration_us);
  } else {
    absl::StrAppend(&out, ",\"ph\":\"i\",\"s\":\"t\"");
  }
  AppendArgs(out, e);
  out += "}";
}

void Timeline::AppendArgs(std::string& out, const TimelineEvent& e) {
  absl::StrAppend(&out, ",\"args\":{\"tensor\":");
  auto named = tensor_names_.find(e.tensor_id);
  if (named != tensor_names_.end()) {
    AppendJsonString(out, named->second);
  } else {
    absl::StrAppend(&out, "\"tensor ", e.tensor_id, "\"");
  }
  absl::StrAppend(&out, ",\"tensor_id\":", e.tensor_id, ",\"partition\":", e.partition,
                  ",\"round\":", e.round, ",\"bytes\":", e.bytes, ",\"codec\":\"",
                  e.codec == 0 ? "none" : codecs_[e.codec], "\"}");
}

void Timeline::Flush() {
  absl::MutexLock lock(&mu_);
  if (file_ == nullptr) return;
  std::string out;
  const int64_t offset = clock_ != nullptr ? clock_->offset_us() : offset_us_.load();
  if (offset != written_offset_us_) {
    // The estimate improved: `bytecomp-timeline merge` uses the last one written.
    absl::StrAppend(&out,
                    ",\n{\"name\":\"clock_offset\",\"ph\":\"M\",\"pid\":0,\"args\":{"
                    "\"offset_us\":",
                    offset, "}}");
    written_offset_us_ = offset;
  }
  for (const std::unique_ptr<Ring>& ring : rings_) {
    if (!ring->thread_name.empty()) {
      absl::StrAppend(&out,
                      ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":", ring->tid,
                      ",\"args\":{\"name\":");
      AppendJsonString(out, ring->thread_name);
      out += "}}";
      ring->thread_name.clear();  // written once
    }
    const uint64_t head = ring->head.load(std::memory_order_acquire);
    uint64_t tail = ring->tail.load(std::memory_order_relaxed);
    for (; tail < head; ++tail) Append(out, ring->events[tail % Ring::kCapacity], ring->tid);
    ring->tail.store(tail, std::memory_order_release);
  }
  if (!out.empty()) {
    std::fwrite(out.data(), 1, out.size(), file_);
    std::fflush(file_);
  }
}

std::unique_ptr<Timeline> OpenNodeTimeline(const std::string& config_dir, absl::string_view role,
                                           int rank, std::shared_ptr<const ClockOffset> clock) {
  const std::string path = TimelinePath(config_dir, role, rank);
  if (path.empty()) return nullptr;
  absl::StatusOr<std::unique_ptr<Timeline>> opened =
      Timeline::Open(path, absl::StrCat(role, " ", rank));
  if (!opened.ok()) {
    BC_LOG_WARNING(opened.status().message(), "; no timeline");
    return nullptr;
  }
  (*opened)->FollowClock(std::move(clock));
  BC_LOG_INFO("writing the timeline to ", path);
  return *std::move(opened);
}

std::string TimelinePath(const std::string& config_dir, absl::string_view role, int rank) {
  const char* env = std::getenv("BYTECOMP_TIMELINE");
  std::string dir = env != nullptr && *env != '\0' ? std::string(env) : config_dir;
  if (dir.empty()) return "";
  ::mkdir(dir.c_str(), 0755);  // may exist; Open reports what does not work
  return absl::StrCat(dir, "/", role, "-", rank, ".json");
}

}  // namespace bytecomp::telemetry
