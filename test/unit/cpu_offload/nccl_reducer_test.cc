// The NCCL reducer: shard arithmetic and argument checks everywhere; on a machine with a GPU
// (deploy/gpu_check.sh), a communicator of one rank, which is all one GPU allows, running
// every collective (elsewhere that test skips).
#include "bytecomp/worker/nccl_reducer.h"

#include <cuda_runtime_api.h>

#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace bytecomp::worker {
namespace {

TEST(NcclShardOf, ShardsCoverTheTensorOnceWithPadding) {
  for (size_t elements : {0u, 1u, 7u, 8u, 1000003u}) {
    for (int ranks : {1, 2, 3, 8}) {
      size_t covered = 0;
      size_t expected_offset = 0;
      for (int rank = 0; rank < ranks; ++rank) {
        const LocalShard s = ShardOf(elements, rank, ranks);
        EXPECT_EQ(s.padded_elements, s.shard_elements * ranks);
        EXPECT_GE(s.padded_elements, elements);
        EXPECT_LT(s.padded_elements - elements, static_cast<size_t>(ranks));
        EXPECT_EQ(s.offset, expected_offset);
        EXPECT_LE(s.elements, s.shard_elements);
        covered += s.elements;
        expected_offset = s.offset + s.elements;
      }
      EXPECT_EQ(covered, elements) << elements << " over " << ranks;
    }
  }
  const LocalShard last = ShardOf(10, 3, 4);  // shards of 3: 0-3, 3-6, 6-9, 9-10
  EXPECT_EQ(last.offset, 9u);
  EXPECT_EQ(last.elements, 1u);
}

TEST(NcclLocalReducer, RejectsAMalformedUniqueIdOrRank) {
  auto bad_id = NcclLocalReducer::Create("short", 0, 2, 0);
  EXPECT_EQ(bad_id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_id.status().message().find("5 bytes; expected 128"), absl::string_view::npos);
  auto bad_rank = NcclLocalReducer::Create(std::string(kNcclUniqueIdBytes, '\0'), 2, 2, 0);
  EXPECT_EQ(bad_rank.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NcclLocalReducerOnGpu, ASingleRankCommunicatorRunsEveryCollectiveInPlace) {
  absl::StatusOr<int> device = CurrentNcclDevice();
  if (!device.ok()) GTEST_SKIP() << device.status();
  absl::StatusOr<std::string> id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  auto reducer = NcclLocalReducer::Create(*id, 0, 1, *device);
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  const size_t n = 100003;
  std::vector<float> host(n);
  std::iota(host.begin(), host.end(), 0.5f);
  float* buffer = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&buffer), n * sizeof(float)), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(buffer, host.data(), n * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  // One rank: each collective leaves the buffer as it was (its sum, its shard, its broadcast).
  const LocalShard shard = ShardOf(n, 0, 1);
  EXPECT_EQ(shard.padded_elements, n);
  EXPECT_TRUE((*reducer)->ReduceScatterInPlace(buffer, n, proto::DTYPE_FLOAT32, stream).ok());
  EXPECT_TRUE((*reducer)->AllGatherInPlace(buffer, n, proto::DTYPE_FLOAT32, stream).ok());
  EXPECT_TRUE((*reducer)->GroupStart().ok());
  EXPECT_TRUE((*reducer)->ReduceToRoot(buffer, n, proto::DTYPE_FLOAT32, 0, stream).ok());
  EXPECT_TRUE((*reducer)->GroupEnd().ok());
  EXPECT_TRUE((*reducer)->BroadcastFromRoot(buffer, n, proto::DTYPE_FLOAT32, 0, stream).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<float> back(n);
  ASSERT_EQ(cudaMemcpy(back.data(), buffer, n * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(back, host);
  cudaStreamDestroy(stream);
  cudaFree(buffer);
}

}  // namespace
}  // namespace bytecomp::worker
