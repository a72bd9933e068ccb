// The checkpoint format of a tensor's error-feedback state: its bytes, a round trip, and a
// clear error (never a crash or a huge allocation) for every damaged input.
#include "tensor_checkpoint.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace bytecomp::worker {
namespace {

TEST(TensorCheckpointTest, TheBytesAreCountThenLengthPrefixedStates) {
  const std::string encoded = EncodeTensorState({"ab", ""});
  ASSERT_EQ(encoded.size(), 4u + 8 + 2 + 8);
  uint32_t count = 0;
  std::memcpy(&count, encoded.data(), 4);
  EXPECT_EQ(count, 2u);
  uint64_t len = 0;
  std::memcpy(&len, encoded.data() + 4, 8);
  EXPECT_EQ(len, 2u);
  EXPECT_EQ(encoded.substr(12, 2), "ab");
  std::memcpy(&len, encoded.data() + 14, 8);
  EXPECT_EQ(len, 0u);
}

TEST(TensorCheckpointTest, RoundTripsEveryPartition) {
  const std::vector<std::string> states = {std::string("\x00\x01\x02", 3), "", "residual"};
  absl::StatusOr<std::vector<std::string>> decoded =
      DecodeTensorState("w", EncodeTensorState(states), 3);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, states);
}

TEST(TensorCheckpointTest, APartitionCountThatDiffersIsNamed) {
  absl::StatusOr<std::vector<std::string>> decoded =
      DecodeTensorState("fc.w", EncodeTensorState({"a", "b"}), 3);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(decoded.status().message(),
            "error-feedback state of 'fc.w': 2 partitions, the tensor has 3");
}

TEST(TensorCheckpointTest, EveryTruncationIsAnError) {
  const std::string encoded = EncodeTensorState({"abc", "de"});
  for (size_t cut = 0; cut < encoded.size(); ++cut) {
    absl::StatusOr<std::vector<std::string>> decoded =
        DecodeTensorState("w", encoded.substr(0, cut), 2);
    ASSERT_FALSE(decoded.ok()) << "cut at " << cut;
    EXPECT_EQ(decoded.status().message(), "error-feedback state of 'w': truncated") << cut;
  }
}

TEST(TensorCheckpointTest, TrailingBytesAndHugeLengthsAreRefused) {
  EXPECT_EQ(DecodeTensorState("w", EncodeTensorState({"a"}) + "x", 1).status().message(),
            "error-feedback state of 'w': trailing bytes");
  std::string huge = EncodeTensorState({"a"});
  const uint64_t len = ~uint64_t{0};
  std::memcpy(huge.data() + 4, &len, 8);
  EXPECT_EQ(DecodeTensorState("w", huge, 1).status().message(),
            "error-feedback state of 'w': truncated");
}

}  // namespace
}  // namespace bytecomp::worker
