#include "bytecomp/planner/calibrate.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/compress/registry.h"

namespace bytecomp::planner {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs `call` until `seconds` have passed (at least 3 times); returns the median in us.
template <typename Call>
absl::StatusOr<double> TimeCall(double seconds, Call call) {
  std::vector<double> times;
  const auto start = Clock::now();
  while (times.size() < 3 ||
         std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    const auto t0 = Clock::now();
    if (absl::Status s = call(); !s.ok()) return s;
    times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (times.size() >= 10000) break;
  }
  return Median(times);
}

std::string HostName() {
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) != 0) return "this host";
  return name;
}

}  // namespace

absl::StatusOr<proto::CostTable> CalibrateCpuCosts(const proto::CostTable& template_table,
                                                   const CalibrationOptions& options) {
  if (options.sizes.size() < 2) {
    return absl::InvalidArgumentError("calibration needs at least two sizes");
  }
  const auto& registry = compress::CodecRegistry::Global();
  proto::CostTable entries = template_table;
  if (entries.codecs().empty()) {
    for (const std::string& name : registry.Names()) {
      if (name != "none") entries.add_codecs()->set_name(name);
    }
  }
  proto::CostTable table;
  table.set_source(absl::StrCat(
      "measured by bytecomp-plan --calibrate on ", HostName(),
      ", one CPU thread, Gaussian inputs; GPU costs (where present) copied unmeasured from "
      "the template"));
  std::mt19937 rng(12345);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> input(options.sizes.back() / 4);
  for (float& x : input) x = normal(rng);
  std::vector<float> output(input.size());
  std::vector<uint8_t> encoded;

  std::vector<std::string> skipped;
  for (const proto::CodecCost& entry : entries.codecs()) {
    if (registry.Find(entry.name()) == nullptr) {
      skipped.push_back(entry.name());
      continue;
    }
    compress::CodecParams params(entry.params().begin(), entry.params().end());
    auto codec = registry.Create(entry.name(), params);
    if (!codec.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("calibrating '", entry.name(),
                                                     "': ", codec.status().message()));
    }
    proto::CodecCost out = entry;
    out.clear_costs();
    const compress::CodecProperties properties = (*codec)->properties();
    out.set_summable(properties.summable_encoded);
    out.set_reencodable(!properties.two_round && !properties.majority_vote);
    proto::DeviceCost* cpu = out.add_costs();
    cpu->set_device(proto::DEVICE_CPU);
    std::vector<double> encoded_bytes;
    for (int64_t bytes : options.sizes) {
      const size_t n = static_cast<size_t>(bytes / 4);
      absl::Span<const float> in(input.data(), n);
      encoded.resize((*codec)->MaxEncodedBytes(n));
      size_t written = 0;
      compress::CodecContext ctx;
      ctx.key = 1;
      auto encode_us = TimeCall(options.seconds_per_point, [&]() -> absl::Status {
        ++ctx.round;  // stateful codecs see successive rounds
        auto size = (*codec)->Encode(in, ctx, absl::MakeSpan(encoded));
        if (!size.ok()) return size.status();
        written = *size;
        return absl::OkStatus();
      });
      if (!encode_us.ok()) {
        return absl::InternalError(absl::StrCat("calibrating '", entry.name(), "' encode of ",
                                                bytes, " bytes: ", encode_us.status().message()));
      }
      auto decode_us = TimeCall(options.seconds_per_point, [&]() -> absl::Status {
        return (*codec)->Decode(absl::MakeConstSpan(encoded.data(), written), ctx,
                                absl::MakeSpan(output.data(), n));
      });
      if (!decode_us.ok()) {
        return absl::InternalError(absl::StrCat("calibrating '", entry.name(), "' decode of ",
                                                bytes, " bytes: ", decode_us.status().message()));
      }
      auto* e = cpu->add_encode();
      e->set_bytes(bytes);
      e->set_us(*encode_us);
      auto* d = cpu->add_decode();
      d->set_bytes(bytes);
      d->set_us(*decode_us);
      encoded_bytes.push_back(static_cast<double>(written));
    }
    // Compressed size = ratio * bytes + overhead, from the two largest sizes.
    const size_t k = options.sizes.size();
    const double in_lo = static_cast<double>(options.sizes[k - 2]);
    const double in_hi = static_cast<double>(options.sizes[k - 1]);
    double ratio = (encoded_bytes[k - 1] - encoded_bytes[k - 2]) / (in_hi - in_lo);
    ratio = std::clamp(ratio, 1e-6, 2.0);
    out.set_ratio(ratio);
    out.set_overhead_bytes(
        std::max<int64_t>(0, static_cast<int64_t>(encoded_bytes[k - 2] - ratio * in_lo)));
    for (const auto& cost : entry.costs()) {
      if (cost.device() == proto::DEVICE_GPU) *out.add_costs() = cost;
    }
    *table.add_codecs() = std::move(out);
  }
  if (!skipped.empty()) {
    table.set_source(absl::StrCat(table.source(), "; not in the codec registry, left out: ",
                                  absl::StrJoin(skipped, ", ")));
  }
  return table;
}

}  // namespace bytecomp::planner
