#include "bytecomp/telemetry/metrics.h"

#include <sstream>

#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace bytecomp::telemetry {
namespace {

const char* DirectionName(Direction d) { return d == Direction::kIn ? "in" : "out"; }

// Round times from 1 ms to about 65 s, doubling.
prometheus::Histogram::BucketBoundaries RoundBuckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double s = 0.001; s < 70; s *= 2) b.push_back(s);
  return b;
}

}  // namespace

NodeMetrics::NodeMetrics(std::string role, int rank)
    : labels_{{"role", role}, {"rank", absl::StrCat(rank)}},
      registry_(std::make_shared<prometheus::Registry>()),
      wire_family_(prometheus::BuildCounter()
                       .Name("bytecomp_wire_bytes_total")
                       .Help("Bytes moved on the wire (payloads), by direction and codec")
                       .Labels(labels_)
                       .Register(*registry_)),
      raw_family_(prometheus::BuildCounter()
                      .Name("bytecomp_raw_bytes_total")
                      .Help("The same data uncompressed, by direction and codec")
                      .Labels(labels_)
                      .Register(*registry_)),
      ratio_family_(prometheus::BuildGauge()
                        .Name("bytecomp_compression_ratio")
                        .Help("Raw bytes over wire bytes so far, by direction and codec")
                        .Labels(labels_)
                        .Register(*registry_)),
      refused_family_(prometheus::BuildCounter()
                          .Name("bytecomp_refused_requests_total")
                          .Help("Requests refused, by reason")
                          .Labels(labels_)
                          .Register(*registry_)),
      rounds_(prometheus::BuildCounter()
                  .Name("bytecomp_rounds_total")
                  .Help("Rounds completed (worker: push_pull operations; server: key rounds)")
                  .Labels(labels_)
                  .Register(*registry_)
                  .Add({})),
      round_seconds_(prometheus::BuildHistogram()
                         .Name("bytecomp_round_duration_seconds")
                         .Help("Duration of a round (worker: push_pull call to completion; "
                               "server: first push to the last push summed)")
                         .Labels(labels_)
                         .Register(*registry_)
                         .Add({}, RoundBuckets())) {}

NodeMetrics::CodecCounters& NodeMetrics::CountersFor(Direction direction, absl::string_view codec) {
  const int d = static_cast<int>(direction);
  if (codec.empty()) codec = "none";
  const int known = codec_count_[d].load(std::memory_order_acquire);
  for (int i = 0; i < known; ++i) {
    if (codecs_[d][i].codec == codec) return codecs_[d][i];
  }
  absl::MutexLock lock(&mu_);
  const int count = codec_count_[d].load();
  for (int i = 0; i < count; ++i) {
    if (codecs_[d][i].codec == codec) return codecs_[d][i];
  }
  // Past the table's size every further codec is counted as "other".
  const std::string name = count == kMaxCodecs - 1 ? "other" : std::string(codec);
  if (count == kMaxCodecs) return codecs_[d][kMaxCodecs - 1];
  const std::map<std::string, std::string> labels{{"direction", DirectionName(direction)},
                                                  {"codec", name}};
  CodecCounters& slot = codecs_[d][count];
  slot.codec = name;
  slot.wire = &wire_family_.Add(labels);
  slot.raw = &raw_family_.Add(labels);
  slot.ratio = &ratio_family_.Add(labels);
  codec_count_[d].store(count + 1, std::memory_order_release);
  return slot;
}

void NodeMetrics::CountBytes(Direction direction, absl::string_view codec, int64_t wire,
                             int64_t raw) {
  CodecCounters& c = CountersFor(direction, codec);
  c.wire->Increment(static_cast<double>(wire));
  c.raw->Increment(static_cast<double>(raw));
  wire_total_[static_cast<int>(direction)].fetch_add(wire, std::memory_order_relaxed);
}

void NodeMetrics::CountRound(double seconds) {
  rounds_.Increment();
  round_seconds_.Observe(seconds);
}

void NodeMetrics::CountRefused(absl::string_view reason) {
  absl::MutexLock lock(&mu_);
  refused_family_.Add({{"reason", std::string(reason)}}).Increment();
}

prometheus::Gauge& NodeMetrics::Gauge(const std::string& name, const std::string& help,
                                      const std::map<std::string, std::string>& labels) {
  absl::MutexLock lock(&mu_);
  return prometheus::BuildGauge()
      .Name(name)
      .Help(help)
      .Labels(labels_)
      .Register(*registry_)
      .Add(labels);
}

void NodeMetrics::OnScrape(std::function<void()> refresh) {
  absl::MutexLock lock(&mu_);
  refreshers_.push_back(std::move(refresh));
}

int64_t NodeMetrics::WireBytes(Direction direction) const {
  return wire_total_[static_cast<int>(direction)].load();
}

std::string NodeMetrics::Render() {
  std::vector<std::function<void()>> refreshers;
  {
    absl::MutexLock lock(&mu_);
    refreshers = refreshers_;
  }
  for (auto& refresh : refreshers) refresh();
  for (int d = 0; d < 2; ++d) {
    const int count = codec_count_[d].load(std::memory_order_acquire);
    for (int i = 0; i < count; ++i) {
      const double wire = codecs_[d][i].wire->Value();
      codecs_[d][i].ratio->Set(wire > 0 ? codecs_[d][i].raw->Value() / wire : 0);
    }
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

}  // namespace bytecomp::telemetry
