// The timeline simulator against hand-computed timelines.
#include "bytecomp/planner/timeline.h"

#include <random>

#include "gtest/gtest.h"

namespace bytecomp::planner {
namespace {

// One option made of the given stages (resource, duration), `partitions` copies.
OptionCost MakeOption(std::vector<std::pair<Resource, float>> stages, int partitions = 1) {
  OptionCost cost;
  cost.partitions = partitions;
  for (auto [resource, us] : stages) {
    cost.stages[cost.num_stages++] = Stage{resource, kPush, us};
    cost.work_us[resource] += us * partitions;
  }
  return cost;
}

SimProblem MakeProblem(std::vector<double> gaps, std::vector<std::vector<OptionCost>> options,
                       double forward = 0, int cpu_threads = 1) {
  SimProblem p;
  p.forward_us = forward;
  p.slots = {1, cpu_threads, 1, 1, 1, 1, 1, 1};
  for (size_t i = 0; i < gaps.size(); ++i) {
    SimTensor t;
    t.name = "t" + std::to_string(i);
    t.bytes = 1000;
    t.ready_gap_us = gaps[i];
    t.options = options[i];
    p.tensors.push_back(t);
  }
  return p;
}

TEST(TimelineTest, CommunicationOverlapsTheNextCompute) {
  // t0 ready at 10, pushed 10..15 while t1 is computed (ready at 20), pushed 20..25.
  SimProblem p = MakeProblem({10, 10}, {{MakeOption({{kNicUp, 5}})}, {MakeOption({{kNicUp, 5}})}},
                             /*forward=*/100);
  TimelineSimulator sim(&p);
  EXPECT_DOUBLE_EQ(sim.Simulate({0, 0}), 125);
}

TEST(TimelineTest, LongTransfersQueueOnTheLink) {
  // Push of 15 each: t0 10..25, t1 waits for the link: 25..40.
  SimProblem p =
      MakeProblem({10, 10}, {{MakeOption({{kNicUp, 15}})}, {MakeOption({{kNicUp, 15}})}});
  TimelineSimulator sim(&p);
  std::vector<TraceSpan> trace;
  EXPECT_DOUBLE_EQ(sim.Simulate({0, 0}, &trace), 40);
  // Two compute segments and two pushes; t1's push starts when t0's ends.
  ASSERT_EQ(trace.size(), 4u);
  EXPECT_EQ(trace[3].tensor, 1);
  EXPECT_DOUBLE_EQ(trace[3].start_us, 25);
}

TEST(TimelineTest, BubbleIsDetectedAndBaselineRecordsIt) {
  // t0's push (10..12) ends before t1 is ready at 30: a bubble before t1; none before t2,
  // which is ready at 31 while t1's push (30..40) still runs.
  SimProblem p = MakeProblem(
      {10, 20, 1},
      {{MakeOption({{kNicUp, 2}})}, {MakeOption({{kNicUp, 10}})}, {MakeOption({{kNicUp, 3}})}});
  TimelineSimulator sim(&p);
  EXPECT_DOUBLE_EQ(sim.Rebase({0, 0, 0}), 43);
  EXPECT_TRUE(sim.idle_before(1));
  EXPECT_FALSE(sim.idle_before(2));
  EXPECT_DOUBLE_EQ(sim.ready_time_us(1), 30);
  EXPECT_DOUBLE_EQ(sim.ready_time_us(2), 31);
}

TEST(TimelineTest, TwoTransfersContendAndNearerInputGoesFirst) {
  // t0 has two partitions of 10 on the link; both t0 and t1 (gap 0) are ready at 10.
  // t0 part 0 takes the link 10..20; then t1, nearer the input, goes before t0 part 1:
  // t1 20..24, t0 part 1 24..34.
  SimProblem p =
      MakeProblem({10, 0}, {{MakeOption({{kNicUp, 10}}, 2)}, {MakeOption({{kNicUp, 4}})}});
  TimelineSimulator sim(&p);
  std::vector<TraceSpan> trace;
  EXPECT_DOUBLE_EQ(sim.Simulate({0, 0}, &trace), 34);
  std::vector<std::pair<int, double>> pushes;
  for (const auto& s : trace) {
    if (s.kind != 255) pushes.push_back({s.tensor, s.start_us});
  }
  ASSERT_EQ(pushes.size(), 3u);
  EXPECT_EQ(pushes[0], (std::pair<int, double>{0, 10}));
  EXPECT_EQ(pushes[1], (std::pair<int, double>{1, 20}));
  EXPECT_EQ(pushes[2], (std::pair<int, double>{0, 24}));
}

TEST(TimelineTest, CpuPoolRunsKJobsAtOnce) {
  // Four tensors ready at 1 (gaps 1,0,0,0), each one CPU job of 10.
  auto make = [](int threads) {
    std::vector<std::vector<OptionCost>> options(4, {MakeOption({{kCpuPool, 10}})});
    return MakeProblem({1, 0, 0, 0}, options, 0, threads);
  };
  for (auto [threads, expected] : std::vector<std::pair<int, double>>{{1, 41}, {2, 21}, {4, 11}}) {
    SimProblem p = make(threads);
    TimelineSimulator sim(&p);
    EXPECT_DOUBLE_EQ(sim.Simulate({0, 0, 0, 0}), expected) << threads << " threads";
  }
}

TEST(TimelineTest, GpuEncodeDelaysTheBackwardThatFollows) {
  // t0 encodes on the compute stream for 4 (10..14); t1's segment runs 14..24, then its push.
  SimProblem p = MakeProblem(
      {10, 10}, {{MakeOption({{kCompute, 4}, {kNicUp, 1}})}, {MakeOption({{kNicUp, 1}})}});
  TimelineSimulator sim(&p);
  EXPECT_DOUBLE_EQ(sim.Rebase({0, 0}), 25);
  EXPECT_DOUBLE_EQ(sim.ready_time_us(1), 24);
}

TEST(TimelineTest, PipelinedStagesOfTwoPartitions) {
  // Two partitions through encode (CPU, 1 thread, 3 each) then push (5 each): encodes
  // 0..3, 3..6; pushes 3..8, 8..13.
  SimProblem p = MakeProblem({0}, {{MakeOption({{kCpuPool, 3}, {kNicUp, 5}}, 2)}});
  TimelineSimulator sim(&p);
  EXPECT_DOUBLE_EQ(sim.Simulate({0}), 13);
}

TEST(TimelineTest, IncrementalEvaluationMatchesFullSimulation) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dur(0, 10);
  const int n = 12;
  std::vector<double> gaps;
  std::vector<std::vector<OptionCost>> options(n);
  for (int i = 0; i < n; ++i) {
    gaps.push_back(dur(rng));
    for (int o = 0; o < 3; ++o) {
      options[i].push_back(MakeOption({{kCompute, dur(rng) / 4},
                                       {kCpuPool, dur(rng)},
                                       {kNicUp, dur(rng)},
                                       {kServer, dur(rng)},
                                       {kNicDown, dur(rng)}},
                                      1 + o));
    }
  }
  SimProblem p = MakeProblem(gaps, options, 5, 2);
  TimelineSimulator sim(&p);
  std::vector<int> base(n, 0);
  sim.Rebase(base);
  for (int trial = 0; trial < 200; ++trial) {
    int from = static_cast<int>(rng() % n);
    std::vector<int> choice = base;
    for (int i = from; i < n; ++i) choice[i] = static_cast<int>(rng() % 3);
    double full = sim.Simulate(choice);
    EXPECT_DOUBLE_EQ(sim.Evaluate(choice, from, TimelineSimulator::kAborted, n - 1), full);
    // A cutoff below the result aborts; above it does not.
    EXPECT_EQ(sim.Evaluate(choice, from, full, n - 1), TimelineSimulator::kAborted);
    EXPECT_DOUBLE_EQ(sim.Evaluate(choice, from, full + 1, n - 1), full);
    // The lower bound holds.
    EXPECT_LE(sim.LowerBound(from, sim.TotalWork(choice)), full);
    if (trial % 10 == 0) {
      base = choice;
      EXPECT_DOUBLE_EQ(sim.Rebase(base, from), full);
    }
  }
}

TEST(TimelineTest, ARunThatMeetsTheBaselineShiftedInTimeEndsWithItsBits) {
  // Compute-bound: each tensor's push is over before the next is ready. Option 0 encodes on
  // the compute stream first (delaying every later tensor), option 1 does not; durations
  // like the planner's, on the time grid.
  const int n = 10;
  std::vector<double> gaps;
  std::vector<std::vector<OptionCost>> options(n);
  for (int i = 0; i < n; ++i) {
    gaps.push_back(OnTimeGrid(10.1 + 0.37 * i));
    options[i] = {MakeOption({{kCompute, OnTimeGrid(0.3 + 0.01 * i)}, {kNicUp, OnTimeGrid(1.7)}}),
                  MakeOption({{kNicUp, OnTimeGrid(2.9)}})};
  }
  SimProblem p = MakeProblem(gaps, options, /*forward=*/3.3);
  TimelineSimulator sim(&p);
  sim.Rebase(std::vector<int>(n, 0));
  std::vector<int> choice(n, 0);
  choice[2] = 1;  // every later tensor ready earlier, by t2's encode
  const double full = sim.Simulate(choice);
  const int64_t before = sim.events_processed();
  EXPECT_EQ(sim.Evaluate(choice, 2, TimelineSimulator::kAborted, 2), full);
  const int64_t evaluated = sim.events_processed() - before;
  // A full run from tensor 2 processes about two events per tensor; this one stops at the
  // first checkpoint after t2's push, where the state is the baseline's shifted.
  EXPECT_LE(evaluated, 6);
  // Cut at its end, not below.
  EXPECT_EQ(sim.Evaluate(choice, 2, full, 2), TimelineSimulator::kAborted);
  EXPECT_EQ(sim.Evaluate(choice, 2, std::nextafter(full, 1e300), 2), full);
  // As a new baseline: the later snapshots are the old ones shifted; a change after it
  // evaluates from them to the bits of a full run.
  EXPECT_EQ(sim.Rebase(choice, 2, 2), full);
  TimelineSimulator fresh(&p);
  fresh.Rebase(choice);
  for (int j = 0; j < n; ++j) EXPECT_EQ(sim.ready_time_us(j), fresh.ready_time_us(j)) << j;
  choice[6] = 1;
  EXPECT_EQ(sim.Evaluate(choice, 6, TimelineSimulator::kAborted, 6), sim.Simulate(choice));
  // Off the grid (0.1 is not a multiple of 2^-20) runs meet only at equal times: still exact.
  options[0][0].stages[1].duration_us = 0.1f;
  SimProblem off = MakeProblem(gaps, options, 3.3);
  TimelineSimulator off_grid(&off);
  off_grid.Rebase(std::vector<int>(n, 0));
  choice = std::vector<int>(n, 0);
  choice[2] = 1;
  EXPECT_EQ(off_grid.Evaluate(choice, 2, TimelineSimulator::kAborted, 2),
            off_grid.Simulate(choice));
}

TEST(TimelineTest, ChromeTraceHasEverySpanAndNamedRows) {
  SimProblem p = MakeProblem({10, 10}, {{MakeOption({{kNicUp, 5}})}, {MakeOption({{kNicUp, 5}})}});
  TimelineSimulator sim(&p);
  std::vector<TraceSpan> trace;
  sim.Simulate({0, 0}, &trace);
  std::string json = ChromeTraceJson(p, trace);
  EXPECT_EQ(json.rfind("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", 0), 0u);
  size_t spans = 0;
  for (size_t at = json.find("\"ph\":\"X\""); at != std::string::npos;
       at = json.find("\"ph\":\"X\"", at + 1)) {
    ++spans;
  }
  EXPECT_EQ(spans, 4u);
  EXPECT_NE(json.find("\"name\":\"backward t1\""), std::string::npos);
  EXPECT_NE(json.find("\"name\":\"nic up 0\""), std::string::npos);
}

}  // namespace
}  // namespace bytecomp::planner
