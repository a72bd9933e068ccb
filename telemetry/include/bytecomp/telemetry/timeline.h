// A node's runtime timeline: every partition's stages as Chrome trace events (chrome://tracing,
// Perfetto), written to one JSON file per node while the job runs.
//
// Cost: off, the hooks are a null check on a Timeline pointer. On, Record() takes no lock and
// allocates nothing after a thread's first event: each recording thread owns a fixed ring of
// events (single producer), and a writer thread drains every ring every 50 ms into the file.
// A full ring drops the event and counts it (the file's "dropped_events").
//
// Clock: events are stamped and written with the node's wall clock (CLOCK_REALTIME,
// microseconds). The offset to the scheduler's clock, estimated from the node's clock probes
// (common/clock_offset.h), is written as a "clock_offset" metadata event whenever the estimate
// improves and in the file's otherData at the end; `bytecomp-timeline merge` adds the last one
// to every event of the file, so that every node's events are on the scheduler's clock.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "bytecomp/common/clock_offset.h"

namespace bytecomp::telemetry {

// A partition's stages, in the order a gradient travels (DESIGN.md).
enum class Stage : uint8_t {
  kReady = 0,     // instant: push_pull was called
  kQueued,        // span: from the call until its stages started (previous round, declaration)
  kEncode,        // span: the codec encoded the partition
  kPushSent,      // instant: the data thread handed the push (and its pull) to ZeroMQ
  kRoundTrip,     // async span: push sent .. pull reply received (push, server, pull)
  kSummed,        // async span (server): first push of the round .. every push summed
  kPullReceived,  // instant: the pull reply arrived
  kDecode,        // span: decoded (or copied) into the caller's tensor
  kDone,          // instant: the operation completed
  kNumStages,
};
const char* StageName(Stage stage);

struct TimelineEvent {
  int64_t start_us = 0;      // the node's wall clock (Timeline::NowUs)
  int64_t duration_us = -1;  // < 0: an instant event
  uint64_t round = 0;
  int64_t bytes = 0;  // payload bytes of the stage (0: not known)
  uint32_t tensor_id = 0;
  uint32_t partition = 0;
  uint16_t codec = 0;  // Timeline::CodecId; 0: uncompressed
  Stage stage = Stage::kReady;
};

class Timeline {
 public:
  // Creates (truncates) `path` and starts the writer. `process_name` names the node in
  // viewers ("worker 0", "server 1").
  static absl::StatusOr<std::unique_ptr<Timeline>> Open(const std::string& path,
                                                        const std::string& process_name);
  // Stops the writer and completes the file. Every thread that records must have stopped.
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // The clock events are stamped with: CLOCK_REALTIME in microseconds (a vDSO call).
  static int64_t NowUs() { return ClockOffset::NowUs(); }

  // Node clock -> reference (scheduler) clock, added to every event written from now on.
  void SetClockOffsetUs(int64_t offset_us) { offset_us_.store(offset_us); }
  // The same, from an estimate that improves as the node's clock probes come back.
  void FollowClock(std::shared_ptr<const ClockOffset> clock) ABSL_LOCKS_EXCLUDED(mu_);
  // A small id for a codec name, stable for the file's life; "" is 0. Lock-free for names
  // seen before (a short scan), a lock the first time.
  uint16_t CodecId(absl::string_view codec) ABSL_LOCKS_EXCLUDED(mu_);
  // The name written with a tensor's events.
  void NameTensor(uint32_t tensor_id, absl::string_view name) ABSL_LOCKS_EXCLUDED(mu_);

  // Thread-safe, wait-free for the caller (see the top of this file).
  void Record(const TimelineEvent& event);
  // Writes what the rings hold now (the writer does this every 50 ms; tests call it).
  void Flush() ABSL_LOCKS_EXCLUDED(mu_);

  int64_t dropped_events() const { return dropped_.load(); }
  const std::string& path() const { return path_; }

 private:
  struct Ring;
  static constexpr int kMaxCodecs = 64;

  Timeline(std::string path, std::FILE* file, std::string process_name);
  Ring* RingOfThisThread();
  Ring* Register() ABSL_LOCKS_EXCLUDED(mu_);
  void WriterLoop();
  void Append(std::string& out, const TimelineEvent& event, int tid)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AppendArgs(std::string& out, const TimelineEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  const std::string process_name_;
  const uint64_t serial_;  // tells this timeline's rings from an earlier one's at the same address
  std::atomic<int64_t> offset_us_{0};
  std::atomic<int64_t> dropped_{0};

  // Codec names: published by count, each slot written once before the count covers it.
  std::atomic<int> codec_count_{1};
  std::string codecs_[kMaxCodecs];

  absl::Mutex mu_;
  std::FILE* file_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Ring>> rings_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const ClockOffset> clock_ ABSL_GUARDED_BY(mu_);
  int64_t written_offset_us_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint32_t, std::string> tensor_names_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar wake_;
  std::thread writer_;
};

// A node's timeline at TimelinePath(config_dir, role, rank), following `clock`; null when none
// is asked for or the file cannot be written (logged either way: where it goes, or why not).
std::unique_ptr<Timeline> OpenNodeTimeline(const std::string& config_dir, absl::string_view role,
                                           int rank, std::shared_ptr<const ClockOffset> clock);

// Where a node writes its timeline: $BYTECOMP_TIMELINE, else `config_dir` (the config's
// timeline_dir); empty: none. The file is DIR/<role>-<rank>.json.
std::string TimelinePath(const std::string& config_dir, absl::string_view role, int rank);

}  // namespace bytecomp::telemetry
