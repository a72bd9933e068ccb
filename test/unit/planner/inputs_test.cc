// Loading planner inputs: shipped files load; bad files name file:line:field.
#include "bytecomp/planner/inputs.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner_test_util.h"

namespace bytecomp::planner {
namespace {

using ::testing::HasSubstr;

using testing::kPlannerDir;

TEST(InputsTest, ShippedProfilesLoadWithTheArchitecturesTensorCounts) {
  const std::vector<std::pair<std::string, int>> expected = {{"resnet50", 161}, {"resnet101", 314},
                                                             {"vgg16", 32},     {"bert-base", 199},
                                                             {"gpt2", 148},     {"lstm", 11}};
  for (const auto& [name, count] : expected) {
    auto profile = LoadModelProfile(kPlannerDir + "/profiles/" + name + ".pbtxt");
    ASSERT_TRUE(profile.ok()) << profile.status();
    EXPECT_EQ(profile->tensors_size(), count) << name;
    EXPECT_GT(profile->forward_us(), 0) << name;
  }
  // ResNet-50 has 25,557,032 parameters; backprop order starts at the output layer.
  auto resnet50 = LoadModelProfile(kPlannerDir + "/profiles/resnet50.pbtxt");
  ASSERT_TRUE(resnet50.ok());
  int64_t params = 0;
  for (const auto& t : resnet50->tensors()) params += t.elements();
  EXPECT_EQ(params, 25557032);
  EXPECT_EQ(resnet50->tensors(0).name(), "fc.bias");
  EXPECT_EQ(resnet50->tensors(160).name(), "conv1.weight");
}

TEST(InputsTest, ShippedClustersAndCostTableLoad) {
  for (const char* name : {"8x1gpu-10g", "4x8gpu-25g", "4x1gpu-1g"}) {
    auto cluster = LoadClusterDescription(kPlannerDir + "/clusters/" + name + ".pbtxt");
    EXPECT_TRUE(cluster.ok()) << name << ": " << cluster.status();
  }
  auto costs = LoadCostTable(kPlannerDir + "/costs/nominal.pbtxt");
  ASSERT_TRUE(costs.ok()) << costs.status();
  EXPECT_GE(costs->codecs_size(), 6);
}

TEST(InputsTest, InvalidValueNamesFileLineAndField) {
  proto::ModelProfile profile;
  absl::Status s = ParseModelProfile(
      "model: \"m\"\n"
      "tensors { name: \"a\" elements: 10 ready_gap_us: 1 }\n"
      "tensors {\n"
      "  name: \"b\"\n"
      "  elements: 0\n"
      "  ready_gap_us: -2\n"
      "}\n",
      "bad.pbtxt", &profile);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(),
              HasSubstr("bad.pbtxt:5:3: tensors[1].elements: must be in 1..1099511627776, got 0"));
  EXPECT_THAT(s.message(), HasSubstr("bad.pbtxt:6:3: tensors[1].ready_gap_us: must be >= 0"));
}

TEST(InputsTest, ForwardCpuMustBeAFiniteTime) {
  proto::ModelProfile profile;
  const std::string tensor = "tensors { name: \"a\" elements: 10 }\n";
  EXPECT_TRUE(
      ParseModelProfile(tensor + "measured_forward_cpu_us: 60000\n", "m.pbtxt", &profile).ok());
  for (const char* bad : {"-1", "inf", "nan"}) {
    absl::Status s =
        ParseModelProfile(tensor + "measured_forward_cpu_us: " + bad + "\n", "m.pbtxt", &profile);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_THAT(s.message(),
                HasSubstr("m.pbtxt:2:1: measured_forward_cpu_us: must be >= 0 and finite"))
        << bad;
  }
}

TEST(InputsTest, MissingFieldIsReportedAtItsMessage) {
  proto::ModelProfile profile;
  absl::Status s = ParseModelProfile("tensors { elements: 3 }\n", "m.pbtxt", &profile);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("m.pbtxt:1:1: tensors[0].name: must not be empty"));
}

TEST(InputsTest, SyntaxErrorsNameFileLineAndColumn) {
  proto::ModelProfile profile;
  absl::Status s = ParseModelProfile("model: \"m\"\ntensors { name: \"a\" elementz: 3 }\n",
                                     "typo.pbtxt", &profile);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("typo.pbtxt:2:"));
  EXPECT_THAT(s.message(), HasSubstr("elementz"));
}

TEST(InputsTest, ClusterChecksLinks) {
  proto::ClusterDescription cluster;
  absl::Status s = ParseClusterDescription(
      "machines: 2\n"
      "servers: 1\n"
      "worker_link { bandwidth_gbps: 0 latency_us: 5 }\n",
      "c.pbtxt", &cluster);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("c.pbtxt:3:15: worker_link.bandwidth_gbps: must be > 0"));
  EXPECT_THAT(s.message(), HasSubstr("server_link: missing"));
}

TEST(InputsTest, HostContentionNeedsOneHostAndItsRange) {
  proto::ClusterDescription cluster;
  const std::string links =
      "machines: 2\nservers: 1\nworker_link { bandwidth_gbps: 1 }\n"
      "server_link { bandwidth_gbps: 1 }\n";
  EXPECT_TRUE(ParseClusterDescription(links + "host_cores: 2\nhost_cpu_inflation: 1.2\n", "c.pbtxt",
                                      &cluster)
                  .ok());
  EXPECT_DOUBLE_EQ(cluster.host_cpu_inflation(), 1.2);
  absl::Status s =
      ParseClusterDescription(links + "host_cpu_inflation: 1.2\n", "c.pbtxt", &cluster);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("c.pbtxt:5:1: host_cpu_inflation: applies to a job on one "
                                     "host only: set host_cores too"));
  for (const char* bad : {"-1", "0.97", "inf", "nan"}) {
    s = ParseClusterDescription(links + "host_cores: 2\nhost_cpu_inflation: " + bad + "\n",
                                "c.pbtxt", &cluster);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_THAT(s.message(),
                HasSubstr("host_cpu_inflation: must be 0 (absent: 1) or a finite number >= 1"))
        << bad;
  }
  s = ParseClusterDescription(links + "host_cores: 2\nhost_effective_cores: 2.5\n", "c.pbtxt",
                              &cluster);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("host_effective_cores: must be in [0, host_cores = 2]"));
  EXPECT_TRUE(ParseClusterDescription(links + "host_cores: 2\nhost_effective_cores: 1.4\n",
                                      "c.pbtxt", &cluster)
                  .ok());
}

TEST(InputsTest, CostTableChecksCurves) {
  proto::CostTable costs;
  absl::Status s = ParseCostTable(
      "codecs {\n"
      "  name: \"topk\"\n"
      "  ratio: 0.02\n"
      "  costs { device: DEVICE_CPU\n"
      "    encode: [{ bytes: 100 us: 1 },\n"
      "             { bytes: 50 us: 2 }]\n"
      "  }\n"
      "}\n",
      "costs.pbtxt", &costs);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(),
              HasSubstr("costs.pbtxt:6:16: codecs[0].costs[0].encode[1].bytes: points must be in "
                        "increasing bytes"));
  EXPECT_THAT(s.message(),
              HasSubstr("costs.pbtxt:4:3: codecs[0].costs[0].decode: needs at least one point"));
}

TEST(InputsTest, MissingFileIsNotFound) {
  auto profile = LoadModelProfile("/nonexistent/profile.pbtxt");
  ASSERT_FALSE(profile.ok());
  EXPECT_THAT(profile.status().message(), HasSubstr("/nonexistent/profile.pbtxt"));
}

TEST(InputsTest, PiecewiseLinearCost) {
  proto::DeviceCost cost;
  auto* a = cost.add_encode();
  a->set_bytes(1000);
  a->set_us(10);
  auto* b = cost.add_encode();
  b->set_bytes(2000);
  b->set_us(30);
  EXPECT_DOUBLE_EQ(InterpolateCost(cost.encode(), 1500), 20);
  EXPECT_DOUBLE_EQ(InterpolateCost(cost.encode(), 500), 10);   // fixed cost below the first
  EXPECT_DOUBLE_EQ(InterpolateCost(cost.encode(), 3000), 50);  // last segment extended
  proto::DeviceCost single;
  single.add_encode()->set_bytes(100);
  single.mutable_encode(0)->set_us(4);
  EXPECT_DOUBLE_EQ(InterpolateCost(single.encode(), 50), 2);
}

}  // namespace
}  // namespace bytecomp::planner
