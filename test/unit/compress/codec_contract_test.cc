// The contract every registered codec keeps, whatever family it belongs to: non-finite input
// is rejected naming the index; Encode stays within MaxEncodedBytes; Decode fills exactly the
// requested length with finite values; malformed payloads (truncated, extended, empty, wrong
// length, random corruption) are InvalidArgument or decode to finite values, never a crash or
// an out-of-bounds write; DecodeAdd equals Decode plus the accumulator.
#include <cmath>
#include <limits>
#include <random>

#include "absl/strings/match.h"
#include "codec_test_util.h"

namespace bytecomp::compress {
namespace {

using testing::AdversarialInputs;
using testing::EncodeToVector;
using testing::MustCreate;
using testing::RandomNormal;
using testing::TestContext;

class CodecContractTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CodecContractTest, NonFiniteInputIsRejectedNamingTheIndex) {
  auto codec = MustCreate(GetParam());
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    for (size_t at : {size_t{0}, size_t{77}, size_t{299}}) {
      auto x = RandomNormal(300, 5);
      x[at] = bad;
      auto enc = EncodeToVector(*codec, x, TestContext());
      ASSERT_FALSE(enc.ok()) << "accepted " << bad << " at " << at;
      EXPECT_EQ(enc.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_TRUE(
          absl::StrContains(enc.status().message(), absl::StrCat("element ", at, " of 300")))
          << enc.status();
    }
  }
}

TEST_P(CodecContractTest, EncodeWithinBoundAndDecodeFillsTheLength) {
  auto codec = MustCreate(GetParam());
  for (const auto& in : AdversarialInputs()) {
    for (uint64_t round : {1, 2}) {
      const size_t n = in.values.size();
      const CodecContext ctx = TestContext(round);
      // Guard bytes after the bound catch writes past MaxEncodedBytes.
      std::vector<uint8_t> out(codec->MaxEncodedBytes(n) + 64, 0xab);
      auto bytes =
          codec->Encode(in.values, ctx, absl::MakeSpan(out).first(codec->MaxEncodedBytes(n)));
      ASSERT_TRUE(bytes.ok()) << in.name << ": " << bytes.status();
      EXPECT_LE(*bytes, codec->MaxEncodedBytes(n)) << in.name;
      for (size_t g = codec->MaxEncodedBytes(n); g < out.size(); ++g) {
        ASSERT_EQ(out[g], 0xab) << in.name << ": wrote past MaxEncodedBytes";
      }
      std::vector<float> decoded(n + 8, std::numeric_limits<float>::quiet_NaN());
      ASSERT_TRUE(codec
                      ->Decode(absl::MakeConstSpan(out.data(), *bytes), ctx,
                               absl::MakeSpan(decoded).first(n))
                      .ok())
          << in.name;
      for (size_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(decoded[i])) << in.name << " " << i;
      for (size_t i = n; i < n + 8; ++i)
        ASSERT_TRUE(std::isnan(decoded[i])) << "wrote past the output";
      // DecodeAdd == accumulator + Decode.
      std::vector<float> acc = RandomNormal(n, 9), expected = acc;
      for (size_t i = 0; i < n; ++i) expected[i] += decoded[i];
      ASSERT_TRUE(
          codec->DecodeAdd(absl::MakeConstSpan(out.data(), *bytes), ctx, absl::MakeSpan(acc)).ok());
      for (size_t i = 0; i < n; ++i) {
        ASSERT_NEAR(acc[i], expected[i], 1e-6 * (1 + std::fabs(expected[i])))
            << in.name << " " << i;
      }
    }
  }
}

TEST_P(CodecContractTest, TooSmallOutputBufferIsAnError) {
  auto codec = MustCreate(GetParam());
  const auto x = RandomNormal(1000, 3);
  std::vector<uint8_t> out(codec->MaxEncodedBytes(x.size()) - 1);
  EXPECT_FALSE(codec->Encode(x, TestContext(), absl::MakeSpan(out)).ok());
}

TEST_P(CodecContractTest, MalformedPayloadsAreRejected) {
  auto codec = MustCreate(GetParam());
  const size_t n = 1000;
  const auto x = RandomNormal(n, 4);
  auto enc = EncodeToVector(*codec, x, TestContext());
  ASSERT_TRUE(enc.ok());
  std::vector<float> out(n);
  auto rejected = [&](const std::vector<uint8_t>& bytes, size_t length) {
    std::vector<float> o(length);
    auto s = codec->Decode(bytes, TestContext(), absl::MakeSpan(o));
    return s.code() == absl::StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(rejected({}, n)) << "empty payload";
  auto truncated = *enc;
  truncated.pop_back();
  EXPECT_TRUE(rejected(truncated, n)) << "truncated by one byte";
  auto extended = *enc;
  extended.push_back(0);
  EXPECT_TRUE(rejected(extended, n)) << "one byte too many";
  EXPECT_TRUE(rejected(*enc, n + 1)) << "decoded into a longer output";
  EXPECT_TRUE(rejected(*enc, n - 1)) << "decoded into a shorter output";
}

TEST_P(CodecContractTest, CorruptedPayloadsNeverCrashOrYieldNonFinite) {
  auto codec = MustCreate(GetParam());
  const size_t n = 513;
  const auto x = RandomNormal(n, 6);
  auto enc = EncodeToVector(*codec, x, TestContext());
  ASSERT_TRUE(enc.ok());
  std::mt19937 gen(42);
  for (int trial = 0; trial < 400; ++trial) {
    auto bytes = *enc;
    const int flips = 1 + trial % 4;
    for (int f = 0; f < flips && !bytes.empty(); ++f) {
      const size_t at =
          trial % 2 == 0 ? gen() % std::min<size_t>(bytes.size(), 48) : gen() % bytes.size();
      bytes[at] ^= static_cast<uint8_t>(1u << (gen() % 8));
    }
    if (trial % 7 == 0) bytes.resize(gen() % (bytes.size() + 1));
    std::vector<float> out(n + 4, 0.0f);
    auto s = codec->Decode(bytes, TestContext(), absl::MakeSpan(out).first(n));
    if (s.ok()) {
      for (size_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(out[i])) << "trial " << trial;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    }
    for (size_t i = n; i < n + 4; ++i) ASSERT_EQ(out[i], 0.0f) << "wrote past the output";
  }
}

TEST_P(CodecContractTest, EmptyInputIsHandled) {
  auto codec = MustCreate(GetParam());
  std::vector<float> empty;
  std::vector<uint8_t> out(codec->MaxEncodedBytes(0) + 1);
  auto bytes = codec->Encode(empty, TestContext(), absl::MakeSpan(out));
  if (bytes.ok()) {
    std::vector<float> o;
    EXPECT_TRUE(
        codec->Decode(absl::MakeConstSpan(out.data(), *bytes), TestContext(), absl::MakeSpan(o))
            .ok());
  } else {
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST_P(CodecContractTest, PropertiesAreConsistent) {
  auto codec = MustCreate(GetParam());
  EXPECT_EQ(codec->name(), GetParam());
  const CodecProperties p = codec->properties();
  const auto x = RandomNormal(100, 1);
  auto enc = EncodeToVector(*codec, x, TestContext());
  ASSERT_TRUE(enc.ok());
  std::vector<float> values(codec->SummedLength(x.size(), TestContext()), 0.0f);
  const absl::Status s =
      codec->AddEncodedValues(*enc, TestContext(), x.size(), absl::MakeSpan(values));
  if (p.summable_encoded) {
    EXPECT_TRUE(s.ok()) << s;
  } else {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  }
}

INSTANTIATE_TEST_SUITE_P(AllRegisteredCodecs, CodecContractTest,
                         ::testing::ValuesIn(CodecRegistry::Global().Names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace bytecomp::compress
