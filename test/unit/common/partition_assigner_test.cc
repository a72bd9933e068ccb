#include "bytecomp/common/partition_assigner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace bytecomp {
namespace {

using proto::DTYPE_BFLOAT16;
using proto::DTYPE_FLOAT16;
using proto::DTYPE_FLOAT32;

TEST(PartitionAssignerTest, PartitionElementsFromBytesAndDType) {
  EXPECT_EQ(PartitionAssigner::PartitionElements(4 << 20, DTYPE_FLOAT32), 1 << 20);
  EXPECT_EQ(PartitionAssigner::PartitionElements(4 << 20, DTYPE_FLOAT16), 2 << 20);
  EXPECT_EQ(PartitionAssigner::PartitionElements(4 << 20, DTYPE_BFLOAT16), 2 << 20);
  EXPECT_EQ(PartitionAssigner::PartitionElements(65, DTYPE_FLOAT32), 16);  // rounds down
  EXPECT_EQ(PartitionAssigner::PartitionElements(3, DTYPE_FLOAT32), 1);    // max(1, 0)
}

TEST(PartitionAssignerTest, PartitionCountAtBoundaries) {
  constexpr int64_t kPart = 1000;
  EXPECT_EQ(PartitionAssigner::PartitionCount(1, kPart), 1);
  EXPECT_EQ(PartitionAssigner::PartitionCount(kPart - 1, kPart), 1);
  EXPECT_EQ(PartitionAssigner::PartitionCount(kPart, kPart), 1);
  EXPECT_EQ(PartitionAssigner::PartitionCount(kPart + 1, kPart), 2);
  EXPECT_EQ(PartitionAssigner::PartitionCount(5 * kPart - 1, kPart), 5);
  EXPECT_EQ(PartitionAssigner::PartitionCount(5 * kPart, kPart), 5);
  EXPECT_EQ(PartitionAssigner::PartitionCount(5 * kPart + 1, kPart), 6);
  EXPECT_EQ(PartitionAssigner::PartitionCount(0, kPart), 0);
}

TEST(PartitionAssignerTest, ShapedTensorsArePartitionedIntoWholeRows) {
  PartitionAssigner assigner(2, 4000);  // 1000 fp32
  auto rows = assigner.Assign(3003, DTYPE_FLOAT32, 143);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->partition_elements, 858);  // 6 rows
  EXPECT_EQ(rows->partition_server.size(), 4u);
  // A row as long as a partition or longer: one row each.
  auto long_rows = assigner.Assign(3000, DTYPE_FLOAT32, 1500);
  ASSERT_TRUE(long_rows.ok());
  EXPECT_EQ(long_rows->partition_elements, 1500);
  // Rows that do not divide the tensor are refused.
  auto bad = assigner.Assign(3003, DTYPE_FLOAT32, 1000);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "rows of 1000 elements do not divide 3003 elements");
}

TEST(PartitionAssignerTest, AssignGivesOnePartitionPerChunkAtBoundaries) {
  // 64 bytes = 16 fp32 elements per partition, one server: all partitions on server 0.
  constexpr int64_t kPart = 16;
  for (int64_t k : {1, 3, 7}) {
    for (int64_t delta : {-1, 0, 1}) {
      PartitionAssigner assigner(1, 64);
      const int64_t n = k * kPart + delta;
      absl::StatusOr<PartitionAssignment> a = assigner.Assign(n, DTYPE_FLOAT32);
      ASSERT_TRUE(a.ok()) << a.status();
      EXPECT_EQ(a->partition_elements, kPart);
      const size_t expected = delta > 0 ? k + 1 : k;
      EXPECT_EQ(a->partition_server.size(), expected) << "n=" << n;
      EXPECT_EQ(assigner.bytes_per_server()[0], n * 4) << "n=" << n;
    }
  }
  PartitionAssigner one(4, 64);
  absl::StatusOr<PartitionAssignment> a = one.Assign(1, DTYPE_FLOAT16);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->partition_elements, 32);
  EXPECT_EQ(a->partition_server, std::vector<int32_t>({0}));
  EXPECT_EQ(one.bytes_per_server(), std::vector<int64_t>({2, 0, 0, 0}));
}

TEST(PartitionAssignerTest, EachPartitionGoesToTheLeastLoadedServerLowestRankOnTies) {
  PartitionAssigner assigner(2, 64);  // 16 fp32 elements per partition
  // 40 elements: 16 (64 B) -> server 0, 16 (64 B) -> server 1 (0 < 64), 8 (32 B) -> server 0
  // (tie 64 = 64, lowest rank).
  absl::StatusOr<PartitionAssignment> a = assigner.Assign(40, DTYPE_FLOAT32);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->partition_server, std::vector<int32_t>({0, 1, 0}));
  EXPECT_EQ(assigner.bytes_per_server(), std::vector<int64_t>({96, 64}));
  // The state carries over: the next tensor's partition goes to the lighter server 1.
  absl::StatusOr<PartitionAssignment> b = assigner.Assign(10, DTYPE_FLOAT16);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->partition_elements, 32);
  EXPECT_EQ(b->partition_server, std::vector<int32_t>({1}));
  EXPECT_EQ(assigner.bytes_per_server(), std::vector<int64_t>({96, 84}));
  // A short last partition counts by its real size: 17 elements = 64 B + 4 B.
  absl::StatusOr<PartitionAssignment> c = assigner.Assign(17, DTYPE_FLOAT32);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->partition_server, std::vector<int32_t>({1, 0}));
  EXPECT_EQ(assigner.bytes_per_server(), std::vector<int64_t>({100, 148}));
}

TEST(PartitionAssignerTest, LoadStaysBalancedWithinOnePartition) {
  // Greedy least-loaded assignment keeps max - min load within one partition's bytes.
  constexpr int64_t kPartitionBytes = 4 << 20;
  PartitionAssigner assigner(3, kPartitionBytes);
  int64_t total = 0;
  for (int64_t n : {25557032LL, 1LL, 1048576LL, 1048577LL, 4095LL, 2359296LL, 9437184LL,
                    102760448LL, 4096LL, 16777216LL, 1000LL, 512LL}) {
    absl::StatusOr<PartitionAssignment> a = assigner.Assign(n, DTYPE_FLOAT32);
    ASSERT_TRUE(a.ok()) << a.status();
    total += n * 4;
    const std::vector<int64_t>& load = assigner.bytes_per_server();
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    EXPECT_LE(*hi - *lo, kPartitionBytes) << "after " << n << " elements";
  }
  const std::vector<int64_t>& load = assigner.bytes_per_server();
  EXPECT_EQ(std::accumulate(load.begin(), load.end(), int64_t{0}), total);
}

TEST(PartitionAssignerTest, SameDeclarationsGiveSameAssignment) {
  auto run = [] {
    PartitionAssigner assigner(5, 1 << 16);
    std::vector<std::vector<int32_t>> out;
    for (int64_t n : {100000, 7, 65536, 16384, 16385, 300001, 3}) {
      out.push_back(assigner.Assign(n, n % 2 ? DTYPE_FLOAT16 : DTYPE_FLOAT32)->partition_server);
    }
    return out;
  };
  const auto first = run();
  EXPECT_EQ(run(), first);
  // Every server got something, so the check above compares a real spread.
  std::vector<int> used(5, 0);
  for (const auto& t : first)
    for (int32_t s : t) used[s] = 1;
  EXPECT_EQ(std::accumulate(used.begin(), used.end(), 0), 5);
}

TEST(PartitionAssignerTest, BadDeclarationsAreRejectedWithoutChangingState) {
  PartitionAssigner assigner(2, 64);
  absl::StatusOr<PartitionAssignment> zero = assigner.Assign(0, DTYPE_FLOAT32);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("must be >= 1"), std::string::npos)
      << zero.status().message();
  EXPECT_FALSE(assigner.Assign(-5, DTYPE_FLOAT32).ok());
  absl::StatusOr<PartitionAssignment> bad_dtype = assigner.Assign(10, static_cast<DType>(9));
  ASSERT_FALSE(bad_dtype.ok());
  EXPECT_NE(bad_dtype.status().message().find("dtype 9"), std::string::npos);
  // 2^20 + 1 partitions of 16 elements is over the limit.
  EXPECT_FALSE(
      assigner.Assign((PartitionAssigner::kMaxPartitionsPerTensor + 1) * 16, DTYPE_FLOAT32).ok());
  EXPECT_TRUE(assigner.Assign(PartitionAssigner::kMaxPartitionsPerTensor * 16, DTYPE_FLOAT32).ok());
  PartitionAssigner fresh(2, 64);
  EXPECT_FALSE(fresh.Assign(0, DTYPE_FLOAT32).ok());
  EXPECT_EQ(fresh.bytes_per_server(), std::vector<int64_t>({0, 0}));
}

}  // namespace
}  // namespace bytecomp
