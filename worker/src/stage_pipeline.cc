#include "stage_pipeline.h"

#include "bytecomp/common/partition.h"

namespace bytecomp::worker {

compress::CodecContext StageContext::ContextFor(const Operation& op, int64_t partition,
                                                uint32_t node) const {
  compress::CodecContext ctx;
  ctx.key = MakeKey(op.layout().tensor_id, static_cast<uint32_t>(partition));
  ctx.round = op.round();
  ctx.node = node;
  ctx.learning_rate = static_cast<float>(learning_rate->load());
  ctx.seed = strategies->SeedOf(op.plan().version);
  return ctx;
}

void StageContext::RunOnPool(const std::shared_ptr<Operation>& op, int64_t partition,
                             absl::AnyInvocable<void()> work) const {
  OperationTracker* results = tracker;
  absl::Status submitted =
      pool->Submit(op->request.priority,
                   [results, op, partition, work = std::move(work)](absl::Status status) mutable {
                     if (!status.ok()) {  // the pool shut down before running it
                       results->ResultFailed(op, partition, status);
                       return;
                     }
                     work();
                   });
  if (!submitted.ok()) tracker->ResultFailed(op, partition, submitted);
}

void TraceStage(telemetry::Timeline& timeline, const Operation& op, int64_t partition,
                telemetry::Stage stage, int64_t start_us, int64_t duration_us, int64_t bytes) {
  telemetry::TimelineEvent e;
  e.start_us = start_us;
  e.duration_us = duration_us;
  e.round = op.round();
  e.bytes = bytes;
  e.tensor_id = op.layout().tensor_id;
  e.partition = static_cast<uint32_t>(partition);
  e.codec = op.plan().compressed() ? timeline.CodecId(op.plan().push.name()) : 0;
  e.stage = stage;
  timeline.Record(e);
}

}  // namespace bytecomp::worker
