// The data sockets' message limit (common/socket_limits.h) assumes that every codec encodes n
// floats in at most 8n bytes plus 512 KiB, whatever its parameters: a partition of B bytes
// holds at most B / 2 elements (fp16), so MaxDataPayloadBytes(B) covers every payload. This
// checks the assumption for every registered codec, at the default, smallest and largest value
// of each parameter, and for both rounds of a two-round codec.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/socket_limits.h"
#include "bytecomp/compress.h"
#include "bytecomp/compress/two_round.h"

namespace bytecomp {
namespace {

using compress::CodecParamSpec;

// The extreme values a parameter may take, as text.
std::vector<std::string> Extremes(const CodecParamSpec& p) {
  std::vector<std::string> values = {p.default_value};
  if (p.type == CodecParamSpec::Type::kInt) {
    const double lo = p.min_exclusive ? p.min_value + 1 : p.min_value;
    const double hi = p.max_exclusive ? p.max_value - 1 : p.max_value;
    if (lo > -1e18) values.push_back(absl::StrCat(static_cast<int64_t>(lo)));
    if (hi < 1e18) values.push_back(absl::StrCat(static_cast<int64_t>(hi)));
  } else if (p.type == CodecParamSpec::Type::kDouble) {
    const double lo = p.min_exclusive ? p.min_value + 1e-6 : p.min_value;
    const double hi = p.max_exclusive ? p.max_value - 1e-6 : p.max_value;
    if (lo > -1e18) values.push_back(absl::StrCat(lo));
    if (hi < 1e18) values.push_back(absl::StrCat(hi));
  } else if (p.type == CodecParamSpec::Type::kBool) {
    values = {"true", "false"};
  } else {
    for (const std::string& c : p.choices) values.push_back(c);
  }
  return values;
}

TEST(CodecBoundsTest, EveryCodecFitsTheDataMessageLimit) {
  const compress::CodecRegistry& registry = compress::CodecRegistry::Global();
  int checked = 0;
  for (const std::string& name : registry.Names()) {
    const compress::CodecSpec* spec = registry.Find(name);
    ASSERT_NE(spec, nullptr);
    // Defaults, then each parameter alone at each of its extremes.
    std::vector<compress::CodecParams> variants = {{}};
    for (const CodecParamSpec& p : spec->params) {
      for (const std::string& v : Extremes(p)) variants.push_back({{p.name, v}});
    }
    for (const compress::CodecParams& params : variants) {
      absl::StatusOr<std::unique_ptr<compress::Codec>> codec = registry.Create(name, params);
      if (!codec.ok()) continue;  // a combination the codec refuses cannot reach the wire
      for (size_t n : {size_t{1}, size_t{7}, size_t{1000}, size_t{65537}, size_t{1} << 21}) {
        size_t bytes = (*codec)->MaxEncodedBytes(n);
        if (compress::TwoRoundCodec* two = compress::AsTwoRound(**codec)) {
          bytes = std::max({bytes, two->FirstRoundBytes(n), two->SecondRoundBytes(n)});
        }
        // n elements come from a partition of 2n bytes (fp16) or more.
        EXPECT_LE(static_cast<int64_t>(bytes), MaxDataPayloadBytes(static_cast<int64_t>(2 * n)))
            << name << " with " << params.size() << " parameter(s) set, n = " << n;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(CodecBoundsTest, DataLimitCoversRawPartitionsAndProbes) {
  proto::ClusterConfig config;
  config.set_partition_bytes(4 << 20);
  config.set_link_probe_bytes(1 << 20);
  const SocketLimits limits = DataSocketLimits(config);
  EXPECT_EQ(limits.max_message_bytes, 8 * (2 << 20) + (512 << 10) + kDataFrameSlack);
  config.set_partition_bytes(4096);
  EXPECT_EQ(DataSocketLimits(config).max_message_bytes, (1 << 20) + kDataFrameSlack);
}

}  // namespace
}  // namespace bytecomp
