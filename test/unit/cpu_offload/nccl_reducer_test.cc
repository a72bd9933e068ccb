// Host-side logic of the NCCL reducer (no GPU here): shard arithmetic and argument checks.
// The collectives themselves are compile-checked only.
#include "bytecomp/worker/nccl_reducer.h"

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

}  // namespace
}  // namespace bytecomp::worker
