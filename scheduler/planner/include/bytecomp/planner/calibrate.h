// Measuring a codec cost table on this host (bytecomp-plan --calibrate). Implemented in the
// target bytecomp_planner_calibrate, which links the codec registry (compress/); the planner
// library itself does not depend on the codecs.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "planner.pb.h"

namespace bytecomp::planner {

struct CalibrationOptions {
  // Input sizes in bytes (fp32 inputs of size/4 elements), increasing.
  std::vector<int64_t> sizes = {4 << 10, 64 << 10, 1 << 20, 16 << 20};
  // The GPU's (CalibrateGpuCosts), up to 64 MiB: on a GPU 16 MiB takes little more than the
  // fixed costs of a call, so its curve needs a larger point to show the device's speed.
  std::vector<int64_t> gpu_sizes = {4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
  // Each point repeats encode (and decode) until this much time has passed, at least 3
  // times; the median is kept.
  double seconds_per_point = 0.02;
  // Successive calls work on different slots (input, codec, memory, payload, output) spanning
  // this many bytes, so that they find their data out of cache as the engine does (it touches
  // each partition once per round); at most 1024 slots.
  int64_t working_set_bytes = 64 << 20;
};

// Measures encode (with the entry's memory, as the engine runs it) and decode (into the
// caller's tensor) time against size on one CPU thread, the server's aggregation per push and
// per round (not for two-round codecs), the host's fp32 summing and copy speeds, and the
// compressed size at every size (`sizes`, the mean over the slots' payloads: packed indices
// depend on the data; ratio and overhead fitted on the two largest), for every codec of
// `template_table` (name, params and memory kept; its GPU costs copied unmeasured) or, when
// it has no codecs, for every codec of the registry except "none" with default parameters.
// Two-round codecs that exchange twice through the servers' sum (powersgd) are timed as the
// engine runs them: encode = compensate and the first payload, between_rounds = the second
// payload, the codec's own approximation and the memory's update, decode = the decoded sum;
// their sizes are both payloads together. artopk (EXCHANGE_SUMMED_INDICES, not two_round in
// the cost table: its exchange models both stages) is timed through its single payload,
// topk's message, its encode the chooser's work (top-k selection with the memory).
// summable, reencodable and two_round come from the codec's properties (reencodable: not
// two-round, not a vote); loss is the template's, else LossOf's; kept_fraction from the ratio
// of sparse codecs and artopk, union_pull for sparse ones with a ratio, exchange by name
// (artopk: EXCHANGE_SUMMED_INDICES, blocksparse: EXCHANGE_BLOCK_SPARSE).
// Template codecs the registry does not know are left out and named in the table's source;
// invalid parameters are an error.
absl::StatusOr<proto::CostTable> CalibrateCpuCosts(const proto::CostTable& template_table,
                                                   const CalibrationOptions& options = {});

// Replaces the GPU costs of every codec of `table` that has a CUDA kernel (compress/cuda) with
// times measured on CUDA device 0 at `gpu_sizes` (encode with the fused memory, decode; CUDA
// events, median).
// Returns how many codecs were measured. Unavailable when there is no device or the build has
// no CUDA (the table is then unchanged). Compile-checked only: no GPU runs in our CI.
absl::StatusOr<int> CalibrateGpuCosts(proto::CostTable* table,
                                      const CalibrationOptions& options = {});

}  // namespace bytecomp::planner
