#include "stage_pipeline.h"

#include "bytecomp/common/partition.h"

namespace bytecomp::worker {

compress::CodecContext StageContext::ContextFor(const Operation& op, int64_t partition,
                                                uint32_t node) const {
  compress::CodecContext ctx;
  ctx.key = MakeKey(op.layout.tensor_id, static_cast<uint32_t>(partition));
  ctx.round = op.round;
  ctx.node = node;
  ctx.learning_rate = static_cast<float>(learning_rate->load());
  ctx.seed = strategies->SeedOf(op.plan.version);
  return ctx;
}

void StageContext::RunOnPool(const std::shared_ptr<Operation>& op, int64_t partition,
                             absl::AnyInvocable<void()> work) const {
  OperationTracker* results = tracker;
  absl::Status submitted = pool->Submit(
      op->request.priority,
      [results, op, partition, work = std::move(work)](absl::Status status) mutable {
        if (!status.ok()) {  // the pool shut down before running it
          results->ResultFailed(op, partition, status);
          return;
        }
        work();
      });
  if (!submitted.ok()) tracker->ResultFailed(op, partition, submitted);
}

}  // namespace bytecomp::worker
