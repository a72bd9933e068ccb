#include "bytecomp/planner/decision_tree.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/registry.h"
#include "bytecomp/compress/strategy.h"
#include "bytecomp/planner/allowed_codecs.h"
#include "bytecomp/planner/exchange_sizes.h"
#include "bytecomp/planner/inputs.h"

namespace bytecomp::planner {
namespace {

const proto::DeviceCost* CostFor(const proto::CodecCost& codec, proto::Device device) {
  for (const auto& cost : codec.costs()) {
    if (cost.device() == device) return &cost;
  }
  return nullptr;
}

// Bytes per microsecond of a link given in Gbit/s.
double BytesPerUs(const proto::LinkSpec& link) { return link.bandwidth_gbps() * 1e3 / 8.0; }

}  // namespace

proto::LossClass LossOf(const proto::CodecCost& codec) {
  if (codec.loss() != proto::LOSS_UNSPECIFIED) return codec.loss();
  if (compress::IsNoneName(codec.name()) || IsLossless(codec)) return proto::LOSS_NONE;
  const compress::CodecFacts* facts = compress::CodecFactsOf(codec.name());
  // A codec the registry does not know is taken to be a compensable one.
  switch (facts == nullptr ? compress::CodecLoss::kCompensable : facts->loss) {
    case compress::CodecLoss::kNone:
      return proto::LOSS_NONE;
    case compress::CodecLoss::kRounding:
      return proto::LOSS_ROUNDING;
    case compress::CodecLoss::kHigh:
      return proto::LOSS_HIGH;
    case compress::CodecLoss::kCompensable:
      break;
  }
  return compress::IsNoneName(codec.memory()) ? proto::LOSS_HIGH : proto::LOSS_COMPENSATED;
}

const char* LossName(proto::LossClass loss) {
  switch (loss) {
    case proto::LOSS_NONE:
      return "lossless";
    case proto::LOSS_ROUNDING:
      return "rounding";
    case proto::LOSS_COMPENSATED:
      return "compensated";
    case proto::LOSS_HIGH:
      return "high";
    default:
      return "unspecified";
  }
}

bool CodecAllowed(const proto::CodecCost& codec, const proto::TensorProfile& tensor,
                  const proto::PlannerOptions& options) {
  const proto::LossClass max_loss =
      options.max_loss() == proto::LOSS_UNSPECIFIED ? proto::LOSS_COMPENSATED : options.max_loss();
  if (LossOf(codec) > max_loss) return false;
  if (!options.codecs().empty() && std::find(options.codecs().begin(), options.codecs().end(),
                                             codec.name()) == options.codecs().end()) {
    return false;
  }
  // What the user accepts for this tensor, on top of max_loss: both must allow the codec.
  const proto::TensorAllowance* allowance = AllowanceFor(options, tensor.name());
  return allowance == nullptr || CodecAllowedBy(codec, *allowance);
}

namespace {

// artopk's stages (EXCHANGE_SUMMED_INDICES, exchange_sizes.h): the chooser's encode (the round
// waits for it: its top-k selection, with the memory), the index section's exchange, the
// values gathered at those indices, their exchange, and the k sums scattered into the tensor.
// The servers' work is summing: the section passes through, the values add at the summing
// speed. On the pool, the gather moves the values twice at the copy speed. On the GPU
// (`on_gpu`: compress/cuda's artopk), the selection, the gather and the scatter run on the
// compute stream (the gather costed as the decode of a tensor of the values' size: a pass and
// its readbacks), and only the payloads and replies cross PCIe. `add`, `push`, `pull` (the NIC
// stages), `pcie` and `transport_cpu` are CostOf's.
template <typename Pcie, typename Push, typename Pull, typename TransportCpu, typename Add>
void AddSummedIndicesStages(const proto::CodecCost& codec, double part_bytes, double senders,
                            const proto::ClusterDescription& cluster, const proto::CostTable& costs,
                            bool has_gpu, bool on_gpu, Pcie pcie, Push push, Pull pull,
                            TransportCpu transport_cpu, Add add) {
  const SummedIndicesBytes b = SummedIndicesSizes(codec, part_bytes, senders);
  const double sum_bytes_per_us = cluster.server_sum_gbytes_per_s() * 1e3;
  auto exchange = [&](double pushed, double pulled) {
    if (on_gpu) add(kPcieD2H, kCopyD2H, pcie(pushed));
    transport_cpu(pushed);
    push(pushed);
    add(kServer, kServerWork, senders * pushed / sum_bytes_per_us);
    pull(pulled);
    transport_cpu(pulled);
    if (on_gpu) add(kPcieH2D, kCopyH2D, pcie(pulled));
  };
  if (on_gpu) {
    const proto::DeviceCost* gpu = CostFor(codec, proto::DEVICE_GPU);
    add(kCompute, kEncode, InterpolateCost(gpu->encode(), part_bytes));
    exchange(b.push1, b.pull1);
    add(kCompute, kEncode, InterpolateCost(gpu->decode(), b.push2));
    exchange(b.push2, b.pull2);
    add(kCompute, kDecode, InterpolateCost(gpu->decode(), part_bytes));
    return;
  }
  const proto::DeviceCost* cpu = CostFor(codec, proto::DEVICE_CPU);
  const double copy_bytes_per_us =
      costs.copy_gbytes_per_s() > 0 ? costs.copy_gbytes_per_s() * 1e3 : sum_bytes_per_us;
  if (has_gpu) add(kPcieD2H, kCopyD2H, pcie(part_bytes));
  add(kCpuPool, kEncode, InterpolateCost(cpu->encode(), part_bytes));
  exchange(b.push1, b.pull1);
  add(kCpuPool, kEncode, 2 * b.push2 / copy_bytes_per_us);
  exchange(b.push2, b.pull2);
  add(kCpuPool, kDecode, InterpolateCost(cpu->decode(), part_bytes));
  if (has_gpu) add(kPcieH2D, kCopyH2D, pcie(part_bytes));
}

}  // namespace

// A collective's stages (worker/src/collective_exchange.h: gloo among the workers, no server):
// the leader's batch broadcast (one latency), then for an allreduce of b bytes a
// reduce-scatter and an allgather that each move (W - 1) / W of b through every worker's link
// each way, in W - 1 steps (the ring) or log2 W (bcube: a power-of-two W, under 256 KiB), the
// adds on the workers' pool; for an allgather W - 1 payloads each way in W - 1 steps, and each
// worker decodes all W. The machine's workers share its link (flat).
// With GPUs (`path`): an uncompressed allreduce of an fp32/fp16/bf16 tensor is NCCL's, in place
// on the GPU (worker/src/nccl_device_summer.cc): its ring crosses each machine's NIC once, in
// W - 1 steps, and adds on the GPU, where the NCCL kernels take no compute-stream time (a
// stream of their own) nor the host's CPU; the machine's own hops (intra_machine_link) are not
// charged. Every other collective of a device tensor goes through its pinned host copy
// (DevicePipeline::StartCollective): copied to the host, gloo's stages as above, copied back.
enum class CollectivePath { kHost, kNcclInPlace, kPinnedCopy };

template <typename Pcie, typename TransportCpu, typename Add>
void AddCollectiveStages(const TensorOption& option, const proto::CodecCost* codec,
                         double part_bytes, double compressed,
                         const proto::ClusterDescription& cluster, CollectivePath path, Pcie pcie,
                         TransportCpu transport_cpu, Add add) {
  const bool nccl = path == CollectivePath::kNcclInPlace;
  const double w = std::max(2, cluster.workers());
  const double share =
      nccl ? 1.0 : std::max(1, cluster.workers() / std::max(1, cluster.machines()));
  const double alpha = cluster.worker_link().latency_us();
  const double us_per_byte = share / BytesPerUs(cluster.worker_link());
  const double sum_speed = cluster.server_sum_gbytes_per_s() * 1e3;
  const auto* cpu = codec != nullptr ? CostFor(*codec, proto::DEVICE_CPU) : nullptr;
  auto allreduce = [&](double b) {
    const int workers = static_cast<int>(w);
    const bool bcube = !nccl && b < 256 * 1024 && workers > 2 && (workers & (workers - 1)) == 0;
    const double steps = bcube ? std::log2(w) : w - 1;
    const double moved = b * (w - 1) / w * us_per_byte;
    if (!nccl) transport_cpu(b);
    add(kNicUp, kPush, alpha * (steps + 1) + moved);
    add(kNicDown, kPush, moved);
    if (!nccl) add(kCpuPool, kServerWork, b * (w - 1) / w / sum_speed);
    add(kNicUp, kPull, alpha * steps + moved);
    add(kNicDown, kPull, moved);
    if (!nccl) transport_cpu(b);
  };
  if (nccl) {
    allreduce(part_bytes);
    return;
  }
  const bool copied = path == CollectivePath::kPinnedCopy;
  if (copied) add(kPcieD2H, kCopyD2H, pcie(part_bytes));
  if (codec != nullptr) add(kCpuPool, kEncode, InterpolateCost(cpu->encode(), part_bytes));
  if (option.scheme == proto::SCHEME_ALLGATHER) {
    const double b = codec != nullptr ? compressed : part_bytes;
    const double moved = b * (w - 1) * us_per_byte;
    transport_cpu(b * (w - 1));
    add(kNicUp, kPush, alpha * w + moved);
    add(kNicDown, kPull, moved);
    const double decode =
        codec != nullptr ? InterpolateCost(cpu->decode(), part_bytes) : part_bytes / sum_speed;
    add(kCpuPool, kDecode, w * decode);
  } else if (codec != nullptr && codec->two_round()) {
    allreduce(compressed);
    add(kCpuPool, kEncode, InterpolateCost(cpu->between_rounds(), part_bytes));
    allreduce(compressed);
    add(kCpuPool, kDecode, InterpolateCost(cpu->decode(), part_bytes));
  } else if (codec == nullptr) {
    allreduce(part_bytes);
  } else {
    allreduce(compressed);
    // The summed values expanded into the tensor (ExpandSum: a decode).
    add(kCpuPool, kDecode, InterpolateCost(cpu->decode(), part_bytes));
  }
  if (copied) add(kPcieH2D, kCopyH2D, pcie(part_bytes));
}

double CompressedBytes(const proto::CodecCost& codec, double bytes) {
  const double out =
      codec.sizes().empty()
          ? codec.ratio() * bytes + static_cast<double>(codec.overhead_bytes())
          : InterpolatePoints(
                codec.sizes(), bytes,
                [](const proto::SizePoint& p) { return static_cast<double>(p.encoded_bytes()); },
                /*scale_below_first=*/true);
  return std::clamp(out, 0.0, bytes);
}

const char* ResourceName(int resource) {
  static const char* kNames[] = {"compute", "cpu pool", "pcie d2h", "pcie h2d",
                                 "nic up",  "nic down", "servers",  "intra-machine"};
  return resource >= 0 && resource < kNumResources ? kNames[resource] : "?";
}

const char* StageKindName(int kind) {
  static const char* kNames[] = {"reduce",    "encode",        "d2h",         "push",
                                 "server",    "pull",          "h2d",         "decode",
                                 "broadcast", "transport cpu", "training cpu"};
  return kind >= 0 && kind <= kTrainingCpu ? kNames[kind] : "backward";
}

int64_t TensorBytes(const proto::TensorProfile& tensor) {
  return tensor.elements() * (tensor.element_bytes() > 0 ? tensor.element_bytes() : 4);
}

std::vector<TensorOption> EnumerateOptions(const proto::TensorProfile& tensor,
                                           const proto::ClusterDescription& cluster,
                                           const proto::CostTable& costs,
                                           const proto::PlannerOptions& options) {
  const int64_t bytes = TensorBytes(tensor);
  const bool has_gpu = cluster.gpus_per_machine() > 0 && !options.disable_gpu();
  const bool has_cpu_pool = cluster.cpu_pool_threads() > 0 && !options.disable_cpu();
  const bool may_compress = bytes >= options.min_compress_bytes();

  // Partition counts: distinct, at most one element per part (and at most int32's range).
  std::vector<int32_t> counts;
  auto add_count = [&](int64_t partition_bytes) {
    int64_t count = std::max<int64_t>(1, (bytes + partition_bytes - 1) / partition_bytes);
    count = std::min<int64_t>({count, tensor.elements(), std::numeric_limits<int32_t>::max()});
    if (std::find(counts.begin(), counts.end(), count) == counts.end()) {
      counts.push_back(static_cast<int32_t>(count));
    }
  };
  add_count(cluster.partition_bytes());
  for (int64_t pb : options.partition_bytes()) add_count(pb);

  std::vector<bool> hier_choices = {false};
  if (options.hierarchical_only()) {
    if (cluster.workers() > cluster.machines()) hier_choices = {true};
  } else if (cluster.gpus_per_machine() > 1 && !options.disable_hierarchical()) {
    hier_choices.push_back(true);
  }

  // Collectives, flat: gloo among the workers; with GPUs an uncompressed allreduce by NCCL in
  // place, every other collective through the tensor's pinned host copy (AddCollectiveStages).
  // (A hierarchical job, hierarchical_only, has none: only each machine's root reaches the
  // network there.)
  const bool collectives =
      cluster.collectives() && cluster.workers() > 1 && !options.hierarchical_only();
  std::vector<TensorOption> out;
  auto add_collective = [&](TensorOption o, proto::Scheme scheme) {
    o.scheme = static_cast<uint8_t>(scheme);
    o.hierarchical = false;
    o.two_way = false;
    o.decode_on = Where::kNone;
    o.union_pull = false;
    for (int32_t count : counts) {
      o.partitions = count;
      out.push_back(o);
    }
  };
  for (bool hier : hier_choices) {
    for (int32_t count : counts) {
      TensorOption none;
      none.hierarchical = hier;
      none.partitions = count;
      out.push_back(none);
    }
  }
  if (collectives) add_collective(TensorOption(), proto::SCHEME_ALLREDUCE);
  if (!may_compress) return out;
  const proto::TensorAllowance* allowance = AllowanceFor(options, tensor.name());
  for (int c = 0; c < costs.codecs_size(); ++c) {
    const auto& codec = costs.codecs(c);
    if (!CodecAllowed(codec, tensor, options)) continue;
    const bool cpu_costs = CostFor(codec, proto::DEVICE_CPU) != nullptr;
    const bool gpu_costs = CostFor(codec, proto::DEVICE_GPU) != nullptr;
    if (!cpu_costs) continue;  // the server runs decode / re-encode on its CPU
    std::vector<Where> encode_places;
    if (has_gpu && gpu_costs) encode_places.push_back(Where::kGpu);
    if (has_cpu_pool || !has_gpu) encode_places.push_back(Where::kCpu);
    struct Pull {
      bool two_way = false;
      Where decode = Where::kNone;
      bool union_pull = false;
    };
    std::vector<Pull> pulls = {{}};
    // artopk's pull is a summed k-vector and blocksparse's a block-sparse sum: nothing to
    // re-encode.
    const bool one_push = codec.exchange() == proto::EXCHANGE_PUSH_PULL;
    if (one_push && codec.reencodable() && !codec.two_round() && !options.disable_two_way() &&
        TwoWayAllowed(allowance)) {
      if (has_gpu && gpu_costs) pulls.push_back({true, Where::kGpu});
      if (has_cpu_pool || !has_gpu) pulls.push_back({true, Where::kCpu});
    }
    // The union is threshold 0's message, decoded on the CPU.
    if (one_push && codec.union_pull() && codec.kept_fraction() > 0 && !options.disable_two_way() &&
        (has_cpu_pool || !has_gpu)) {
      pulls.push_back({true, Where::kCpu, true});
    }
    // The schemes the codec's facts allow (compress: CollectiveSums, CollectiveGathers, the
    // rules the strategy's validation applies); an allgather only where no allreduce does.
    const compress::CodecFacts* facts = compress::CodecFactsOf(codec.name());
    if (collectives && has_cpu_pool && facts != nullptr) {
      TensorOption o;
      o.codec = static_cast<int16_t>(c);
      o.encode_on = Where::kCpu;
      if (compress::CollectiveSums(*facts)) {
        add_collective(o, proto::SCHEME_ALLREDUCE);
      } else if (compress::CollectiveGathers(*facts)) {
        add_collective(o, proto::SCHEME_ALLGATHER);
      }
    }
    for (Where encode : encode_places) {
      for (const Pull& pull : pulls) {
        for (bool hier : hier_choices) {
          for (int32_t count : counts) {
            TensorOption o;
            o.codec = static_cast<int16_t>(c);
            o.encode_on = encode;
            o.two_way = pull.two_way;
            o.decode_on = pull.decode;
            o.union_pull = pull.union_pull;
            o.hierarchical = hier;
            o.partitions = count;
            out.push_back(o);
          }
        }
      }
    }
  }
  return out;
}

std::vector<double> TrainingCpuUs(const proto::ModelProfile& profile) {
  std::vector<double> out(profile.tensors_size(), 0.0);
  double gaps = 0;
  for (const proto::TensorProfile& t : profile.tensors()) gaps += t.ready_gap_us();
  if (!(profile.measured_training_cpu_us() > 0)) return out;
  for (int i = 0; i < profile.tensors_size(); ++i) {
    out[i] = gaps > 0
                 ? profile.measured_training_cpu_us() * profile.tensors(i).ready_gap_us() / gaps
                 : profile.measured_training_cpu_us() / profile.tensors_size();
  }
  return out;
}

namespace {

// On one host (host_cores): the cores the job's processes get (host_effective_cores, measured),
// else all of them.
double JobCores(const proto::ClusterDescription& cluster) {
  return cluster.host_effective_cores() > 0 ? cluster.host_effective_cores() : cluster.host_cores();
}

}  // namespace

double ForwardOnHostUs(const proto::ModelProfile& profile,
                       const proto::ClusterDescription& cluster) {
  const double alone = profile.forward_us();
  if (cluster.host_cores() <= 0 || !(profile.measured_forward_cpu_us() > 0)) return alone;
  const double cores = JobCores(cluster);
  const double workers = std::max(1, cluster.workers());
  return std::max(alone, profile.measured_forward_cpu_us() * workers / std::min(cores, workers));
}

OptionCost CostOf(const TensorOption& option, const proto::TensorProfile& tensor,
                  const proto::ClusterDescription& cluster, const proto::CostTable& costs,
                  double training_cpu_us) {
  OptionCost cost;
  cost.option = option;
  cost.partitions = option.partitions;
  const double part_bytes = static_cast<double>(TensorBytes(tensor)) / option.partitions;
  const bool has_gpu = cluster.gpus_per_machine() > 0;
  const int gpus = std::max(1, cluster.gpus_per_machine());
  const int workers_per_machine = std::max(1, cluster.workers() / cluster.machines());
  const proto::CodecCost* codec = option.codec >= 0 ? &costs.codecs(option.codec) : nullptr;
  const bool two_round = codec != nullptr && codec->two_round();
  auto device_cost = [&](Where where) {
    return CostFor(*codec, where == Where::kGpu ? proto::DEVICE_GPU : proto::DEVICE_CPU);
  };
  // Flat: every worker of the machine pushes its own copy through the machine's NIC and all
  // W workers' pushes land on the S servers. Hierarchical: one push per machine.
  const double senders = option.hierarchical ? cluster.machines() : cluster.workers();
  const proto::Exchange exchange = codec ? codec->exchange() : proto::EXCHANGE_PUSH_PULL;
  // blocksparse: the non-zero blocks of one worker's gradient up, of the sum back.
  const double density = tensor.has_block_density() ? tensor.block_density() : 1.0;
  // A two-round codec's compressed size is its two payloads together, about half each.
  double compressed =
      codec ? CompressedBytes(*codec, part_bytes) / (two_round ? 2 : 1) : part_bytes;
  if (exchange == proto::EXCHANGE_BLOCK_SPARSE) compressed = BlockSparseBytes(density, part_bytes);
  const double nic_share = option.hierarchical ? 1 : workers_per_machine;
  const bool colocated = cluster.colocated_servers();
  const double alpha = cluster.worker_link().latency_us() +
                       (colocated ? cluster.worker_link() : cluster.server_link()).latency_us();
  const double us_per_byte =
      std::max(nic_share / BytesPerUs(cluster.worker_link()),
               senders / (cluster.servers() * BytesPerUs(cluster.server_link())));
  // Colocated servers: per partition, each machine's NIC carries its own pushes (or pulls)
  // to the other machines' servers and, the other way, its servers' share of the others':
  // nic_share x (machines - 1) / machines of the bytes in each direction.
  const double colocated_us_per_byte =
      nic_share * (cluster.machines() - 1) / cluster.machines() / BytesPerUs(cluster.worker_link());
  auto pcie = [&](double b) {
    return cluster.pcie_link().latency_us() + b / BytesPerUs(cluster.pcie_link());
  };
  // Inside a machine of n workers: NCCL's ring moves (n-1)/n of the bytes through each GPU's
  // link. Without GPUs the host reducer sends every local rank's copy to local rank 0, which
  // adds them (reduce) and sends the result back (broadcast): n-1 copies through its link.
  const int local = has_gpu ? gpus : workers_per_machine;
  auto intra = [&](double b, bool reduce) {
    const double link_us =
        cluster.intra_machine_link().latency_us() +
        b * (local - 1) / (has_gpu ? local : 1) / BytesPerUs(cluster.intra_machine_link());
    if (has_gpu || !reduce) return link_us;
    return link_us + (local - 1) * b / (cluster.server_sum_gbytes_per_s() * 1e3);
  };
  // One host for the whole job (host_cores): every pushing worker (all W flat, the machine
  // roots hierarchical) does this worker's CPU work at the same time, and the servers' work
  // queues on the same cores (one resource, kCpuPool).
  const int host_cores = cluster.host_cores();
  const double cores = JobCores(cluster);
  const double pool_scale =
      host_cores > 0 ? senders / std::min<double>(cores, senders * cluster.cpu_pool_threads())
                     : 1.0;
  const double server_scale =
      host_cores > 0 ? 1.0 / std::min<double>(cores, static_cast<double>(cluster.servers()) *
                                                         cluster.server_threads())
                     : 1.0;
  // The cost table's CPU work, each measured by one thread alone, costs host_cpu_inflation
  // times as much when the job's processes share the cores (calibrate_contention.py); the
  // transport's CPU is measured in such a job already.
  const double inflation =
      host_cores > 0 && cluster.host_cpu_inflation() > 0 ? cluster.host_cpu_inflation() : 1.0;
  auto add = [&](Resource r, StageKind kind, double us) {
    if (r == kCpuPool) us *= pool_scale;
    if ((r == kCpuPool || r == kServer) && kind != kTransport) us *= inflation;
    if (r == kServer && host_cores > 0) {
      r = kCpuPool;
      us *= server_scale;
    } else if (r == kServer && colocated) {
      // The machine's servers do 1/machines of every key's server work, on its cores.
      r = kCpuPool;
      us /= cluster.machines();
    }
    const float on_grid = OnTimeGrid(us);
    cost.stages[cost.num_stages++] = Stage{r, kind, on_grid};
    cost.work_us[r] += static_cast<double>(on_grid) * option.partitions;
  };
  // On one host, moving every push and pull through ZeroMQ and the kernel takes CPU from the
  // same cores (both ends' time, measured by tools/calibrate_transport.py): a job before the
  // push and one after the pull.
  auto transport_cpu = [&](double b) {
    if (host_cores > 0 && costs.transfer_cpu_size() > 0) {
      add(kCpuPool, kTransport, InterpolateCost(costs.transfer_cpu(), static_cast<int64_t>(b)));
    }
  };
  // The W training threads' CPU before this tensor's push, spread over min(host_cores, W)
  // cores, a partition's share each (not with GPUs: their first stage may be the GPU stream).
  if (host_cores > 0 && !has_gpu && training_cpu_us > 0) {
    const double threads = cluster.workers();
    const double us =
        training_cpu_us / option.partitions * threads / std::min<double>(cores, threads);
    const float on_grid = OnTimeGrid(us);
    cost.stages[cost.num_stages++] = Stage{kCpuPool, kTrainingCpu, on_grid};
    cost.work_us[kCpuPool] += static_cast<double>(on_grid) * option.partitions;
  }
  // The server: the first fp32 push becomes the sum, the others are added. Compressed: the
  // codec's aggregator adds every push (measured, or modelled as decode and add), and
  // two-way re-encodes the sum with the server's memory. A two-round codec's stages are f32
  // vectors that the server adds.
  auto server_work = [&](double pushed) {
    const double sum_speed = cluster.server_sum_gbytes_per_s() * 1e3;
    if (codec == nullptr) return senders * part_bytes / sum_speed;
    if (two_round) return senders * pushed / sum_speed;
    const auto* cpu = device_cost(Where::kCpu);
    if (exchange == proto::EXCHANGE_BLOCK_SPARSE) {
      // The servers' work follows the non-zero blocks (calibrated on dense inputs: scaled).
      return cpu->aggregate().empty()
                 ? senders * density * InterpolateCost(cpu->decode(), part_bytes)
                 : InterpolateCost(cpu->aggregate_base(), part_bytes) +
                       senders * density * InterpolateCost(cpu->aggregate(), part_bytes);
    }
    if (!cpu->aggregate().empty()) {
      double us = InterpolateCost(cpu->aggregate_base(), part_bytes) +
                  senders * InterpolateCost(cpu->aggregate(), part_bytes);
      if (option.two_way) us += InterpolateCost(cpu->encode(), part_bytes);
      return us;
    }
    const double decode = InterpolateCost(cpu->decode(), part_bytes);
    double us = senders * part_bytes / sum_speed;
    if (codec->summable()) return us + (option.two_way ? 0 : decode);
    us += senders * decode;
    if (option.two_way) us += InterpolateCost(cpu->encode(), part_bytes);
    return us;
  };
  // A push to the servers, their work, and the pull back: one round trip.
  auto push_stages = [&](double pushed) {
    if (colocated) {
      add(kNicUp, kPush, alpha + pushed * colocated_us_per_byte);
      add(kNicDown, kPush, pushed * colocated_us_per_byte);
    } else {
      add(kNicUp, kPush, alpha + pushed * us_per_byte);
    }
  };
  auto pull_stages = [&](double pulled) {
    if (colocated) {
      add(kNicUp, kPull, pulled * colocated_us_per_byte);
      add(kNicDown, kPull, alpha + pulled * colocated_us_per_byte);
    } else {
      add(kNicDown, kPull, alpha + pulled * us_per_byte);
    }
  };
  auto round_trip = [&](double pushed, double pulled) {
    transport_cpu(pushed);
    push_stages(pushed);
    add(kServer, kServerWork, server_work(pushed));
    pull_stages(pulled);
    transport_cpu(pulled);
  };

  if (option.collective()) {
    const int element_bytes = tensor.element_bytes() > 0 ? tensor.element_bytes() : 4;
    const CollectivePath path = !has_gpu ? CollectivePath::kHost
                                : codec == nullptr && option.scheme == proto::SCHEME_ALLREDUCE &&
                                        (element_bytes == 4 || element_bytes == 2)
                                    ? CollectivePath::kNcclInPlace
                                    : CollectivePath::kPinnedCopy;
    AddCollectiveStages(option, codec, part_bytes, compressed, cluster, path, pcie, transport_cpu,
                        add);
    return cost;
  }
  if (option.hierarchical) add(kIntraMachine, kReduce, intra(part_bytes, true));
  if (exchange == proto::EXCHANGE_SUMMED_INDICES) {
    AddSummedIndicesStages(*codec, part_bytes, senders, cluster, costs, has_gpu,
                           option.encode_on == Where::kGpu, pcie, push_stages, pull_stages,
                           transport_cpu, add);
    if (option.hierarchical) add(kIntraMachine, kBroadcast, intra(part_bytes, false));
    return cost;
  }
  double pushed = part_bytes;
  if (codec == nullptr) {
    if (has_gpu) add(kPcieD2H, kCopyD2H, pcie(part_bytes));
  } else if (option.encode_on == Where::kGpu) {
    add(kCompute, kEncode, InterpolateCost(device_cost(Where::kGpu)->encode(), part_bytes));
    add(kPcieD2H, kCopyD2H, pcie(compressed));
    pushed = compressed;
  } else {
    if (has_gpu) add(kPcieD2H, kCopyD2H, pcie(part_bytes));
    add(kCpuPool, kEncode, InterpolateCost(device_cost(Where::kCpu)->encode(), part_bytes));
    pushed = compressed;
  }
  if (two_round) {
    // P's sum comes back; the worker computes Q between the rounds where it encoded.
    round_trip(compressed, compressed);
    const double between =
        InterpolateCost(device_cost(option.encode_on)->between_rounds(), part_bytes);
    add(option.encode_on == Where::kGpu ? kCompute : kCpuPool, kEncode, between);
    round_trip(compressed, compressed);
    if (option.encode_on == Where::kGpu) {
      add(kCompute, kDecode, InterpolateCost(device_cost(Where::kGpu)->decode(), part_bytes));
    } else {
      add(kCpuPool, kDecode, InterpolateCost(device_cost(Where::kCpu)->decode(), part_bytes));
      if (has_gpu) add(kPcieH2D, kCopyH2D, pcie(part_bytes));
    }
    if (option.hierarchical) add(kIntraMachine, kBroadcast, intra(part_bytes, false));
    return cost;
  }

  const bool pulled_compressed = codec != nullptr && option.two_way;
  double pulled = pulled_compressed ? compressed : part_bytes;
  if (option.union_pull) pulled = UnionPullBytes(codec->kept_fraction(), senders, part_bytes);
  if (exchange == proto::EXCHANGE_BLOCK_SPARSE) {
    pulled = BlockSparseBytes(UnionFraction(density, senders), part_bytes);
  }
  round_trip(pushed, pulled);
  if (pulled_compressed && option.decode_on == Where::kGpu) {
    add(kPcieH2D, kCopyH2D, pcie(compressed));
    add(kCompute, kDecode, InterpolateCost(device_cost(Where::kGpu)->decode(), part_bytes));
  } else if (pulled_compressed) {
    add(kCpuPool, kDecode, InterpolateCost(device_cost(Where::kCpu)->decode(), part_bytes));
    if (has_gpu) add(kPcieH2D, kCopyH2D, pcie(part_bytes));
  } else if (exchange == proto::EXCHANGE_BLOCK_SPARSE) {
    // The block-sparse sum, scattered into the tensor (zeros between its blocks).
    add(kCpuPool, kDecode, InterpolateCost(device_cost(Where::kCpu)->decode(), part_bytes));
    if (has_gpu) add(kPcieH2D, kCopyH2D, pcie(part_bytes));
  } else {
    // One-way compressed: the pool copies the fp32 sum into the caller's tensor, when the
    // copy speed was measured: once for an fp32 tensor, twice for others (into a scratch
    // buffer, then converted into the tensor).
    if (codec != nullptr && costs.copy_gbytes_per_s() > 0) {
      const int copies = tensor.element_bytes() == 0 || tensor.element_bytes() == 4 ? 1 : 2;
      add(kCpuPool, kDecode, copies * part_bytes / (costs.copy_gbytes_per_s() * 1e3));
    }
    if (has_gpu) add(kPcieH2D, kCopyH2D, pcie(part_bytes));
  }
  if (option.hierarchical) add(kIntraMachine, kBroadcast, intra(part_bytes, false));
  return cost;
}

std::string DescribeOption(const TensorOption& option, const proto::CostTable& costs) {
  auto where = [](Where w) { return w == Where::kGpu ? "GPU" : "CPU"; };
  std::string out;
  if (option.codec < 0) {
    out = "none";
  } else {
    const proto::CodecCost& codec = costs.codecs(option.codec);
    const std::string pull = codec.two_round()   ? std::string(",2-round")
                             : option.union_pull ? absl::StrCat(",union:", where(option.decode_on))
                             : option.two_way    ? absl::StrCat(",2-way:", where(option.decode_on))
                                                 : std::string(",1-way");
    out = absl::StrCat(codec.name(), "(", where(option.encode_on), pull, ")");
  }
  if (option.hierarchical) absl::StrAppend(&out, " hier");
  if (option.partitions > 1) absl::StrAppend(&out, " p", option.partitions);
  if (option.scheme == proto::SCHEME_ALLREDUCE) absl::StrAppend(&out, " allreduce");
  if (option.scheme == proto::SCHEME_ALLGATHER) absl::StrAppend(&out, " allgather");
  return out;
}

}  // namespace bytecomp::planner
