// The decision tree: every valid way to send one tensor, and what each costs per resource.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "planner.pb.h"

namespace bytecomp::planner {

// Resources of the simulated machine (all machines are alike, one is simulated).
enum Resource : uint8_t {
  kCompute = 0,   // the training GPU's stream (or the training CPU thread without a GPU)
  kCpuPool,       // the worker's compression thread pool (cpu_pool_threads slots)
  kPcieD2H,       // device -> pinned host copies
  kPcieH2D,       // host -> device copies
  kNicUp,         // the machine's NIC, pushes (shared with the servers' incast)
  kNicDown,       // the machine's NIC, pulls
  kServer,        // the servers' decode/sum/re-encode (servers * server_threads slots)
  kIntraMachine,  // reduce/broadcast inside the machine (NCCL, or the host reducer)
  kNumResources
};
const char* ResourceName(int resource);

enum class Where : uint8_t { kNone = 0, kCpu = 1, kGpu = 2 };

// One leaf of the decision tree for a tensor.
struct TensorOption {
  int16_t codec = -1;              // index into the cost table; -1: uncompressed
  Where encode_on = Where::kNone;  // where the worker encodes pushes
  bool two_way = false;            // server re-encodes the sum for pulls
  bool union_pull = false;         // two-way as the servers' sparse union (gather style)
  Where decode_on = Where::kNone;  // where the worker decodes pulls (two-way only)
  bool hierarchical = false;       // NCCL reduce inside the machine first
  int32_t partitions = 1;          // parts of equal size, each its own key
  uint8_t scheme = 0;              // proto::Scheme: the servers, an allreduce, an allgather
  bool collective() const { return scheme != 0; }
  bool uses_cpu() const { return encode_on == Where::kCpu || decode_on == Where::kCpu; }
  bool operator==(const TensorOption&) const = default;
};

// One step of a partition's path: a job of `duration_us` on `resource`.
struct Stage {
  uint8_t resource;
  uint8_t kind;       // StageKind, for the trace
  float duration_us;  // on the time grid (OnTimeGrid)
};

// `us` as a float on the simulator's time grid, the multiples of 2^-20 us (about a
// picosecond): the float nearest `us`, and below 8 us (where floats are finer than the grid)
// the grid point nearest that. Sums of such durations below 2^33 us (2.4 hours) are exact in
// double, so a timeline shifted in time runs as the same timeline shifted, to the bit
// (TimelineSimulator's runs that meet the baseline's state shifted). Durations up to 2^31 us.
inline double OnTimeGridExact(float us) {
  constexpr double kGrid = 1048576.0;            // 2^20 points per us
  constexpr double kRound = 6755399441055744.0;  // 1.5 * 2^52: x + it - it rounds x
  return ((static_cast<double>(us) * kGrid + kRound) - kRound) / kGrid;
}
inline float OnTimeGrid(double us) {
  return static_cast<float>(OnTimeGridExact(static_cast<float>(us)));
}
enum StageKind : uint8_t {
  kReduce,
  kEncode,
  kCopyD2H,
  kPush,
  kServerWork,
  kPull,
  kCopyH2D,
  kDecode,
  kBroadcast,
  kTransport,   // CPU spent moving a push or pull (ZeroMQ, kernel) on a shared host
  kTrainingCpu  // the training threads' own CPU before the push, on a shared host
};
const char* StageKindName(int kind);

// The most stages an option has: a two-round codec or artopk's two exchanges, hierarchical,
// on a GPU, on a shared host (the transport and the training threads' CPU), colocated servers
// (pushes and pulls on both directions of the NIC).
inline constexpr int kMaxStages = 25;

// What an option costs: the stages of each of its (identical) partitions, and the total work
// it puts on each resource (used for lower bounds).
struct OptionCost {
  TensorOption option;
  int32_t partitions = 1;
  int8_t num_stages = 0;
  std::array<Stage, kMaxStages> stages;
  std::array<double, kNumResources> work_us{};
  // A lower bound on the time from the tensor being ready to its last partition being done
  // (its stages in a row, plus the other partitions' turns on the busiest one-slot
  // resource). Filled by Prepare(), which knows the slots.
  double chain_us = 0;
  // A tighter bound of the same: its stages in a row, plus the turns of the stage whose
  // partitions wait longest for a slot (ceil(partitions / slots) - 1 of its durations, on a
  // resource of any number of slots). Filled by Prepare(). chain_us orders the search's
  // candidates (which decides among equal times); span_us only skips simulations.
  double span_us = 0;
  // Per resource, for one partition: its stages before its first stage there and after its
  // last one (0 where it has none). Filled by Prepare(); TailBounds (timeline.h) uses them.
  std::array<double, kNumResources> before_us{};
  std::array<double, kNumResources> after_us{};
};

// The codec's LossClass: the table's, else from the codec's facts (compress CodecFacts: loss,
// lossless_when) and its memory: none lossless; blocksparse and threshold with threshold 0 (they
// drop only zeros: allowed_codecs.h, IsLossless) lossless; fp16 and bf16 rounding; randomk
// high; any other codec compensated with an error-feedback memory and high without one.
proto::LossClass LossOf(const proto::CodecCost& codec);
const char* LossName(proto::LossClass loss);  // "compensated"

// Whether the planner may give `tensor` this codec: named by options.codecs (when not empty),
// no lossier than options.max_loss (defaults applied) and, when an entry of options.allowed
// matches the tensor, no lossier than a codec it lists (allowed_codecs.h: CodecAllowedBy).
// The one place that decides which codecs a tensor may use.
bool CodecAllowed(const proto::CodecCost& codec, const proto::TensorProfile& tensor,
                  const proto::PlannerOptions& options);

// The codec's compressed size for an input of `bytes`: its measured sizes where the table has
// them, else ratio * bytes + overhead_bytes; never more than `bytes`.
double CompressedBytes(const proto::CodecCost& codec, double bytes);

// The tensor's pruned option list. Pruning rules (each returns fewer, never invalid, leaves):
//  - tensors under min_compress_bytes, or with no usable codec, have only "uncompressed";
//  - a codec is usable only if the cost table gives it CPU costs (the server decodes and
//    re-encodes on its CPU) and CodecAllowed;
//  - GPU encode/decode needs GPUs in the cluster and GPU costs for the codec, CPU needs a pool;
//  - two-way needs a re-encodable codec; decode placement exists only for two-way; a
//    two-round codec (powersgd) pulls compressed factors by itself and decodes where it
//    encoded;
//  - codecs whose pushes are sparse (union_pull) also get the servers' sparse union for pulls
//    (decoded on the CPU); artopk (two exchanges) and blocksparse (the pull is block-sparse
//    already) get one-way options only;
//  - two-way re-encoding only where the tensor's allowance (PlannerOptions.allowed) says so
//    (allowed_codecs.h: TwoWayAllowed);
//  - hierarchical needs several GPUs per machine; with options.hierarchical_only every option
//    is hierarchical (when a machine has several workers, GPUs or not);
//  - partition counts are deduplicated, at most one per element, 1 for tiny tensors;
//  - collectives (cluster.collectives, no GPUs): an allreduce of the uncompressed tensor and of
//    each one-way codec whose encoded values sum (summable) or whose two rounds are sums of
//    factors (two_round, push-pull); an allgather of each other one-way push-pull codec; flat
//    only (a collective spans every worker).
std::vector<TensorOption> EnumerateOptions(const proto::TensorProfile& tensor,
                                           const proto::ClusterDescription& cluster,
                                           const proto::CostTable& costs,
                                           const proto::PlannerOptions& options);

// The cost of one option for one tensor (cluster and options with defaults applied).
// `training_cpu_us`: one worker's training thread's CPU time from the previous tensor's ready
// time to this one's (TrainingCpuUs). On one host (host_cores, no GPUs) every worker's
// training thread takes it from the shared cores before the push (kTrainingCpu), so the
// options' CPU work competes with training for them as it does on that host.
OptionCost CostOf(const TensorOption& option, const proto::TensorProfile& tensor,
                  const proto::ClusterDescription& cluster, const proto::CostTable& costs,
                  double training_cpu_us = 0);

// Each tensor's share of the profile's measured training CPU (ModelProfile.
// measured_training_cpu_us, the backward pass's: in proportion to the tensor's ready gap);
// zeros when the profile has none.
std::vector<double> TrainingCpuUs(const proto::ModelProfile& profile);

// The forward pass the simulated iteration adds (SimProblem.forward_us): the profile's
// forward_us (one worker's, what contention added left out), and on one host (host_cores)
// at least the W workers' forward CPU (ModelProfile.measured_forward_cpu_us: compute on the
// CPU) over min(cores, W), as every worker's forward runs at once on the shared cores (cores:
// host_effective_cores where calibrated).
double ForwardOnHostUs(const proto::ModelProfile& profile,
                       const proto::ClusterDescription& cluster);

int64_t TensorBytes(const proto::TensorProfile& tensor);
// "none", "topk(GPU,2-way:GPU)", "fp16(CPU,1-way,hier,p4)", "topk(CPU,union:CPU)",
// "fp16(CPU,1-way) allreduce", "none allreduce".
std::string DescribeOption(const TensorOption& option, const proto::CostTable& costs);

}  // namespace bytecomp::planner
