#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "codec_test_util.h"

namespace bytecomp::compress {
namespace {

using testing::AdversarialInputs;
using testing::DecodeToVector;
using testing::EncodeToVector;
using testing::MustCreate;
using testing::RandomHeavyTail;
using testing::RandomNormal;
using testing::RoundTrip;
using testing::TestContext;

uint32_t U32At(const std::vector<uint8_t>& b, size_t off) {
  uint32_t v;
  std::memcpy(&v, b.data() + off, 4);
  return v;
}

size_t ExpectedK(double ratio, size_t n) {
  return n == 0 ? 0 : std::clamp<size_t>(static_cast<size_t>(std::ceil(ratio * n)), 1, n);
}

// The documented index-section size: min(raw, bit-packed deltas, varint deltas).
size_t ExpectedIndexBytes(const std::vector<uint32_t>& idx) {
  uint32_t max_delta = 0;
  size_t varint = 0;
  int64_t prev = -1;
  for (uint32_t i : idx) {
    const uint32_t d = static_cast<uint32_t>(i - prev - 1);
    prev = i;
    max_delta = std::max(max_delta, d);
    int bits = d == 0 ? 1 : 32 - __builtin_clz(d);
    varint += (bits + 6) / 7;
  }
  const int width = max_delta == 0 ? 0 : 32 - __builtin_clz(max_delta);
  const size_t packed = (idx.size() * width + 7) / 8;
  return std::min({4 * idx.size(), packed, varint});
}

// The k largest magnitudes, ties to the lower index, in index order (reference by full sort).
std::vector<uint32_t> ReferenceTopk(const std::vector<float>& x, size_t k) {
  std::vector<uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

void ExpectSparseSizeFormula(const std::vector<uint8_t>& enc, const std::vector<uint32_t>& idx,
                             const std::string& what) {
  ASSERT_GE(enc.size(), 16u) << what;
  EXPECT_EQ(U32At(enc, 8), idx.size()) << what;
  EXPECT_EQ(U32At(enc, 12), ExpectedIndexBytes(idx)) << what;
  EXPECT_EQ(enc.size(), 16 + 4 * idx.size() + ExpectedIndexBytes(idx)) << what;
}

TEST(TopkTest, KeepsExactlyTheKLargestAndMatchesTheSizeFormula) {
  for (double ratio : {0.3, 0.01, 1.0}) {
    auto codec = MustCreate("topk", {{"ratio", absl::StrCat(ratio)}});
    auto inputs = AdversarialInputs();
    inputs.push_back({"heavy_100k", RandomHeavyTail(100000, 21)});
    std::vector<float> few_values(50000);  // many exact ties at the threshold, across blocks
    for (size_t i = 0; i < few_values.size(); ++i)
      few_values[i] = static_cast<float>(i * 7919 % 13) - 6;
    inputs.push_back({"ties_50k", few_values});
    // Large enough for the sampled bound (sparse_topk.cc SelectBySample): one where the sample
    // estimates well, one where the largest lie between the sampled elements.
    inputs.push_back({"heavy_1m", RandomHeavyTail(size_t{1} << 20, 22)});
    std::vector<float> hidden = RandomNormal(size_t{1} << 20, 23);
    for (size_t i = 0; i < hidden.size(); i += 128) hidden[i] *= 1000.0f;  // the stride is 128
    inputs.push_back({"unsampled_1m", hidden});
    for (const auto& in : inputs) {
      const std::string what = absl::StrCat(in.name, " ratio ", ratio);
      const size_t k = ExpectedK(ratio, in.values.size());
      auto enc = EncodeToVector(*codec, in.values, TestContext());
      ASSERT_TRUE(enc.ok()) << what << ": " << enc.status();
      const auto idx = ReferenceTopk(in.values, k);
      ExpectSparseSizeFormula(*enc, idx, what);
      auto dec = DecodeToVector(*codec, *enc, TestContext(), in.values.size());
      ASSERT_TRUE(dec.ok()) << dec.status();
      std::vector<float> expected(in.values.size(), 0.0f);
      for (uint32_t i : idx) expected[i] = in.values[i];
      EXPECT_EQ(*dec, expected) << what;
    }
  }
}

TEST(ThresholdTest, SendsExactlyTheMagnitudesAboveTheThreshold) {
  auto codec = MustCreate("threshold", {{"threshold", "0.5"}});
  for (const auto& in : AdversarialInputs()) {
    auto enc = EncodeToVector(*codec, in.values, TestContext());
    ASSERT_TRUE(enc.ok()) << in.name << ": " << enc.status();
    std::vector<uint32_t> idx;
    std::vector<float> expected(in.values.size(), 0.0f);
    for (size_t i = 0; i < in.values.size(); ++i) {
      if (std::fabs(in.values[i]) > 0.5f) {
        idx.push_back(i);
        expected[i] = in.values[i];
      }
    }
    ExpectSparseSizeFormula(*enc, idx, in.name);
    auto dec = DecodeToVector(*codec, *enc, TestContext(), in.values.size());
    ASSERT_TRUE(dec.ok()) << dec.status();
    EXPECT_EQ(*dec, expected) << in.name;
  }
}

// The finite check runs in the compaction's pass, also where no element can pass (a threshold
// at the float maximum) and for NaN and Inf among kept and dropped elements.
TEST(ThresholdTest, NonFiniteInputIsFoundAtAnyThreshold) {
  for (const char* threshold : {"0", "0.5", "3.4028235e38"}) {
    auto codec = MustCreate("threshold", {{"threshold", threshold}});
    for (size_t n : {size_t{5}, size_t{300}}) {
      for (size_t at : {size_t{0}, n / 2, n - 1}) {
        auto x = RandomNormal(n, 9);
        x[at] = at % 2 ? -std::numeric_limits<float>::infinity()
                       : std::numeric_limits<float>::quiet_NaN();
        auto enc = EncodeToVector(*codec, x, TestContext());
        ASSERT_FALSE(enc.ok()) << threshold << " n=" << n << " at " << at;
        EXPECT_TRUE(absl::StrContains(enc.status().message(), absl::StrCat("element ", at, " of")))
            << enc.status();
      }
      auto clean = EncodeToVector(*codec, RandomNormal(n, 9), TestContext());
      EXPECT_TRUE(clean.ok()) << clean.status();
    }
  }
}

TEST(ThresholdTest, DefaultIsGraces001) {
  auto codec = MustCreate("threshold");
  std::vector<float> in = {0.02f, -0.005f, 0.0100001f, 0.01f, -0.5f};
  auto dec = RoundTrip(*codec, in, TestContext());
  ASSERT_TRUE(dec.ok());
  EXPECT_EQ(*dec, (std::vector<float>{0.02f, 0.0f, 0.0100001f, 0.0f, -0.5f}));
}

// Kept elements exact, and every kept magnitude >= every dropped one.
void ExpectThresholdShaped(const std::vector<float>& x, const std::vector<float>& dec,
                           const std::string& what, size_t* kept_count) {
  float min_kept = std::numeric_limits<float>::infinity(), max_dropped = 0;
  size_t kept = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (dec[i] != 0.0f) {
      ASSERT_EQ(dec[i], x[i]) << what << " element " << i;
      min_kept = std::min(min_kept, std::fabs(x[i]));
      ++kept;
    } else {
      max_dropped = std::max(max_dropped, std::fabs(x[i]));
    }
  }
  if (kept > 0) {
    EXPECT_GE(min_kept, max_dropped) << what;
  }
  *kept_count = kept;
}

TEST(DgcTest, ThresholdSelectionWithCountNearK) {
  for (double ratio : {0.3, 0.01}) {
    auto codec = MustCreate("dgc", {{"ratio", absl::StrCat(ratio)}});
    for (const auto& in : AdversarialInputs()) {
      auto dec = RoundTrip(*codec, in.values, TestContext());
      ASSERT_TRUE(dec.ok()) << in.name << ": " << dec.status();
      size_t kept;
      ExpectThresholdShaped(in.values, *dec, in.name, &kept);
    }
    for (uint64_t seed : {1, 2, 3}) {
      const auto x = RandomNormal(200000, seed);
      auto enc = EncodeToVector(*codec, x, TestContext(seed));
      ASSERT_TRUE(enc.ok());
      const size_t k = U32At(*enc, 8);
      EXPECT_GE(k, 0.7 * ratio * x.size()) << ratio;
      EXPECT_LE(k, 1.3 * ratio * x.size()) << ratio;
      auto dec = DecodeToVector(*codec, *enc, TestContext(seed), x.size());
      ASSERT_TRUE(dec.ok());
      size_t kept;
      ExpectThresholdShaped(x, *dec, "normal", &kept);
      EXPECT_EQ(kept, k);
      std::vector<uint32_t> idx;
      for (size_t i = 0; i < x.size(); ++i) {
        if ((*dec)[i] != 0.0f) idx.push_back(i);
      }
      ExpectSparseSizeFormula(*enc, idx, "dgc normal");
    }
  }
}

TEST(AdaqTest, PerSignThresholdsAndMeans) {
  auto codec = MustCreate("adaq", {{"ratio", "0.1"}});
  auto inputs = AdversarialInputs();
  inputs.push_back({"normal_50k", RandomNormal(50000, 5)});
  for (const auto& in : inputs) {
    const auto& x = in.values;
    auto enc = EncodeToVector(*codec, x, TestContext());
    ASSERT_TRUE(enc.ok()) << in.name << ": " << enc.status();
    auto dec = DecodeToVector(*codec, *enc, TestContext(), x.size());
    ASSERT_TRUE(dec.ok()) << dec.status();
    float mean_p, mean_n;
    std::memcpy(&mean_p, enc->data() + 28, 4);
    std::memcpy(&mean_n, enc->data() + 32, 4);
    double sum_p = 0, sum_n = 0;
    size_t kp = 0, kn = 0, pos = 0, neg = 0;
    float min_kept_p = INFINITY, max_dropped_p = 0, min_kept_n = INFINITY, max_dropped_n = 0;
    std::vector<uint32_t> pos_idx, neg_idx;
    for (size_t i = 0; i < x.size(); ++i) {
      pos += x[i] > 0;
      neg += x[i] < 0;
      const bool kept_p = x[i] > 0 && (*dec)[i] == mean_p && (*dec)[i] != 0;
      const bool kept_n = x[i] < 0 && (*dec)[i] == mean_n && (*dec)[i] != 0;
      if (!kept_p && !kept_n) {
        ASSERT_EQ((*dec)[i], 0.0f) << in.name << " element " << i;
      }
      if (kept_p) {
        sum_p += x[i], ++kp, pos_idx.push_back(i);
        min_kept_p = std::min(min_kept_p, x[i]);
      } else if (x[i] > 0) {
        max_dropped_p = std::max(max_dropped_p, x[i]);
      }
      if (kept_n) {
        sum_n += x[i], ++kn, neg_idx.push_back(i);
        min_kept_n = std::min(min_kept_n, -x[i]);
      } else if (x[i] < 0) {
        max_dropped_n = std::max(max_dropped_n, -x[i]);
      }
    }
    if (kp) {
      EXPECT_NEAR(mean_p, sum_p / kp, 1e-5 * std::fabs(sum_p / kp)) << in.name;
      EXPECT_GE(min_kept_p, max_dropped_p) << in.name;
    }
    if (kn) {
      EXPECT_NEAR(mean_n, sum_n / kn, 1e-5 * std::fabs(sum_n / kn)) << in.name;
      EXPECT_GE(min_kept_n, max_dropped_n) << in.name;
    }
    EXPECT_EQ(U32At(*enc, 12), kp) << in.name;
    EXPECT_EQ(U32At(*enc, 16), kn) << in.name;
    EXPECT_EQ(enc->size(), 36 + ExpectedIndexBytes(pos_idx) + ExpectedIndexBytes(neg_idx))
        << in.name;
    if (x.size() <= 1000) {
      // The sample is the whole tensor: exactly the top ratio of each sign (ties may add more).
      if (pos) {
        EXPECT_GE(kp, ExpectedK(0.1, pos)) << in.name;
      }
      if (neg) {
        EXPECT_GE(kn, ExpectedK(0.1, neg)) << in.name;
      }
    } else {
      EXPECT_NEAR(static_cast<double>(kp), 0.1 * pos, 0.03 * pos) << in.name;
      EXPECT_NEAR(static_cast<double>(kn), 0.1 * neg, 0.03 * neg) << in.name;
    }
  }
}

TEST(RandomkTest, SharedIndicesSameOnEveryNodeAndNewEachRound) {
  auto codec = MustCreate("randomk", {{"ratio", "0.25"}});
  const auto x = RandomNormal(1001, 4);
  const size_t k = ExpectedK(0.25, 1001);
  auto support = [&](uint64_t round, uint32_t node) {
    auto enc = EncodeToVector(*codec, x, TestContext(round, node));
    EXPECT_TRUE(enc.ok());
    EXPECT_EQ(enc->size(), 8 + 4 * k);
    auto dec = DecodeToVector(*codec, *enc, TestContext(round, node), x.size());
    EXPECT_TRUE(dec.ok());
    std::vector<uint32_t> idx;
    for (size_t i = 0; i < x.size(); ++i) {
      if ((*dec)[i] != 0.0f) {
        EXPECT_EQ((*dec)[i], x[i]);
        idx.push_back(i);
      }
    }
    return idx;
  };
  const auto a = support(3, 0);
  EXPECT_EQ(a.size(), k);
  EXPECT_EQ(support(3, 1), a);  // another worker, same key and round
  EXPECT_NE(support(4, 0), a);  // next round
}

TEST(RandomkTest, AdversarialRoundTripsAndSizes) {
  auto codec = MustCreate("randomk");
  for (const auto& in : AdversarialInputs()) {
    auto enc = EncodeToVector(*codec, in.values, TestContext());
    ASSERT_TRUE(enc.ok()) << in.name;
    const size_t k = ExpectedK(0.3, in.values.size());
    EXPECT_EQ(enc->size(), 8 + 4 * k) << in.name;
    auto dec = DecodeToVector(*codec, *enc, TestContext(), in.values.size());
    ASSERT_TRUE(dec.ok()) << dec.status();
    size_t nonzero_inputs_kept = 0;
    for (size_t i = 0; i < in.values.size(); ++i) {
      if ((*dec)[i] != 0.0f) {
        EXPECT_EQ((*dec)[i], in.values[i]) << in.name;
        ++nonzero_inputs_kept;
      }
    }
    EXPECT_LE(nonzero_inputs_kept, k);
  }
}

TEST(RandomkTest, ScaledIsUnbiased) {
  auto codec = MustCreate("randomk", {{"ratio", "0.3"}, {"scale", "true"}});
  EXPECT_TRUE(codec->properties().unbiased);
  EXPECT_FALSE(MustCreate("randomk")->properties().unbiased);
  const auto x = RandomNormal(203, 8);
  testing::ExpectUnbiased(*codec, x, 600, [](int t) { return TestContext(t); });
}

TEST(RandomkTest, SummedValuesExpandToTheSumOfDecodes) {
  auto codec = MustCreate("randomk", {{"ratio", "0.1"}});
  ASSERT_TRUE(codec->properties().summable_encoded);
  const size_t n = 5000;
  const CodecContext ctx = TestContext(9);
  std::vector<float> sum(codec->SummedLength(n, ctx), 0.0f), reference(n, 0.0f);
  for (uint32_t w = 0; w < 4; ++w) {
    CodecContext wctx = ctx;
    wctx.node = w;
    const auto x = RandomNormal(n, 100 + w);
    auto enc = EncodeToVector(*codec, x, wctx);
    ASSERT_TRUE(enc.ok());
    ASSERT_TRUE(codec->AddEncodedValues(*enc, wctx, n, absl::MakeSpan(sum)).ok());
    ASSERT_TRUE(codec->DecodeAdd(*enc, wctx, absl::MakeSpan(reference)).ok());
  }
  std::vector<float> expanded(n);
  ASSERT_TRUE(codec->ExpandSum(sum, ctx, absl::MakeSpan(expanded)).ok());
  EXPECT_EQ(expanded, reference);
}

TEST(SparseCodecsTest, DecodeAddIsASparseAdd) {
  for (const char* name : {"topk", "threshold", "dgc", "adaq", "randomk"}) {
    auto codec = MustCreate(name);
    const auto x = RandomNormal(3000, 6);
    auto enc = EncodeToVector(*codec, x, TestContext());
    ASSERT_TRUE(enc.ok());
    auto dec = DecodeToVector(*codec, *enc, TestContext(), x.size());
    ASSERT_TRUE(dec.ok());
    std::vector<float> acc = RandomNormal(3000, 7), expected = acc;
    for (size_t i = 0; i < acc.size(); ++i) expected[i] += (*dec)[i];
    ASSERT_TRUE(codec->DecodeAdd(*enc, TestContext(), absl::MakeSpan(acc)).ok());
    EXPECT_EQ(acc, expected) << name;
  }
}

// Bit-packed deltas of every width up to 9, over more than one 2048-index block (widths 1-8
// are packed as 16-bit codes in blocks, 9 bit by bit): the section is the LSB-first stream of
// the deltas, and the message decodes to the kept elements.
TEST(SparseCodecsTest, BitPackedDeltasOfEveryWidthAcrossBlocks) {
  auto codec = MustCreate("threshold", {{"threshold", "0.5"}});
  int refusals = 0;
  for (uint32_t width = 1; width <= 9; ++width) {
    std::vector<float> x(5000u << width, 0.0f);
    std::vector<uint32_t> kept;
    uint32_t seed = 12345u + width;
    for (size_t i = 0; i < x.size();) {
      x[i] = (seed & 1u) ? -1.0f : 1.0f;
      kept.push_back(static_cast<uint32_t>(i));
      seed = seed * 1664525u + 1013904223u;
      i += 1 + (seed >> 8) % (1u << width);  // deltas 0 .. 2^width - 1
    }
    x.resize(kept.back() + 1);  // ends at the last kept element: a larger last delta is past it
    auto enc = EncodeToVector(*codec, x, TestContext());
    ASSERT_TRUE(enc.ok());
    ASSERT_EQ((*enc)[1], 1) << "width " << width;  // bit-packed
    ASSERT_EQ((*enc)[2], width);
    const size_t section = 16 + 4 * kept.size();
    std::vector<uint8_t> stream((kept.size() * width + 7) / 8, 0);
    for (size_t j = 0; j < kept.size(); ++j) {
      const uint32_t delta = kept[j] - (j == 0 ? 0u : kept[j - 1] + 1u);
      for (uint32_t b = 0; b < width; ++b) {
        if ((delta >> b) & 1u) {
          stream[(j * width + b) / 8] |= static_cast<uint8_t>(1u << ((j * width + b) % 8));
        }
      }
    }
    ASSERT_EQ(enc->size(), section + stream.size()) << "width " << width;
    EXPECT_TRUE(std::equal(stream.begin(), stream.end(), enc->begin() + section))
        << "width " << width;
    auto dec = DecodeToVector(*codec, *enc, TestContext(), x.size());
    ASSERT_TRUE(dec.ok()) << dec.status();
    EXPECT_EQ(*dec, x) << "width " << width;
    // The last delta at its largest: an index past the end, named as the format reader does.
    std::vector<uint8_t> bad = *enc;
    const size_t last_bit = (kept.size() - 1) * width;
    for (uint32_t b = 0; b < width; ++b) {
      bad[section + (last_bit + b) / 8] |= static_cast<uint8_t>(1u << ((last_bit + b) % 8));
    }
    const uint32_t last = kept[kept.size() - 2] + 1 + ((1u << width) - 1);
    auto refused = DecodeToVector(*codec, bad, TestContext(), x.size());
    if (last >= x.size()) {  // (the last delta was not already the largest)
      ++refusals;
      ASSERT_FALSE(refused.ok()) << "width " << width;
      EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                    absl::StrCat("index ", last, " >= ", x.size())))
          << refused.status();
    }
  }
  EXPECT_GE(refusals, 5);
}

// threshold's message for x, built from the format's text alone: header, the kept values, the
// smallest index section (ties to the earlier encoding).
std::vector<uint8_t> ReferenceThresholdMessage(const std::vector<float>& x, float threshold) {
  std::vector<uint32_t> idx;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::fabs(x[i]) > threshold) idx.push_back(static_cast<uint32_t>(i));
  }
  std::vector<uint32_t> deltas;
  uint32_t max_delta = 0;
  for (size_t j = 0; j < idx.size(); ++j) {
    deltas.push_back(idx[j] - (j == 0 ? 0u : idx[j - 1] + 1u));
    max_delta = std::max(max_delta, deltas.back());
  }
  const uint32_t width = max_delta == 0 ? 0 : 32 - __builtin_clz(max_delta);
  std::vector<uint8_t> raw(4 * idx.size()), packed((idx.size() * width + 7) / 8, 0), varint;
  if (!idx.empty()) std::memcpy(raw.data(), idx.data(), raw.size());
  for (size_t j = 0; j < deltas.size(); ++j) {
    for (uint32_t b = 0; b < width; ++b) {
      const size_t bit = j * width + b;
      if ((deltas[j] >> b) & 1u) packed[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
    }
    uint32_t d = deltas[j];
    for (; d >= 0x80; d >>= 7) varint.push_back(static_cast<uint8_t>(d | 0x80));
    varint.push_back(static_cast<uint8_t>(d));
  }
  uint8_t encoding = 0;
  const std::vector<uint8_t>* section = &raw;
  if (!idx.empty() && packed.size() < section->size()) encoding = 1, section = &packed;
  if (!idx.empty() && varint.size() < section->size()) encoding = 2, section = &varint;
  std::vector<uint8_t> m(16);
  m[0] = 1;
  m[1] = encoding;
  m[2] = encoding == 1 ? static_cast<uint8_t>(width) : 0;
  const uint32_t header[3] = {static_cast<uint32_t>(x.size()), static_cast<uint32_t>(idx.size()),
                              static_cast<uint32_t>(section->size())};
  std::memcpy(m.data() + 4, header, 12);
  for (uint32_t i : idx) {
    uint8_t v[4];
    std::memcpy(v, &x[i], 4);
    m.insert(m.end(), v, v + 4);
  }
  m.insert(m.end(), section->begin(), section->end());
  return m;
}

// threshold's encode keeps the index deltas as bytes while they fit one (the AVX-512 path) and
// goes on with the indices from the first 16 elements that hold a larger one: the same bytes
// as the format says, wherever that happens (never, in the first, a middle or the last, partial
// step), and at every SIMD level.
TEST(ThresholdTest, MessageBytesMatchTheFormatWhereverADeltaOutgrowsAByte) {
  auto codec = MustCreate("threshold", {{"threshold", "0.5"}});
  for (size_t n : {size_t{17}, size_t{40}, size_t{1000}, size_t{4099}, size_t{70001}}) {
    for (size_t gap_at : {size_t{0}, size_t{5}, n / 2, n - 3, n}) {  // n: no large gap
      for (size_t gap : {size_t{255}, size_t{256}, size_t{300}, size_t{5000}}) {
        std::vector<float> x = RandomNormal(n, static_cast<uint32_t>(n + gap_at + gap));
        for (size_t i = gap_at; i < std::min(n, gap_at + gap); ++i) x[i] *= 0.1f;  // dropped
        for (size_t i = 0; i < n; i += 97) x[i] = 0.0f;                            // zeros too
        auto enc = EncodeToVector(*codec, x, TestContext());
        ASSERT_TRUE(enc.ok()) << enc.status();
        const std::string what = absl::StrCat("n=", n, " gap at ", gap_at, " of ", gap);
        ASSERT_EQ(*enc, ReferenceThresholdMessage(x, 0.5f)) << what;
        auto dec = DecodeToVector(*codec, *enc, TestContext(), n);
        ASSERT_TRUE(dec.ok()) << dec.status();
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ((*dec)[i], std::fabs(x[i]) > 0.5f ? x[i] : 0.0f) << what << " at " << i;
        }
      }
    }
  }
  // Every element kept (width 0) and a threshold no finite value passes.
  const std::vector<float> ones(100, 1.0f);
  EXPECT_EQ(*EncodeToVector(*codec, ones, TestContext()), ReferenceThresholdMessage(ones, 0.5f));
  const std::vector<float> small(100, 0.25f);
  EXPECT_EQ(*EncodeToVector(*codec, small, TestContext()), ReferenceThresholdMessage(small, 0.5f));
}

// The decode writes the dense output front to back in cache-line windows: every element and
// none past the output, wherever the output starts in a cache line and ends in a window.
TEST(SparseCodecsTest, DecodeWritesExactlyTheOutputAtAnyAlignment) {
  auto codec = MustCreate("threshold", {{"threshold", "0.5"}});
  for (size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{2047}, size_t{2048},
                   size_t{2049}, size_t{4113}, size_t{20000}}) {
    std::vector<float> x = RandomNormal(n, static_cast<uint32_t>(n));
    if (n > 9000) std::fill(x.begin() + 3000, x.begin() + 9000, 0.0f);  // empty windows
    auto enc = EncodeToVector(*codec, x, TestContext());
    ASSERT_TRUE(enc.ok()) << enc.status();
    alignas(64) static float buffer[20000 + 64];
    for (size_t at = 0; at <= 16; ++at) {
      std::fill(std::begin(buffer), std::end(buffer), 7.0f);
      ASSERT_TRUE(codec->Decode(*enc, TestContext(), absl::MakeSpan(buffer + at, n)).ok());
      for (size_t i = 0; i < n + 32; ++i) {
        const float want = i < at || i >= at + n         ? 7.0f
                           : std::fabs(x[i - at]) > 0.5f ? x[i - at]
                                                         : 0.0f;
        ASSERT_EQ(buffer[i], want) << "n=" << n << " at " << at << " element " << i;
      }
    }
  }
}

// Dense messages (one element in 8 or more kept) of byte deltas: every element and none past
// the output at any alignment, with kept elements at a 16-float block's last lane, runs across
// the 256-element chunks and the windows, gaps of 256 (16 elements over more than 256 lanes),
// long empty stretches, and the last kept element at the tensor's last index or before it. An
// index past the end and a NaN are refused as the format reader refuses them.
TEST(SparseCodecsTest, DenseByteDeltaDecodeAtEveryPatternAndAlignment) {
  auto codec = MustCreate("threshold", {{"threshold", "0.5"}});
  struct Pattern {
    const char* what;
    std::vector<uint32_t> kept;
    size_t n;
  };
  std::vector<Pattern> patterns;
  auto add = [&](const char* what, size_t n, auto keep) {
    Pattern p{what, {}, n};
    for (uint32_t i = 0; i < n; ++i) {
      if (keep(i)) p.kept.push_back(i);
    }
    patterns.push_back(std::move(p));
  };
  uint32_t seed = 99;
  auto coin = [&](uint32_t one_in) {
    seed = seed * 1664525u + 1013904223u;
    return (seed >> 8) % one_in == 0;
  };
  add("all", 1000, [](uint32_t) { return true; });
  add("every other", 4099, [](uint32_t i) { return i % 2 == 1; });
  add("last lanes", 6000, [](uint32_t i) { return i % 16 == 15 || i % 5 == 0; });
  add("dense to the last index", 3001, [&](uint32_t i) { return i == 3000 || coin(3); });
  add("dense, empty tail", 4000, [&](uint32_t i) { return i < 1200 && coin(2); });
  add("empty head", 5000, [&](uint32_t i) { return i > 250 && coin(2); });
  add("gaps of 256", 20000, [&](uint32_t i) {
    return i % 256 == 255 || ((i / 4096) % 2 == 0 && coin(2));  // dense, then 16 in 4096
  });
  add("gaps of 256 from 0", 9000,
      [&](uint32_t i) { return i < 4096 ? i % 256 == 0 : i % 256 == 0 || coin(2); });
  add("runs across chunks", 40000, [&](uint32_t i) { return (i / 200) % 3 != 2 && coin(2); });
  add("a run of 200 ones", 1700, [&](uint32_t i) { return (i >= 500 && i < 700) || coin(5); });
  add("one element", 5, [](uint32_t i) { return i == 4; });
  for (const Pattern& p : patterns) {
    std::vector<float> x(p.n, 0.25f);
    for (size_t j = 0; j < p.kept.size(); ++j) x[p.kept[j]] = 1.0f + static_cast<float>(j);
    auto enc = EncodeToVector(*codec, x, TestContext());
    ASSERT_TRUE(enc.ok()) << enc.status();
    ASSERT_EQ((*enc)[1], 1) << p.what;  // bit-packed
    ASSERT_LE((*enc)[2], 8) << p.what;
    ASSERT_GE(8 * p.kept.size(), p.n) << p.what;  // dense
    std::vector<float> buffer(p.n + 64);
    for (size_t at = 0; at <= 16; ++at) {
      std::fill(buffer.begin(), buffer.end(), 7.0f);
      float* out = buffer.data() + at + (16 - reinterpret_cast<uintptr_t>(buffer.data()) / 4 % 16);
      const size_t lead = static_cast<size_t>(out - buffer.data());
      ASSERT_TRUE(codec->Decode(*enc, TestContext(), absl::MakeSpan(out, p.n)).ok()) << p.what;
      for (size_t i = 0; i < buffer.size(); ++i) {
        const float want = i < lead || i >= lead + p.n ? 7.0f
                           : x[i - lead] > 0.5f        ? x[i - lead]
                                                       : 0.0f;
        ASSERT_EQ(buffer[i], want) << p.what << " at " << at << " element " << i;
      }
    }
    // The last delta at its largest, past the end, and a NaN: the same refusal as the format
    // reader's.
    std::vector<uint8_t> bad = *enc;
    const size_t section = 16 + 4 * p.kept.size();
    const uint32_t width = (*enc)[2];
    if (width > 0) {
      const size_t last_bit = (p.kept.size() - 1) * width;
      for (uint32_t b = 0; b < width; ++b) {
        bad[section + (last_bit + b) / 8] |= static_cast<uint8_t>(1u << ((last_bit + b) % 8));
      }
      const uint32_t last =
          (p.kept.size() >= 2 ? p.kept[p.kept.size() - 2] + 1 : 0) + ((1u << width) - 1);
      std::vector<float> out(p.n), acc(p.n);
      const absl::Status s = codec->Decode(bad, TestContext(), absl::MakeSpan(out));
      if (last >= p.n) {
        EXPECT_FALSE(s.ok()) << p.what;
        EXPECT_EQ(s, codec->DecodeAdd(bad, TestContext(), absl::MakeSpan(acc))) << p.what;
      }
    }
    bad = *enc;
    const float nan = NAN;
    std::memcpy(bad.data() + 16 + 4 * (p.kept.size() / 2), &nan, 4);
    std::vector<float> out(p.n), acc(p.n);
    const absl::Status s = codec->Decode(bad, TestContext(), absl::MakeSpan(out));
    EXPECT_FALSE(s.ok()) << p.what;
    EXPECT_EQ(s, codec->DecodeAdd(bad, TestContext(), absl::MakeSpan(acc))) << p.what;
  }
}

TEST(SparseCodecsTest, IndexEncodingsRoundTrip) {
  // Dense selection: bit-packed deltas of width 0 (no index bytes at all).
  auto all = MustCreate("threshold", {{"threshold", "0"}});
  const auto x = RandomNormal(1000, 3);
  auto enc = EncodeToVector(*all, x, TestContext());
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ((*enc)[1], 1);  // bit-packed
  EXPECT_EQ((*enc)[2], 0);  // width 0
  EXPECT_EQ(enc->size(), 16 + 4 * 1000u);
  // A few big gaps among many small ones: varint is smallest.
  std::vector<float> sparse_x(1 << 20, 0.0f);
  for (size_t i = 0; i < 200; ++i) sparse_x[i * 3] = 1.0f;
  sparse_x[1 << 19] = 1.0f;
  sparse_x[(1 << 20) - 1] = 1.0f;
  auto codec = MustCreate("threshold", {{"threshold", "0.5"}});
  enc = EncodeToVector(*codec, sparse_x, TestContext());
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ((*enc)[1], 2);  // varint
  auto dec = DecodeToVector(*codec, *enc, TestContext(), sparse_x.size());
  ASSERT_TRUE(dec.ok());
  EXPECT_EQ(*dec, sparse_x);
}

// A hand-made message in the common sparse format.
std::vector<uint8_t> SparseMessage(uint8_t encoding, uint8_t width, uint32_t n,
                                   const std::vector<float>& values,
                                   const std::vector<uint8_t>& index_section) {
  std::vector<uint8_t> m(16 + 4 * values.size());
  m[0] = 1;
  m[1] = encoding;
  m[2] = width;
  const uint32_t header[3] = {n, static_cast<uint32_t>(values.size()),
                              static_cast<uint32_t>(index_section.size())};
  std::memcpy(m.data() + 4, header, 12);
  if (!values.empty()) std::memcpy(m.data() + 16, values.data(), 4 * values.size());
  m.insert(m.end(), index_section.begin(), index_section.end());
  return m;
}

std::vector<uint8_t> RawIndices(const std::vector<uint32_t>& idx) {
  std::vector<uint8_t> b(4 * idx.size());
  std::memcpy(b.data(), idx.data(), b.size());
  return b;
}

TEST(SparseCodecsTest, MalformedMessagesAreRejected) {
  auto codec = MustCreate("threshold");
  std::vector<float> out(10);
  auto decode = [&](const std::vector<uint8_t>& m) {
    return codec->Decode(m, TestContext(), absl::MakeSpan(out));
  };
  // A valid raw message first, so that the rejections below are about one thing each.
  EXPECT_TRUE(decode(SparseMessage(0, 0, 10, {1, 2}, RawIndices({3, 7}))).ok());
  const std::vector<std::vector<uint8_t>> bad = {
      {},
      {1, 0, 0},
      SparseMessage(0, 0, 11, {1, 2}, RawIndices({3, 7})),            // wrong n
      SparseMessage(0, 0, 10, {1, 2}, RawIndices({3, 10})),           // index out of range
      SparseMessage(0, 0, 10, {1, 2}, RawIndices({7, 3})),            // not increasing
      SparseMessage(0, 0, 10, {1, 2}, RawIndices({3, 3})),            // duplicate
      SparseMessage(0, 0, 10, {1, NAN}, RawIndices({3, 7})),          // NaN value
      SparseMessage(0, 0, 10, {1, INFINITY}, RawIndices({3, 7})),     // Inf value
      SparseMessage(7, 0, 10, {1, 2}, RawIndices({3, 7})),            // unknown encoding
      SparseMessage(1, 33, 10, {1, 2}, {0, 0, 0, 0, 0, 0, 0, 0, 0}),  // width > 32
      SparseMessage(1, 4, 10, {1, 2}, {0x73, 0x00}),                  // bit-packed, one byte extra
      SparseMessage(1, 4, 10, {1, 2}, {0xf3}),           // bit-packed 3 then 3+1+15 >= 10
      SparseMessage(1, 4, 10, {1, NAN}, {0x23}),         // bit-packed, NaN value
      SparseMessage(1, 8, 10, {1, 2}, {9, 0}),           // bit-packed bytes, 9 then 10 >= 10
      SparseMessage(1, 4, 10, {1, 2, 3}, {0x00, 0x08}),  // 0, 1, then 1+1+8 >= 10
      SparseMessage(2, 0, 10, {1, 2}, {3, 3, 0}),        // varint, bytes left over
      SparseMessage(2, 0, 10, {1, 2}, {3}),              // varint ends early
      SparseMessage(2, 0, 10, {1, 2}, {0xff, 0xff, 0xff, 0xff, 0xff, 0x01}),  // varint too long
      SparseMessage(0, 0, 10, std::vector<float>(11, 1.0f),
                    RawIndices({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})),  // k > n
  };
  for (size_t c = 0; c < bad.size(); ++c) {
    auto s = decode(bad[c]);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "case " << c << ": " << s;
    std::vector<float> acc(10, 1.0f);
    EXPECT_FALSE(codec->DecodeAdd(bad[c], TestContext(), absl::MakeSpan(acc)).ok());
    EXPECT_EQ(acc, std::vector<float>(10, 1.0f)) << "case " << c << " touched the accumulator";
  }
  // Padding bits past the last delta are not checked (the format reader ignores them).
  EXPECT_TRUE(decode(SparseMessage(1, 4, 10, {1}, {0xf3})).ok());
  EXPECT_EQ(out[3], 1.0f);
  // A header claiming k = 4e9 must not allocate or read out of bounds.
  auto huge = SparseMessage(1, 0, 10, {}, {});
  const uint32_t big_k = 4000000000u;
  std::memcpy(huge.data() + 8, &big_k, 4);
  EXPECT_FALSE(decode(huge).ok());
  // topk insists on its k.
  auto topk = MustCreate("topk", {{"ratio", "0.3"}});
  EXPECT_FALSE(topk->Decode(SparseMessage(0, 0, 10, {1, 2}, RawIndices({3, 7})), TestContext(),
                            absl::MakeSpan(out))
                   .ok());
  EXPECT_TRUE(topk->Decode(SparseMessage(0, 0, 10, {1, 2, 3}, RawIndices({3, 7, 9})), TestContext(),
                           absl::MakeSpan(out))
                  .ok());
}

TEST(TopkTest, NonFiniteLargeInputIsAnErrorNamingTheIndex) {  // past the sampled bound
  auto codec = MustCreate("topk", {{"ratio", "0.01"}});
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    auto x = RandomNormal(size_t{1} << 20, 2);
    x[777777] = bad;
    auto enc = EncodeToVector(*codec, x, TestContext());
    ASSERT_FALSE(enc.ok());
    EXPECT_TRUE(absl::StrContains(enc.status().message(), "element 777777 of 1048576"))
        << enc.status();
  }
}

TEST(SparseCodecsTest, NonFiniteInputIsAnErrorNamingTheIndex) {
  for (const char* name : {"topk", "threshold", "dgc", "adaq", "randomk"}) {
    auto codec = MustCreate(name);
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      auto x = RandomNormal(500, 1);
      x[123] = bad;
      auto enc = EncodeToVector(*codec, x, TestContext());
      ASSERT_FALSE(enc.ok()) << name;
      EXPECT_TRUE(absl::StrContains(enc.status().message(), "element 123 of 500")) << enc.status();
    }
  }
}

}  // namespace
}  // namespace bytecomp::compress
