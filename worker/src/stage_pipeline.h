// The stages of an operation on this worker, around the network exchange that the data loop
// does: before the push (encode, or hand the memory over as it is) and after the pull reply
// (decode or copy into the caller's tensor). Two implementations, picked per operation:
//   HostPipeline (host_pipeline.h)     host tensors: the codec pool works on the caller's memory
//   DevicePipeline (device_pipeline.h) device tensors: stages on the device, or on the host
//                                      through a pinned copy (the host stages reused)
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/functional/any_invocable.h"
#include "bytecomp/compress/codec.h"
#include "bytecomp/cpu_offload.h"
#include "bytecomp/telemetry.h"
#include "bytecomp/worker/engine.h"
#include "bytecomp/worker/wake_queue.h"
#include "data_commands.h"
#include "operation.h"
#include "operation_tracker.h"
#include "strategy_switch.h"
#include "traffic_counters.h"
#include "zmq.hpp"

namespace bytecomp::worker {

// The codec a pull reply of `plan` carries: the pull codec two-way, else raw values.
inline absl::string_view PullCodecName(const compress::TensorPlan& plan) {
  return plan.two_way() ? absl::string_view(plan.pull.name()) : absl::string_view();
}

// What the stages use of the engine, given once at construction.
struct StageContext {
  int rank = 0;         // this worker: codec contexts, per-node random streams
  int num_workers = 0;  // averaging divides by it
  const StrategySwitch* strategies = nullptr;          // seeds of strategy versions
  const std::atomic<double>* learning_rate = nullptr;  // for codecs that need it
  cpu_offload::PriorityThreadPool* pool = nullptr;     // the codec pool
  WakeQueue<DataCommand>* to_data_thread = nullptr;    // pushes leave through the data loop
  OperationTracker* tracker = nullptr;                 // reports each partition's result
  TrafficCounters* traffic = nullptr;
  telemetry::Timeline* timeline = nullptr;  // null: no timeline

  // The codec context of `partition` of `op`; `node` is this worker (encode) or the server
  // whose encoding is decoded (two-way pulls).
  compress::CodecContext ContextFor(const Operation& op, int64_t partition, uint32_t node) const;
  // Runs `work` on the codec pool at the operation's priority. If the pool refuses (it shut
  // down), the partition's result fails.
  void RunOnPool(const std::shared_ptr<Operation>& op, int64_t partition,
                 absl::AnyInvocable<void()> work) const;
};

// Records a stage of `op`'s partition in `timeline` (duration < 0: an instant), with the
// partition's round, the operation's push codec and `bytes`.
void TraceStage(telemetry::Timeline& timeline, const Operation& op, int64_t partition,
                telemetry::Stage stage, int64_t start_us, int64_t duration_us, int64_t bytes);

class StagePipeline {
 public:
  virtual ~StagePipeline() = default;
  // The operation started (tensor_table.h: its round, plan and layout are set, its events
  // expected): bring every partition to the data thread, as a StartOperation (uncompressed)
  // or as EncodedPushes. Runs on the thread that started it, outside every engine lock.
  virtual void Start(const std::shared_ptr<Operation>& op) = 0;
  // The pull reply of `partition` (`stage`: two-round codecs) arrived from `server`, on the
  // data thread: hand it to the stages that write it into the caller's tensor, which report
  // the partition's result (or, after PowerSGD's stage 1, push stage 2).
  virtual void Pulled(const std::shared_ptr<Operation>& op, int64_t partition, uint32_t stage,
                      zmq::message_t payload, int server) = 0;
  // The partition's result is in the host stages' memory (Operation::host_data; the
  // collectives' sums are written there on the codec pool): report it, for a device tensor
  // once it is copied back to the device.
  virtual void ResultWritten(const std::shared_ptr<Operation>& op, int64_t partition) = 0;
};

}  // namespace bytecomp::worker
