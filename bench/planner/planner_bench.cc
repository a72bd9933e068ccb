// Planner time per shipped profile (median of repeated runs), wall and CPU time, with one
// full timeline simulation of the same model as the reference measured in the same run.
// Besides the shipped profiles, "generated-2000": bert-base's tensors repeated (renamed) to
// 2,000 tensors, a model the size of a deep transformer or a fused MoE.
//
//   planner_bench [--cluster=NAME] [--repeats=N] [--models=a,b]
//   (clusters under scheduler/planner/clusters; --models picks rows, default all)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "bytecomp/planner/planner.h"

namespace {

using namespace bytecomp::planner;

double CpuMs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
double WallMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
// `base`'s tensors, repeated under prefixed names until there are `tensors` of them; the
// forward pass grows with the copies.
bytecomp::proto::ModelProfile Repeated(const bytecomp::proto::ModelProfile& base, int tensors) {
  bytecomp::proto::ModelProfile out = base;
  out.clear_tensors();
  out.set_model(base.model() + "-x" + std::to_string(tensors));
  int copies = 0;
  while (out.tensors_size() < tensors) {
    for (const auto& t : base.tensors()) {
      if (out.tensors_size() == tensors) break;
      auto* copy = out.add_tensors();
      *copy = t;
      copy->set_name("copy" + std::to_string(copies) + "." + t.name());
    }
    ++copies;
  }
  out.set_forward_us(base.forward_us() * copies);
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string cluster_name = "8x1gpu-10g";
  int repeats = 11;
  std::string models = "resnet50,resnet101,vgg16,bert-base,gpt2,lstm,generated-2000";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--cluster=", 10) == 0) cluster_name = argv[i] + 10;
    if (std::strncmp(argv[i], "--repeats=", 10) == 0)
      repeats = std::max(1, std::atoi(argv[i] + 10));
    if (std::strncmp(argv[i], "--models=", 9) == 0) models = argv[i] + 9;
  }
  const std::string dir = BYTECOMP_PLANNER_DIR;
  auto cluster = LoadClusterDescription(dir + "/clusters/" + cluster_name + ".pbtxt");
  auto costs = LoadCostTable(dir + "/costs/nominal.pbtxt");
  if (!cluster.ok() || !costs.ok()) {
    std::fprintf(stderr, "%s %s\n", cluster.status().ToString().c_str(),
                 costs.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "cluster %s, nominal cost table, %d repeats; times in ms (median); 'sim' is one "
      "full simulation of the uncompressed choice, the reference\n",
      cluster_name.c_str(), repeats);
  std::printf("%-14s %7s %8s | %9s %9s %9s | %9s %9s | %8s %9s | %9s %9s %9s\n", "model", "tensors",
              "options", "plan wall", "plan cpu", "published", "sim cpu", "plan/sim", "sims",
              "events", "none", "all-fp16", "planned");
  const std::vector<std::string> names = absl::StrSplit(models, ',', absl::SkipEmpty());
  for (const std::string& name : names) {
    const char* model = name.c_str();
    const bool generated = name == "generated-2000";
    PlannerInputs in;
    auto profile =
        LoadModelProfile(dir + "/profiles/" + (generated ? "bert-base" : name) + ".pbtxt");
    if (!profile.ok()) {
      std::fprintf(stderr, "%s\n", profile.status().ToString().c_str());
      return 1;
    }
    in.profile = generated ? Repeated(*profile, 2000) : *profile;
    in.cluster = *cluster;
    in.costs = *costs;
    std::vector<double> wall, cpu, published, sim_cpu;
    PlanResult result;
    size_t options = 0;
    for (int r = 0; r < repeats; ++r) {
      // Prepare (decision tree and costs) is part of planning.
      double w0 = WallMs(), c0 = CpuMs();
      auto prepared = Prepare(in);
      result = PlanByteComp(*prepared);
      cpu.push_back(CpuMs() - c0);
      wall.push_back(WallMs() - w0);
      options = 0;
      for (const auto& t : prepared->sim.tensors) options += t.options.size();

      PlannerInputs only_published = in;
      only_published.options.set_skip_refinement(true);
      only_published.options.set_start_uncompressed(true);
      double p0 = CpuMs();
      auto prepared_published = Prepare(only_published);
      PlanByteComp(*prepared_published);
      published.push_back(CpuMs() - p0);

      TimelineSimulator sim(&prepared->sim);
      double s0 = CpuMs();
      const int kSims = 20;
      for (int k = 0; k < kSims; ++k) sim.Simulate(prepared->none_index);
      sim_cpu.push_back((CpuMs() - s0) / kSims);
    }
    std::printf(
        "%-14s %7d %8zu | %9.2f %9.2f %9.2f | %9.3f %9.0f | %8lld %9lld | %9.1f %9.1f %9.1f\n",
        model, in.profile.tensors().size(), static_cast<size_t>(options), Median(wall), Median(cpu),
        Median(published), Median(sim_cpu), Median(cpu) / Median(sim_cpu),
        static_cast<long long>(result.simulations), static_cast<long long>(result.events),
        result.no_compression_us / 1e3, result.compress_everything_us / 1e3,
        result.predicted_us / 1e3);
  }
  std::printf(
      "plan cpu: thread CPU time of Prepare + PlanByteComp (this host is shared, wall "
      "time includes waiting for a core); published: CPU time of the paper's steps "
      "alone (from no compression, no refinement; dominated options dropped)\n");
  return 0;
}
