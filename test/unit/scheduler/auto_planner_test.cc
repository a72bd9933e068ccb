// --strategy=auto's link fit (PlanFromProfiles): the links are scaled until the model's
// uncompressed round matches the profiled rounds, when those ran uncompressed and slower.
#include "bytecomp/scheduler/auto_planner.h"

#include <gtest/gtest.h>

namespace bytecomp {
namespace {

// One 100 MB tensor, ready at once, no forward pass; `round_us` as the rounds measured.
proto::ModelProfile Profile(double round_us) {
  proto::ModelProfile p;
  p.set_model("one tensor");
  auto* t = p.add_tensors();
  t->set_name("w");
  t->set_elements(25'000'000);
  p.set_measured_round_us(round_us);
  return p;
}

// 2 workers and 1 server on 1 Gbit/s links without latency; no codecs: only "none".
proto::ClusterDescription Cluster() {
  proto::ClusterDescription c;
  c.set_machines(2);
  for (auto* link : {c.mutable_worker_link(), c.mutable_server_link()}) {
    link->set_bandwidth_gbps(1);
  }
  return c;
}

// A flat job of 2 workers and 1 server.
AutoPlanJob Job(bool profiled_uncompressed) {
  AutoPlanJob job;
  job.workers = 2;
  job.servers = 1;
  job.profiled_uncompressed = profiled_uncompressed;
  return job;
}

TEST(AutoPlannerTest, SlowerUncompressedRoundsScaleTheLinksUntilTheModelMatches) {
  auto model = PlanFromProfiles({Profile(1)}, Cluster(), {}, Job(true));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_DOUBLE_EQ(model->link_scale, 1);  // measured faster than the model: unchanged
  // Both workers' 100 MB through the server's 1 Gbit/s link (1.6 s) and back, overlapped.
  const double predicted = model->predicted_us;
  EXPECT_GT(predicted, 1.6e6);
  EXPECT_LT(predicted, 1.8e6);
  // Rounds 1.6 times as long: the links carry 1/1.6 of their bandwidth.
  auto fitted = PlanFromProfiles({Profile(1.6 * predicted), Profile(1.6 * predicted)}, Cluster(),
                                 {}, Job(true));
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_NEAR(fitted->link_scale, 1 / 1.6, 0.002);
  EXPECT_NEAR(fitted->predicted_us, 1.6 * predicted, 0.003 * predicted);
  EXPECT_NE(fitted->summary.find("links fitted: 0.62"), std::string::npos) << fitted->summary;
  // Rounds that ran compressed say nothing about the uncompressed model.
  auto compressed = PlanFromProfiles({Profile(1.6 * predicted)}, Cluster(), {}, Job(false));
  ASSERT_TRUE(compressed.ok());
  EXPECT_DOUBLE_EQ(compressed->link_scale, 1);
  EXPECT_NE(compressed->summary.find("not fitted: the profiled rounds ran compressed"),
            std::string::npos);
  // Three times as long: a third (the model's round is all communication here).
  auto third = PlanFromProfiles({Profile(3 * predicted)}, Cluster(), {}, Job(true));
  ASSERT_TRUE(third.ok());
  EXPECT_NEAR(third->link_scale, 1 / 3.0, 0.002);
  // Over four times as long: more than the links can explain; not fitted.
  auto far = PlanFromProfiles({Profile(5 * predicted)}, Cluster(), {}, Job(true));
  ASSERT_TRUE(far.ok());
  EXPECT_DOUBLE_EQ(far->link_scale, 1);
  EXPECT_NE(far->summary.find("links not fitted: the model's round is mostly backward compute"),
            std::string::npos) << far->summary;
}

TEST(AutoPlannerTest, ComputeBoundRoundsDoNotFitTheLinks) {
  // The 100 MB tensor's round trip (~1.7 s) hides under 10 s of backward compute before a
  // small last tensor: a slower measured round is the compute's doing, not the links'.
  proto::ModelProfile p = Profile(12e6);
  auto* last = p.add_tensors();
  last->set_name("b");
  last->set_elements(1000);
  last->set_ready_gap_us(10e6);
  auto plan = PlanFromProfiles({p}, Cluster(), {}, Job(true));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_DOUBLE_EQ(plan->link_scale, 1);
  EXPECT_LT(plan->predicted_us, 10.1e6);
  EXPECT_NE(plan->summary.find("links not fitted"), std::string::npos) << plan->summary;
}

TEST(AutoPlannerTest, HierarchicalJobsArePlannedPerMachine) {
  // 4 workers on 2 machines: one push per machine, and every tensor reduced locally first.
  AutoPlanJob job = Job(true);
  job.workers = 4;
  job.hierarchical_machines = 2;
  proto::ClusterDescription cluster = Cluster();
  cluster.mutable_intra_machine_link()->set_bandwidth_gbps(100);
  auto hier = PlanFromProfiles({Profile(1)}, cluster, {}, job);
  ASSERT_TRUE(hier.ok()) << hier.status();
  EXPECT_NE(hier->summary.find("planned 1 tensors (hierarchical, 2 machines)"), std::string::npos)
      << hier->summary;
  ASSERT_EQ(hier->strategy.tensors_size(), 1);
  EXPECT_TRUE(hier->strategy.tensors(0).hierarchical());
  // Flat, the same 4 workers push 4 copies through the server's link: about twice as long.
  job.hierarchical_machines = 0;
  auto flat = PlanFromProfiles({Profile(1)}, cluster, {}, job);
  ASSERT_TRUE(flat.ok());
  EXPECT_NE(flat->summary.find("(flat)"), std::string::npos) << flat->summary;
  EXPECT_FALSE(flat->strategy.tensors(0).hierarchical());
  EXPECT_GT(flat->predicted_us, 1.8 * hier->predicted_us);
}

TEST(AutoPlannerTest, IsUncompressed) {
  proto::Strategy s;
  EXPECT_TRUE(IsUncompressed(s));
  s.add_tensors()->set_name_pattern("*");
  s.mutable_tensors(0)->mutable_push_codec()->set_name("none");
  EXPECT_TRUE(IsUncompressed(s));
  s.add_tensors()->mutable_push_codec()->set_name("fp16");
  EXPECT_FALSE(IsUncompressed(s));
}

}  // namespace
}  // namespace bytecomp
