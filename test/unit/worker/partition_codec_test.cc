// EnsureCodecs (worker/src/partition_codec.h): a new strategy version that changes only a
// tensor's scheme (ps -> allreduce -> ps) keeps each partition's error-feedback memory, and one
// that changes its codec does not.
#include "partition_codec.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace bytecomp::worker {
namespace {

std::shared_ptr<Operation> Started(const std::shared_ptr<TensorCodecs>& codecs, uint64_t version,
                                   const std::string& codec, proto::Scheme scheme,
                                   std::vector<float>& data) {
  PushPullRequest request;
  request.name = "w";
  request.data = data.data();
  request.element_count = static_cast<int64_t>(data.size());
  auto op = std::make_shared<Operation>(request);
  TensorLayout layout;
  layout.tensor_id = 1;
  layout.element_count = request.element_count;
  layout.partition_elements = request.element_count;
  layout.partition_server = {0};
  compress::TensorPlan plan;
  plan.version = version;
  plan.push.set_name(codec);
  plan.push.set_memory("residual");
  (*plan.push.mutable_params())["ratio"] = "0.25";
  plan.scheme = scheme;
  codecs->Resize(1);
  op->Start(OperationStart{.layout = layout, .round = version, .plan = plan, .codecs = codecs});
  return op;
}

TEST(PartitionCodecTest, TheMemoryStaysAcrossASchemeSwitchAndGoesWithTheCodec) {
  auto codecs = std::make_shared<TensorCodecs>();
  std::vector<float> data(64, 1.0f);
  auto ps = Started(codecs, 1, "randomk", proto::SCHEME_PS, data);
  ASSERT_TRUE(EnsureCodecs(*ps, 0).ok());
  ASSERT_NE(codecs->partitions[0].memory, nullptr);
  // A residual: all of the gradient was left out of this round.
  const std::vector<float> sent(data.size(), 0.0f);
  std::vector<float> compensated(data.size());
  compress::Memory& memory = *codecs->partitions[0].memory;
  ASSERT_TRUE(memory.Compensate(data, compress::CodecContext(), absl::MakeSpan(compensated)).ok());
  ASSERT_TRUE(memory.Update(compensated, sent, compress::CodecContext()).ok());
  auto state = [&] {
    absl::StatusOr<std::vector<std::string>> s = SaveCodecStates("w", *codecs, 1);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? (*s)[0] : std::string();
  };
  const std::string residual = state();
  auto allreduce = Started(codecs, 2, "randomk", proto::SCHEME_ALLREDUCE, data);
  ASSERT_TRUE(EnsureCodecs(*allreduce, 0).ok());
  EXPECT_EQ(state(), residual);
  auto back = Started(codecs, 3, "randomk", proto::SCHEME_PS, data);
  ASSERT_TRUE(EnsureCodecs(*back, 0).ok());
  EXPECT_EQ(state(), residual);
  // Another codec: a fresh memory.
  auto other = Started(codecs, 4, "topk", proto::SCHEME_PS, data);
  ASSERT_TRUE(EnsureCodecs(*other, 0).ok());
  EXPECT_NE(state(), residual);
}

}  // namespace
}  // namespace bytecomp::worker
