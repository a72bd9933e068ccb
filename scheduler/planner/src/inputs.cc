#include "bytecomp/planner/inputs.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/common/partition.h"
#include "bytecomp/common/text_proto.h"
#include "bytecomp/compress/strategy.h"

namespace bytecomp::planner {
namespace {

bool FiniteAtLeastZero(double x) { return std::isfinite(x) && x >= 0; }

using google::protobuf::Message;

void CheckLink(const proto::LinkSpec& link, const TextProtoTree* tree, TextPosition line,
               absl::string_view path, bool required, TextProtoProblems& p) {
  if (required && link.bandwidth_gbps() <= 0) {
    p.Add(tree, link, "bandwidth_gbps", -1, line, absl::StrCat(path, ".bandwidth_gbps"),
          absl::StrCat("must be > 0, got ", link.bandwidth_gbps()));
  } else if (link.bandwidth_gbps() < 0) {
    p.Add(tree, link, "bandwidth_gbps", -1, line, absl::StrCat(path, ".bandwidth_gbps"),
          "must be >= 0");
  }
  if (link.latency_us() < 0) {
    p.Add(tree, link, "latency_us", -1, line, absl::StrCat(path, ".latency_us"),
          absl::StrCat("must be >= 0, got ", link.latency_us()));
  }
}

void CheckCurve(const google::protobuf::RepeatedPtrField<proto::CostPoint>& points,
                const TextProtoTree* tree, const Message& parent, const char* field,
                TextPosition line, absl::string_view path, TextProtoProblems& p) {
  if (points.empty()) {
    p.Add(tree, parent, field, -1, line, path, "needs at least one point");
    return;
  }
  for (int i = 0; i < points.size(); ++i) {
    const auto& point = points[i];
    const auto* sub = NestedTree(tree, parent, field, i);
    TextPosition point_line = PositionOf(tree, parent, field, i, line);
    std::string here = absl::StrCat(path, "[", i, "]");
    if (point.bytes() <= 0) {
      p.Add(sub, point, "bytes", -1, point_line, absl::StrCat(here, ".bytes"),
            absl::StrCat("must be > 0, got ", point.bytes()));
    } else if (i > 0 && point.bytes() <= points[i - 1].bytes()) {
      p.Add(sub, point, "bytes", -1, point_line, absl::StrCat(here, ".bytes"),
            "points must be in increasing bytes");
    }
    if (point.us() < 0) {
      p.Add(sub, point, "us", -1, point_line, absl::StrCat(here, ".us"),
            absl::StrCat("must be >= 0, got ", point.us()));
    }
  }
}

absl::Status ValidateCluster(const proto::ClusterDescription& c, const TextProtoTree* tree,
                             absl::string_view source) {
  TextProtoProblems p(source);
  if (c.machines() < 1) {
    p.Add(tree, c, "machines", -1, TextPosition{}, "machines",
          absl::StrCat("must be >= 1, got ", c.machines()));
  }
  if (c.gpus_per_machine() < 0) {
    p.Add(tree, c, "gpus_per_machine", -1, TextPosition{}, "gpus_per_machine", "must be >= 0");
  }
  if (c.workers() < 0) p.Add(tree, c, "workers", -1, TextPosition{}, "workers", "must be >= 0");
  if (c.servers() < 1) {
    p.Add(tree, c, "servers", -1, TextPosition{}, "servers",
          absl::StrCat("must be >= 1, got ", c.servers()));
  }
  auto link = [&](const char* field, const proto::LinkSpec& spec, bool required) {
    TextPosition line = PositionOf(tree, c, field, -1, TextPosition{});
    if (required && !c.GetReflection()->HasField(c, c.GetDescriptor()->FindFieldByName(field))) {
      p.Add(tree, c, field, -1, TextPosition{}, field, "missing (bandwidth_gbps and latency_us)");
      return;
    }
    CheckLink(spec, NestedTree(tree, c, field, -1), line, field, required, p);
  };
  link("worker_link", c.worker_link(), true);
  link("server_link", c.server_link(), true);
  link("intra_machine_link", c.intra_machine_link(), c.gpus_per_machine() > 1);
  link("pcie_link", c.pcie_link(), false);
  if (c.cpu_pool_threads() < 0) {
    p.Add(tree, c, "cpu_pool_threads", -1, TextPosition{}, "cpu_pool_threads", "must be >= 0");
  }
  if (c.server_threads() < 0) {
    p.Add(tree, c, "server_threads", -1, TextPosition{}, "server_threads", "must be >= 0");
  }
  if (c.server_sum_gbytes_per_s() < 0) {
    p.Add(tree, c, "server_sum_gbytes_per_s", -1, TextPosition{}, "server_sum_gbytes_per_s",
          "must be >= 0");
  }
  if (c.partition_bytes() < 0) {
    p.Add(tree, c, "partition_bytes", -1, TextPosition{}, "partition_bytes", "must be >= 0");
  }
  if (c.host_cores() < 0)
    p.Add(tree, c, "host_cores", -1, TextPosition{}, "host_cores", "must be >= 0");
  const double inflation = c.host_cpu_inflation();
  if (!(inflation == 0 || inflation >= 1) || std::isinf(inflation)) {
    p.Add(tree, c, "host_cpu_inflation", -1, TextPosition{}, "host_cpu_inflation",
          "must be 0 (absent: 1) or a finite number >= 1");
  } else if (inflation > 0 && c.host_cores() == 0) {
    p.Add(tree, c, "host_cpu_inflation", -1, TextPosition{}, "host_cpu_inflation",
          "applies to a job on one host only: set host_cores too");
  }
  if (!(c.host_effective_cores() >= 0) ||
      (c.host_cores() > 0 && c.host_effective_cores() > c.host_cores())) {
    p.Add(tree, c, "host_effective_cores", -1, TextPosition{}, "host_effective_cores",
          absl::StrCat("must be in [0, host_cores = ", c.host_cores(), "] (0: host_cores)"));
  } else if (c.host_effective_cores() > 0 && c.host_cores() == 0) {
    p.Add(tree, c, "host_effective_cores", -1, TextPosition{}, "host_effective_cores",
          "applies to a job on one host only: set host_cores too");
  }
  if (c.colocated_servers() && c.machines() >= 1 && c.servers() % c.machines() != 0) {
    p.Add(tree, c, "colocated_servers", -1, TextPosition{}, "colocated_servers",
          absl::StrCat("needs servers spread evenly over the machines: ", c.servers(),
                       " servers on ", c.machines(), " machines"));
  }
  return p.ToStatus();
}

absl::Status ValidateCostTable(const proto::CostTable& t, const TextProtoTree* tree,
                               absl::string_view source) {
  TextProtoProblems p(source);
  if (t.sum_gbytes_per_s() < 0) {
    p.Add(tree, t, "sum_gbytes_per_s", -1, TextPosition{}, "sum_gbytes_per_s", "must be >= 0");
  }
  if (t.copy_gbytes_per_s() < 0) {
    p.Add(tree, t, "copy_gbytes_per_s", -1, TextPosition{}, "copy_gbytes_per_s", "must be >= 0");
  }
  for (int i = 0; i < t.codecs_size(); ++i) {
    const auto& codec = t.codecs(i);
    const auto* sub = NestedTree(tree, t, "codecs", i);
    TextPosition line = PositionOf(tree, t, "codecs", i, TextPosition{});
    std::string here = absl::StrCat("codecs[", i, "]");
    if (compress::IsNoneName(codec.name())) {
      p.Add(sub, codec, "name", -1, line, here + ".name",
            "must name a codec (uncompressed is always an option)");
    }
    if (codec.ratio() <= 0 || codec.ratio() > 2) {
      p.Add(sub, codec, "ratio", -1, line, here + ".ratio",
            absl::StrCat("must be in (0, 2], got ", codec.ratio()));
    }
    if (codec.overhead_bytes() < 0) {
      p.Add(sub, codec, "overhead_bytes", -1, line, here + ".overhead_bytes", "must be >= 0");
    }
    if (!(codec.kept_fraction() >= 0 && codec.kept_fraction() <= 1)) {
      p.Add(sub, codec, "kept_fraction", -1, line, here + ".kept_fraction",
            absl::StrCat("must be in [0, 1], got ", codec.kept_fraction()));
    }
    if (codec.exchange() == proto::EXCHANGE_SUMMED_INDICES &&
        (codec.kept_fraction() <= 0 || codec.kept_fraction() > codec.ratio())) {
      p.Add(sub, codec, "kept_fraction", -1, line, here + ".kept_fraction",
            absl::StrCat(
                "EXCHANGE_SUMMED_INDICES needs kept_fraction in (0, ratio = ", codec.ratio(),
                "] (ratio - kept_fraction: the index section), got ", codec.kept_fraction()));
    }
    if (codec.union_pull() && codec.kept_fraction() <= 0) {
      p.Add(sub, codec, "union_pull", -1, line, here + ".union_pull",
            "union_pull needs kept_fraction > 0 (the union is sized from it)");
    }
    bool seen[3] = {false, false, false};
    for (int d = 0; d < codec.costs_size(); ++d) {
      const auto& cost = codec.costs(d);
      const auto* dsub = NestedTree(sub, codec, "costs", d);
      TextPosition dline = PositionOf(sub, codec, "costs", d, line);
      std::string dhere = absl::StrCat(here, ".costs[", d, "]");
      if (cost.device() != proto::DEVICE_CPU && cost.device() != proto::DEVICE_GPU) {
        p.Add(dsub, cost, "device", -1, dline, dhere + ".device",
              "must be DEVICE_CPU or DEVICE_GPU");
        continue;
      }
      if (seen[cost.device()]) {
        p.Add(dsub, cost, "device", -1, dline, dhere + ".device", "device listed twice");
      }
      seen[cost.device()] = true;
      CheckCurve(cost.encode(), dsub, cost, "encode", dline, dhere + ".encode", p);
      CheckCurve(cost.decode(), dsub, cost, "decode", dline, dhere + ".decode", p);
      if (!cost.between_rounds().empty()) {
        if (!codec.two_round()) {
          p.Add(dsub, cost, "between_rounds", -1, dline, dhere + ".between_rounds",
                "only for two-round codecs (two_round: true)");
        }
        CheckCurve(cost.between_rounds(), dsub, cost, "between_rounds", dline,
                   dhere + ".between_rounds", p);
      }
      if (cost.aggregate().empty() != cost.aggregate_base().empty()) {
        p.Add(dsub, cost, "aggregate", -1, dline, dhere + ".aggregate",
              "aggregate and aggregate_base go together (both measured, or neither)");
      }
      if (!cost.aggregate().empty()) {
        if (cost.device() != proto::DEVICE_CPU) {
          p.Add(dsub, cost, "aggregate", -1, dline, dhere + ".aggregate",
                "only DEVICE_CPU costs have server aggregation (servers run on CPUs)");
        }
        CheckCurve(cost.aggregate(), dsub, cost, "aggregate", dline, dhere + ".aggregate", p);
        CheckCurve(cost.aggregate_base(), dsub, cost, "aggregate_base", dline,
                   dhere + ".aggregate_base", p);
      }
    }
    for (int k = 0; k < codec.sizes_size(); ++k) {
      const proto::SizePoint& point = codec.sizes(k);
      if (point.bytes() <= 0 || point.encoded_bytes() < 0 ||
          (k > 0 && point.bytes() <= codec.sizes(k - 1).bytes())) {
        p.Add(sub, codec, "sizes", k, line, absl::StrCat(here, ".sizes[", k, "]"),
              "bytes must be > 0 and increasing, encoded_bytes >= 0");
      }
    }
    if (codec.two_round() && codec.reencodable()) {
      p.Add(sub, codec, "reencodable", -1, line, here + ".reencodable",
            "a two-round codec pulls its summed factors and is never re-encoded");
    }
    for (int j = 0; j < i; ++j) {
      if (t.codecs(j).name() == codec.name() &&
          t.codecs(j).SerializeAsString() == codec.SerializeAsString()) {
        p.Add(sub, codec, "name", -1, line, here + ".name", "duplicate codec entry");
      }
    }
  }
  return p.ToStatus();
}

absl::Status ValidateOptions(const proto::PlannerOptions& o, const TextProtoTree* tree,
                             absl::string_view source) {
  TextProtoProblems p(source);
  if (o.min_compress_bytes() < 0) {
    p.Add(tree, o, "min_compress_bytes", -1, TextPosition{}, "min_compress_bytes", "must be >= 0");
  }
  for (int i = 0; i < o.partition_bytes_size(); ++i) {
    if (o.partition_bytes(i) < 4) {
      p.Add(tree, o, "partition_bytes", i, TextPosition{}, absl::StrCat("partition_bytes[", i, "]"),
            absl::StrCat("must be >= 4, got ", o.partition_bytes(i)));
    }
  }
  if (o.min_relative_gain() < 0 || o.min_relative_gain() >= 1) {
    p.Add(tree, o, "min_relative_gain", -1, TextPosition{}, "min_relative_gain",
          "must be in [0, 1)");
  }
  if (o.uniform_starts() < -1) {
    p.Add(tree, o, "uniform_starts", -1, TextPosition{}, "uniform_starts", "must be >= -1");
  }
  if (o.max_joint_offload_choices() < 0) {
    p.Add(tree, o, "max_joint_offload_choices", -1, TextPosition{}, "max_joint_offload_choices",
          "must be >= 0");
  }
  for (int i = 0; i < o.allowed_size(); ++i) {
    if (o.allowed(i).name_pattern().empty()) {
      p.Add(NestedTree(tree, o, "allowed", i), o.allowed(i), "name_pattern", -1,
            PositionOf(tree, o, "allowed", i, TextPosition{}),
            absl::StrCat("allowed[", i, "].name_pattern"), "must not be empty");
    }
  }
  return p.ToStatus();
}

template <typename M, typename V>
absl::Status ParseAndValidate(absl::string_view text, absl::string_view source, M* out,
                              V validate) {
  TextProtoTree tree;
  if (absl::Status s = ParseTextProto(text, source, out, &tree); !s.ok()) return s;
  return validate(*out, &tree, source);
}

template <typename M, typename Parse>
absl::StatusOr<M> LoadFile(const std::string& path, Parse parse) {
  auto text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  M message;
  if (absl::Status s = parse(*text, path, &message); !s.ok()) return s;
  return message;
}

}  // namespace

absl::Status ValidateProfile(const proto::ModelProfile& m, const TextProtoTree* tree,
                             absl::string_view source) {
  TextProtoProblems p(source);
  if (m.tensors().empty()) p.Add(tree, m, "tensors", -1, TextPosition{}, "tensors", "no tensors");
  if (!FiniteAtLeastZero(m.forward_us()))
    p.Add(tree, m, "forward_us", -1, TextPosition{}, "forward_us", "must be >= 0 and finite");
  if (!FiniteAtLeastZero(m.measured_forward_cpu_us())) {
    p.Add(tree, m, "measured_forward_cpu_us", -1, TextPosition{}, "measured_forward_cpu_us",
          "must be >= 0 and finite");
  }
  for (int i = 0; i < m.tensors_size(); ++i) {
    const auto& t = m.tensors(i);
    const auto* sub = NestedTree(tree, m, "tensors", i);
    TextPosition line = PositionOf(tree, m, "tensors", i, TextPosition{});
    std::string here = absl::StrCat("tensors[", i, "]");
    if (t.name().empty()) p.Add(sub, t, "name", -1, line, here + ".name", "must not be empty");
    if (t.elements() <= 0 || t.elements() > kMaxProfileElements) {
      p.Add(sub, t, "elements", -1, line, here + ".elements",
            absl::StrCat("must be in 1..", kMaxProfileElements, ", got ", t.elements()));
    }
    if (t.element_bytes() < 0 || t.element_bytes() > 8) {
      p.Add(sub, t, "element_bytes", -1, line, here + ".element_bytes",
            absl::StrCat("must be 0 (fp32) or 1..8, got ", t.element_bytes()));
    }
    if (!FiniteAtLeastZero(t.ready_gap_us())) {
      p.Add(sub, t, "ready_gap_us", -1, line, here + ".ready_gap_us",
            absl::StrCat("must be >= 0 and finite, got ", t.ready_gap_us()));
    }
    if (t.has_block_density() && !(t.block_density() >= 0 && t.block_density() <= 1)) {
      p.Add(sub, t, "block_density", -1, line, here + ".block_density",
            absl::StrCat("must be in [0, 1], got ", t.block_density()));
    }
    if (t.shape_size() > 0 &&
        !ShapeHolds(absl::MakeConstSpan(t.shape().data(), t.shape_size()), t.elements())) {
      p.Add(sub, t, "shape", 0, line, here + ".shape",
            absl::StrCat("dimensions must be > 0 and multiply to elements (", t.elements(), ")"));
    }
  }
  if (!FiniteAtLeastZero(m.measured_round_us()) || !FiniteAtLeastZero(m.measured_round_cpu_us()) ||
      m.cpu_cores() < 0 || !FiniteAtLeastZero(m.host_cpu_busy()) || m.host_cpu_busy() > 1 ||
      !FiniteAtLeastZero(m.measured_round_wait_us())) {
    p.Add(tree, m, "host_cpu_busy", -1, TextPosition{},
          "measured_round_us, measured_round_cpu_us, cpu_cores, host_cpu_busy, "
          "measured_round_wait_us",
          "must be >= 0 and finite (host_cpu_busy a fraction, <= 1)");
  }
  return p.ToStatus();
}

absl::Status ParseModelProfile(absl::string_view text, absl::string_view source_name,
                               proto::ModelProfile* out) {
  return ParseAndValidate(text, source_name, out, ValidateProfile);
}
absl::Status ParseClusterDescription(absl::string_view text, absl::string_view source_name,
                                     proto::ClusterDescription* out) {
  return ParseAndValidate(text, source_name, out, ValidateCluster);
}
absl::Status ParseCostTable(absl::string_view text, absl::string_view source_name,
                            proto::CostTable* out) {
  return ParseAndValidate(text, source_name, out, ValidateCostTable);
}
absl::Status ParsePlannerOptions(absl::string_view text, absl::string_view source_name,
                                 proto::PlannerOptions* out) {
  return ParseAndValidate(text, source_name, out, ValidateOptions);
}

absl::StatusOr<proto::ModelProfile> LoadModelProfile(const std::string& path) {
  return LoadFile<proto::ModelProfile>(path, ParseModelProfile);
}
absl::StatusOr<proto::ClusterDescription> LoadClusterDescription(const std::string& path) {
  return LoadFile<proto::ClusterDescription>(path, ParseClusterDescription);
}
absl::StatusOr<proto::CostTable> LoadCostTable(const std::string& path) {
  return LoadFile<proto::CostTable>(path, ParseCostTable);
}
absl::StatusOr<proto::PlannerOptions> LoadPlannerOptions(const std::string& path) {
  return LoadFile<proto::PlannerOptions>(path, ParsePlannerOptions);
}

proto::ClusterDescription WithDefaults(proto::ClusterDescription c) {
  if (c.machines() < 1) c.set_machines(1);
  if (c.servers() < 1) c.set_servers(1);
  if (c.workers() == 0) c.set_workers(c.machines() * std::max(1, c.gpus_per_machine()));
  if (c.pcie_link().bandwidth_gbps() <= 0) c.mutable_pcie_link()->set_bandwidth_gbps(96);
  if (c.intra_machine_link().bandwidth_gbps() <= 0) {
    c.mutable_intra_machine_link()->set_bandwidth_gbps(c.pcie_link().bandwidth_gbps());
  }
  if (c.cpu_pool_threads() == 0) c.set_cpu_pool_threads(4);
  if (c.server_threads() == 0) c.set_server_threads(2);
  if (c.server_sum_gbytes_per_s() <= 0) c.set_server_sum_gbytes_per_s(8);
  if (c.partition_bytes() <= 0) c.set_partition_bytes(4 << 20);
  return c;
}

proto::PlannerOptions WithDefaults(proto::PlannerOptions o) {
  if (o.min_compress_bytes() == 0) o.set_min_compress_bytes(65536);
  if (o.max_joint_offload_choices() == 0) o.set_max_joint_offload_choices(64);
  if (o.min_relative_gain() == 0) o.set_min_relative_gain(1e-3);
  if (o.max_loss() == proto::LOSS_UNSPECIFIED) o.set_max_loss(proto::LOSS_COMPENSATED);
  if (o.pairwise_max_tensors() == 0) o.set_pairwise_max_tensors(8);
  if (o.uniform_starts() == 0) o.set_uniform_starts(3);
  return o;
}

double InterpolateCost(const google::protobuf::RepeatedPtrField<proto::CostPoint>& points,
                       double bytes) {
  return InterpolatePoints(
      points, bytes, [](const proto::CostPoint& p) { return p.us(); },
      /*scale_below_first=*/false);
}

}  // namespace bytecomp::planner
