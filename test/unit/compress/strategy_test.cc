#include "bytecomp/compress/strategy.h"

#include <gtest/gtest.h>

namespace bytecomp::compress {
namespace {

bool Has(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

TEST(StrategyFileTest, ParsesAndFillsTheDefaultThreshold) {
  absl::StatusOr<proto::Strategy> s = ParseStrategy(
      "seed: 3\ntensors { name_pattern: \"fc.*\" push_codec { name: \"topk\" params { key: "
      "\"ratio\" value: \"0.01\" } memory: \"residual\" } }\n",
      "s.pbtxt");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->min_compress_bytes(), kDefaultMinCompressBytes);
  EXPECT_EQ(s->tensors(0).push_codec().params().at("ratio"), "0.01");
}

TEST(StrategyFileTest, UnknownCodecNamesLineFieldAndValidCodecs) {
  absl::StatusOr<proto::Strategy> s = ParseStrategy(
      "seed: 1\ntensors {\n  name_pattern: \"*\"\n  push_codec { name: \"topkk\" }\n}\n",
      "s.pbtxt");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.status(), "s.pbtxt:4:")) << s.status();
  EXPECT_TRUE(Has(s.status(), "tensors[0].push_codec")) << s.status();
  EXPECT_TRUE(Has(s.status(), "topkk")) << s.status();
  EXPECT_TRUE(Has(s.status(), "qsgd")) << s.status();  // the valid names are listed
}

TEST(StrategyFileTest, ASchemeTakesTheCodecsItCanCarry) {
  auto parse = [](const std::string& entry) {
    return ParseStrategy("tensors {\n  name_pattern: \"fc\"\n" + entry + "}\n", "s.pbtxt");
  };
  // Allreduce: none, codecs whose encoded values sum, two-round factors.
  for (const char* codec : {"none", "fp16", "bf16", "randomk", "powersgd"}) {
    absl::StatusOr<proto::Strategy> s = parse(std::string("  push_codec { name: \"") + codec +
                                              "\" }\n  scheme: SCHEME_ALLREDUCE\n");
    EXPECT_TRUE(s.ok()) << codec << ": " << s.status();
  }
  for (const char* codec : {"topk", "signsgd", "artopk", "qsgd"}) {
    absl::StatusOr<proto::Strategy> s = parse(std::string("  push_codec { name: \"") + codec +
                                              "\" }\n  scheme: SCHEME_ALLREDUCE\n");
    ASSERT_FALSE(s.ok()) << codec;
    EXPECT_TRUE(Has(s.status(), "s.pbtxt:3:")) << s.status();
    EXPECT_TRUE(Has(s.status(), "tensors[0].scheme SCHEME_ALLREDUCE")) << s.status();
    EXPECT_TRUE(Has(s.status(), "does not sum element-wise")) << s.status();
  }
  // Allgather: any one-round push-pull codec; not two-round ones.
  EXPECT_TRUE(parse("  push_codec { name: \"topk\" }\n  scheme: SCHEME_ALLGATHER\n").ok());
  EXPECT_TRUE(parse("  push_codec { name: \"signsgd\" }\n  scheme: SCHEME_ALLGATHER\n").ok());
  absl::StatusOr<proto::Strategy> two =
      parse("  push_codec { name: \"powersgd\" }\n  scheme: SCHEME_ALLGATHER\n");
  ASSERT_FALSE(two.ok());
  EXPECT_TRUE(Has(two.status(), "more than one payload per round")) << two.status();
  // A collective is one-way and flat.
  absl::StatusOr<proto::Strategy> two_way = parse(
      "  push_codec { name: \"fp16\" }\n  pull_codec { name: \"fp16\" }\n  scheme: "
      "SCHEME_ALLREDUCE\n");
  ASSERT_FALSE(two_way.ok());
  EXPECT_TRUE(Has(two_way.status(), "one-way")) << two_way.status();
  absl::StatusOr<proto::Strategy> hier =
      parse("  hierarchical: true\n  scheme: SCHEME_ALLREDUCE\n");
  ASSERT_FALSE(hier.ok());
  EXPECT_TRUE(Has(hier.status(), "not hierarchical")) << hier.status();
  // The plan carries the scheme, also for a tensor too small to compress.
  absl::StatusOr<proto::Strategy> s =
      parse("  push_codec { name: \"fp16\" }\n  scheme: SCHEME_ALLREDUCE\n");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(PlanFor(*s, "fc", 1 << 20).scheme, proto::SCHEME_ALLREDUCE);
  const TensorPlan small = PlanFor(*s, "fc", 16);
  EXPECT_EQ(small.scheme, proto::SCHEME_ALLREDUCE);
  EXPECT_FALSE(small.compressed());
  EXPECT_EQ(PlanFor(*s, "other", 1 << 20).scheme, proto::SCHEME_PS);
}

TEST(StrategyFileTest, BadParameterNamesLineAndParameter) {
  absl::StatusOr<proto::Strategy> s = ParseStrategy(
      "tensors { name_pattern: \"a\" }\ntensors {\n  name_pattern: \"b\"\n  pull_codec { name: "
      "\"fp16\" }\n  push_codec {\n    name: \"topk\"\n    params { key: \"ratio\" value: \"7\" }\n"
      "  }\n}\n",
      "p.pbtxt");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.status(), "p.pbtxt:7:")) << s.status();
  EXPECT_TRUE(Has(s.status(), "tensors[1].push_codec")) << s.status();
  EXPECT_TRUE(Has(s.status(), "ratio")) << s.status();
}

TEST(StrategyFileTest, SyntaxErrorAndUnknownFieldNameTheLine) {
  absl::StatusOr<proto::Strategy> s =
      ParseStrategy("seed: 1\ntensors {\n  name_patern: \"x\"\n}\n", "f.pbtxt");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.status(), "f.pbtxt:3:")) << s.status();
  EXPECT_TRUE(Has(s.status(), "name_patern")) << s.status();
  s = ParseStrategy("seed: 1\ntensors { name_pattern: \"x\"\n", "g.pbtxt");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.status(), "g.pbtxt:")) << s.status();
}

TEST(StrategyFileTest, TwoWayNeedsAPushCodecAndMemoryNeedsACodec) {
  EXPECT_FALSE(
      ParseStrategy("tensors { name_pattern: \"x\" pull_codec { name: \"fp16\" } }", "a").ok());
  absl::StatusOr<proto::Strategy> s =
      ParseStrategy("tensors { name_pattern: \"x\" push_codec { memory: \"residual\" } }", "b");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.status(), "memory")) << s.status();
  EXPECT_FALSE(
      ParseStrategy(
          "tensors { name_pattern: \"x\" push_codec { name: \"topk\" memory: \"resid\" } }", "c")
          .ok());
}

TEST(StrategyFileTest, FusionGroupsAreNamedDisjointAndOnTheServers) {
  auto parse = [](const std::string& text) { return ParseStrategy(text, "f.pbtxt"); };
  EXPECT_TRUE(parse("fusion_groups { name: \"g\" tensors: \"a\" tensors: \"b\" }\n"
                    "fusion_groups { name: \"h\" tensors: \"c\" }\n")
                  .ok());
  absl::StatusOr<proto::Strategy> twice = parse(
      "fusion_groups { name: \"g\" tensors: \"a\" }\n"
      "fusion_groups { name: \"h\" tensors: \"b\" tensors: \"a\" }\n");
  ASSERT_FALSE(twice.ok());
  EXPECT_TRUE(
      Has(twice.status(), "fusion_groups[1].tensors[1]: 'a' is also fusion_groups[0].tensors[0]"))
      << twice.status();
  absl::StatusOr<proto::Strategy> member_as_group =
      parse("fusion_groups { name: \"a\" tensors: \"a\" }\n");
  ASSERT_FALSE(member_as_group.ok());
  EXPECT_TRUE(Has(member_as_group.status(), "is also fusion_groups[0].name"))
      << member_as_group.status();
  absl::StatusOr<proto::Strategy> empty = parse("fusion_groups { name: \"g\" }\n");
  ASSERT_FALSE(empty.ok());
  EXPECT_TRUE(Has(empty.status(), "fusion_groups[0] ('g'): no tensors")) << empty.status();
  absl::StatusOr<proto::Strategy> collective = parse(
      "tensors { name_pattern: \"g\" scheme: SCHEME_ALLREDUCE }\n"
      "fusion_groups { name: \"g\" tensors: \"a\" }\n");
  ASSERT_FALSE(collective.ok());
  EXPECT_TRUE(Has(collective.status(), "travels over the parameter servers"))
      << collective.status();
}

TEST(StrategyFileTest, AdaptiveRatioIsCheckedAgainstTheCodecsRatio) {
  auto parse = [](const std::string& codec, const std::string& adaptive) {
    return ParseStrategy("tensors {\n  name_pattern: \"x\"\n  push_codec { " + codec +
                             " }\n  adaptive_ratio { " + adaptive + " }\n}\n",
                         "a.pbtxt");
  };
  const std::string artopk = "name: \"artopk\" params { key: \"ratio\" value: \"0.01\" }";
  auto good = parse(artopk, "min_ratio: 0.001 max_ratio: 0.1 window_rounds: 7");
  ASSERT_TRUE(good.ok()) << good.status();
  const TensorPlan plan = PlanFor(*good, "x", 1 << 20);
  EXPECT_EQ(plan.ratio_window_rounds, 7u);
  EXPECT_EQ(
      PlanFor(*parse(artopk, "min_ratio: 0.001 max_ratio: 0.1"), "x", 1 << 20).ratio_window_rounds,
      20u);  // the default window
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"min_ratio: 0.02 max_ratio: 0.1", "the push codec's ratio 0.01 is outside [0.02, 0.1]"},
      {"min_ratio: 0.001 max_ratio: 2", "0 < min_ratio <= max_ratio <= 1"},
      {"min_ratio: 0.001 max_ratio: 0.1 step: 0.5", "step must be > 1"},
      {"min_ratio: 0.001 max_ratio: 0.1 raise_below_kept: 0.9",
       "raise_below_kept <= lower_above_kept"},
  };
  for (const auto& [adaptive, text] : bad) {
    auto s = parse(artopk, adaptive);
    ASSERT_FALSE(s.ok()) << adaptive;
    EXPECT_NE(s.status().message().find("a.pbtxt:3:"), std::string::npos) << s.status();
    EXPECT_NE(s.status().message().find("tensors[0].adaptive_ratio: "), std::string::npos)
        << s.status();
    EXPECT_NE(s.status().message().find(text), std::string::npos) << s.status();
  }
  auto no_ratio = parse("name: \"fp16\"", "min_ratio: 0.1 max_ratio: 0.5");
  ASSERT_FALSE(no_ratio.ok());
  EXPECT_NE(no_ratio.status().message().find("has no ratio parameter to adapt"), std::string::npos)
      << no_ratio.status();
  // topk's default ratio (0.3) counts when the entry leaves it out.
  EXPECT_TRUE(parse("name: \"topk\"", "min_ratio: 0.1 max_ratio: 0.5").ok());
}

TEST(StrategyPlanTest, FirstMatchWinsAndSmallTensorsStayRaw) {
  absl::StatusOr<proto::Strategy> s = ParseStrategy(
      "tensors { name_pattern: \"bias?\" }\n"
      "tensors { name_pattern: \"*\" push_codec { name: \"fp16\" } pull_codec { name: \"fp16\" } "
      "}\n"
      "tensors { name_pattern: \"tiny\" push_codec { name: \"fp16\" } force: true }\n",
      "s");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(PlanFor(*s, "bias1", 1 << 20).compressed());
  EXPECT_TRUE(PlanFor(*s, "w", 1 << 20).two_way());
  EXPECT_FALSE(PlanFor(*s, "w", 1000).compressed());    // under 64 KiB
  EXPECT_FALSE(PlanFor(*s, "tiny", 100).compressed());  // "*" matched first, not forced
  EXPECT_TRUE(GlobMatch("layer*.w?ight", "layer12.weight"));
  EXPECT_FALSE(GlobMatch("layer*.w?ight", "layer12.weights"));
}

TEST(StrategyTest, TwoWayPullsGetThePushMemoryUnlessTheyNameTheirOwn) {
  auto s = ParseStrategy(
      "tensors { name_pattern: \"a\" push_codec { name: \"topk\" memory: \"residual\" }\n"
      "          pull_codec { name: \"topk\" } }\n"
      "tensors { name_pattern: \"b\" push_codec { name: \"topk\" memory: \"residual\" }\n"
      "          pull_codec { name: \"topk\" memory: \"none\" } }\n"
      "tensors { name_pattern: \"c\" push_codec { name: \"topk\" memory: \"residual\" }\n"
      "          pull_codec { name: \"fp16\" } }\n"
      "tensors { name_pattern: \"d\" push_codec { name: \"topk\" memory: \"residual\" } }\n",
      "s");
  ASSERT_TRUE(s.ok()) << s.status();
  // The default: the server's re-encode has error feedback, as the workers' encode does.
  EXPECT_EQ(PlanFor(*s, "a", 1 << 20).pull.memory(), "residual");
  EXPECT_EQ(PlanFor(*s, "a", 1 << 20).push.memory(), "residual");
  EXPECT_EQ(PlanFor(*s, "b", 1 << 20).pull.memory(), "none");  // overridden
  EXPECT_EQ(PlanFor(*s, "c", 1 << 20).pull.memory(), "");      // another codec: as written
  EXPECT_FALSE(PlanFor(*s, "d", 1 << 20).two_way());
  EXPECT_EQ(PlanFor(*s, "d", 1 << 20).pull.memory(), "");  // one-way: no pull codec
}

TEST(StrategyTest, MatrixCodecsGetTheLayersRowLength) {
  auto s = ParseStrategy(
      "tensors { name_pattern: \"conv*\" push_codec { name: \"powersgd\" memory: "
      "\"powersgd\" } }\n"
      "tensors { name_pattern: \"fixed\" push_codec { name: \"powersgd\" params { key: "
      "\"cols\" value: \"7\" } } }\n"
      "tensors { name_pattern: \"*\" push_codec { name: \"topk\" } }\n",
      "s");
  ASSERT_TRUE(s.ok()) << s.status();
  // A shaped tensor (row_elements from its declaration): powersgd reads its rows.
  EXPECT_EQ(PlanFor(*s, "conv1", 1 << 20, 576).push.params().at("cols"), "576");
  EXPECT_FALSE(PlanFor(*s, "conv1", 1 << 20).push.params().count("cols") > 0);   // flat
  EXPECT_EQ(PlanFor(*s, "fixed", 1 << 20, 576).push.params().at("cols"), "7");   // as written
  EXPECT_FALSE(PlanFor(*s, "w", 1 << 20, 576).push.params().count("cols") > 0);  // topk: none
}

TEST(StrategyHistoryTest, RoundsMapToTheirVersion) {
  StrategyHistory h;
  proto::Strategy v1, v2, v0;
  v1.set_version(1);
  v2.set_version(2);
  v2.set_first_round(10);
  ASSERT_TRUE(h.Add(v1).ok());
  ASSERT_TRUE(h.Add(v2).ok());
  EXPECT_EQ(h.ForRound(9)->version(), 1u);
  EXPECT_EQ(h.ForRound(10)->version(), 2u);
  v0.set_version(2);
  EXPECT_FALSE(h.Add(v0).ok());  // versions only increase
}

}  // namespace
}  // namespace bytecomp::compress
