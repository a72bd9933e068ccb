// bytecomp-plan --calibrate's measurement, on small sizes to stay fast.
#include "bytecomp/planner/calibrate.h"

#include "bytecomp/planner/inputs.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace bytecomp::planner {
namespace {

CalibrationOptions Quick() {
  CalibrationOptions options;
  options.sizes = {1 << 10, 16 << 10, 64 << 10};
  options.seconds_per_point = 0.0005;
  options.working_set_bytes = 256 << 10;  // 4 to 256 slots
  return options;
}

TEST(CalibrateTest, MeasuresTemplateCodecsAndKeepsTheirSettings) {
  proto::CostTable tmpl;
  tmpl.add_codecs()->set_name("fp16");
  auto* topk = tmpl.add_codecs();
  topk->set_name("topk");
  (*topk->mutable_params())["ratio"] = "0.01";
  topk->set_memory("residual");
  auto* gpu = topk->add_costs();
  gpu->set_device(proto::DEVICE_GPU);
  gpu->add_encode()->set_bytes(1 << 20);
  gpu->mutable_encode(0)->set_us(30);
  gpu->add_decode()->set_bytes(1 << 20);
  gpu->mutable_decode(0)->set_us(5);
  tmpl.add_codecs()->set_name("nosuchcodec");

  auto table = CalibrateCpuCosts(tmpl, Quick());
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->codecs_size(), 2);
  EXPECT_NE(table->source().find("left out: nosuchcodec"), std::string::npos);

  const auto& fp16 = table->codecs(0);
  EXPECT_EQ(fp16.name(), "fp16");
  EXPECT_NEAR(fp16.ratio(), 0.5, 0.01);
  EXPECT_TRUE(fp16.summable());
  EXPECT_TRUE(fp16.reencodable());
  ASSERT_EQ(fp16.costs_size(), 1);
  EXPECT_EQ(fp16.costs(0).device(), proto::DEVICE_CPU);
  ASSERT_EQ(fp16.costs(0).encode_size(), 3);
  for (const auto& point : fp16.costs(0).encode()) EXPECT_GT(point.us(), 0);
  // The server's side: a cost per push and per round at every size.
  EXPECT_EQ(fp16.costs(0).aggregate_size(), 3);
  EXPECT_EQ(fp16.costs(0).aggregate_base_size(), 3);
  EXPECT_GT(table->sum_gbytes_per_s(), 0);
  EXPECT_GT(table->copy_gbytes_per_s(), 0);

  const auto& measured_topk = table->codecs(1);
  EXPECT_EQ(measured_topk.params().at("ratio"), "0.01");
  EXPECT_EQ(measured_topk.memory(), "residual");
  EXPECT_GT(measured_topk.ratio(), 0.005);
  EXPECT_LT(measured_topk.ratio(), 0.03);
  ASSERT_EQ(measured_topk.costs_size(), 2);  // CPU measured, GPU copied
  EXPECT_EQ(measured_topk.costs(1).device(), proto::DEVICE_GPU);
  EXPECT_EQ(measured_topk.costs(1).encode(0).us(), 30);

  // The written table is a valid cost table.
  std::string text;
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(*table, &text));
  proto::CostTable parsed;
  EXPECT_TRUE(ParseCostTable(text, "calibrated.pbtxt", &parsed).ok());
}

TEST(CalibrateTest, TwoRoundCodecsAreTimedPerStepAndMemoriesAreUsed) {
  proto::CostTable tmpl;
  tmpl.add_codecs()->set_name("powersgd");
  tmpl.mutable_codecs(0)->set_memory("powersgd");
  auto* topk = tmpl.add_codecs();
  topk->set_name("topk");
  topk->set_memory("residual");
  auto table = CalibrateCpuCosts(tmpl, Quick());
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->codecs_size(), 2);
  const proto::CodecCost& powersgd = table->codecs(0);
  EXPECT_TRUE(powersgd.two_round());
  EXPECT_FALSE(powersgd.reencodable());
  EXPECT_EQ(powersgd.loss(), proto::LOSS_COMPENSATED);
  EXPECT_EQ(powersgd.costs(0).aggregate_size(), 0);
  EXPECT_EQ(powersgd.costs(0).between_rounds_size(), 3);
  EXPECT_GT(powersgd.costs(0).between_rounds(2).us(), 0);
  // Rank 1 (its default) on 64 KiB = 16384 floats, a 128 x 128 matrix: P and Q of 128
  // floats each, each payload after a u32 stage word. Not linear in the input: the sizes
  // are kept point by point.
  ASSERT_EQ(powersgd.sizes_size(), 3);
  EXPECT_EQ(powersgd.sizes(2).bytes(), 64 << 10);
  EXPECT_EQ(powersgd.sizes(2).encoded_bytes(), 2 * (4 + 4 * 128));
  EXPECT_EQ(table->codecs(1).costs(0).aggregate_size(), 3);
  EXPECT_FALSE(table->codecs(1).two_round());
  EXPECT_EQ(table->codecs(1).sizes_size(), 3);
  // An unknown memory is an error naming the codec.
  tmpl.mutable_codecs(1)->set_memory("nosuchmemory");
  auto bad = CalibrateCpuCosts(tmpl, Quick());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("topk"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("nosuchmemory"), std::string::npos) << bad.status();
}

TEST(CalibrateTest, SparseCodecsGetTheirExchangeKeptFractionAndUnionPull) {
  proto::CostTable tmpl;
  for (const char* name : {"topk", "artopk"}) {
    auto* c = tmpl.add_codecs();
    c->set_name(name);
    (*c->mutable_params())["ratio"] = "0.01";
    c->set_memory("residual");
  }
  tmpl.add_codecs()->set_name("fp16");
  auto table = CalibrateCpuCosts(tmpl, Quick());
  ASSERT_TRUE(table.ok()) << table.status();
  const auto& topk = table->codecs(0);
  EXPECT_EQ(topk.exchange(), proto::EXCHANGE_PUSH_PULL);
  EXPECT_DOUBLE_EQ(topk.kept_fraction(), 0.01);
  EXPECT_TRUE(topk.union_pull());
  const auto& artopk = table->codecs(1);
  EXPECT_EQ(artopk.exchange(), proto::EXCHANGE_SUMMED_INDICES);
  EXPECT_DOUBLE_EQ(artopk.kept_fraction(), 0.01);
  EXPECT_FALSE(artopk.union_pull());
  EXPECT_FALSE(artopk.reencodable());
  // Its single payload is topk's message: values and an index section beyond the values.
  EXPECT_GT(artopk.ratio(), artopk.kept_fraction());
  EXPECT_LT(artopk.ratio(), 0.03);
  EXPECT_EQ(artopk.costs(0).aggregate_size(), 0);
  EXPECT_EQ(table->codecs(2).kept_fraction(), 0);
  EXPECT_FALSE(table->codecs(2).union_pull());
  // The table loads: artopk's kept fraction is within its ratio.
  std::string text;
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(*table, &text));
  proto::CostTable parsed;
  EXPECT_TRUE(ParseCostTable(text, "calibrated.pbtxt", &parsed).ok());
}

// blocksparse's exchange, artopk's and the loss classes come from the codecs' facts.
TEST(CalibrateTest, ExchangeAndLossComeFromTheCodecsFacts) {
  proto::CostTable tmpl;
  tmpl.add_codecs()->set_name("blocksparse");
  auto* lossy_blocks = tmpl.add_codecs();
  lossy_blocks->set_name("blocksparse");
  (*lossy_blocks->mutable_params())["threshold"] = "0.5";
  lossy_blocks->set_memory("residual");
  auto* randomk = tmpl.add_codecs();
  randomk->set_name("randomk");
  (*randomk->mutable_params())["ratio"] = "0.01";
  randomk->set_memory("residual");
  tmpl.add_codecs()->set_name("bf16");
  auto* artopk = tmpl.add_codecs();
  artopk->set_name("artopk");
  artopk->set_memory("residual");
  auto table = CalibrateCpuCosts(tmpl, Quick());
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->codecs_size(), 5);
  for (int i : {0, 1}) {
    EXPECT_EQ(table->codecs(i).exchange(), proto::EXCHANGE_BLOCK_SPARSE) << i;
    EXPECT_EQ(table->codecs(i).kept_fraction(), 0) << i;  // no ratio: sized by block density
    EXPECT_FALSE(table->codecs(i).union_pull()) << i;
    EXPECT_FALSE(table->codecs(i).two_round()) << i;
  }
  EXPECT_EQ(table->codecs(0).loss(), proto::LOSS_NONE);
  EXPECT_EQ(table->codecs(1).loss(), proto::LOSS_COMPENSATED);
  EXPECT_EQ(table->codecs(2).exchange(), proto::EXCHANGE_PUSH_PULL);
  EXPECT_DOUBLE_EQ(table->codecs(2).kept_fraction(), 0.01);
  EXPECT_TRUE(table->codecs(2).union_pull());
  EXPECT_TRUE(table->codecs(2).summable());
  EXPECT_EQ(table->codecs(2).loss(), proto::LOSS_HIGH);
  EXPECT_EQ(table->codecs(3).exchange(), proto::EXCHANGE_PUSH_PULL);
  EXPECT_EQ(table->codecs(3).loss(), proto::LOSS_ROUNDING);
  EXPECT_EQ(table->codecs(3).kept_fraction(), 0);
  // artopk at its default ratio (0.3): summed indices, not a second round trip of the sum.
  EXPECT_EQ(table->codecs(4).exchange(), proto::EXCHANGE_SUMMED_INDICES);
  EXPECT_DOUBLE_EQ(table->codecs(4).kept_fraction(), 0.3);
  EXPECT_FALSE(table->codecs(4).two_round());
  EXPECT_EQ(table->codecs(4).loss(), proto::LOSS_COMPENSATED);
}

TEST(CalibrateTest, GpuCostsAreMeasuredWhereADeviceExistsAndUntouchedElsewhere) {
  proto::CostTable tmpl;
  tmpl.add_codecs()->set_name("fp16");
  auto table = CalibrateCpuCosts(tmpl, Quick());
  ASSERT_TRUE(table.ok()) << table.status();
  const std::string before = table->SerializeAsString();
  absl::StatusOr<int> gpu = CalibrateGpuCosts(&*table, Quick());
  if (gpu.ok()) {  // a CUDA build on a machine with a GPU
    EXPECT_EQ(*gpu, 1);
    ASSERT_EQ(table->codecs(0).costs_size(), 2);
    EXPECT_EQ(table->codecs(0).costs(1).device(), proto::DEVICE_GPU);
    EXPECT_EQ(table->codecs(0).costs(1).encode_size(), 3);
  } else {  // here: no device, or no CUDA in the build
    EXPECT_TRUE(absl::IsUnavailable(gpu.status())) << gpu.status();
    EXPECT_EQ(table->SerializeAsString(), before);
  }
}

TEST(CalibrateTest, BadParameterIsAnErrorNamingTheCodec) {
  proto::CostTable tmpl;
  auto* topk = tmpl.add_codecs();
  topk->set_name("topk");
  (*topk->mutable_params())["ratio"] = "7";
  auto table = CalibrateCpuCosts(tmpl, Quick());
  ASSERT_FALSE(table.ok());
  EXPECT_NE(table.status().message().find("topk"), std::string::npos) << table.status();
}

TEST(CalibrateTest, EmptyTemplateMeasuresEveryRegisteredCodec) {
  auto table = CalibrateCpuCosts(proto::CostTable(), Quick());
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_GE(table->codecs_size(), 2);
  for (const auto& codec : table->codecs()) EXPECT_NE(codec.name(), "none");
}

}  // namespace
}  // namespace bytecomp::planner
