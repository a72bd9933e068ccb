// Declarations without sockets: agreement, ids and servers, mismatches, bad values, timeouts.
#include "bytecomp/scheduler/declarations.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "protocol_test_util.h"

namespace bytecomp {
namespace {

using proto::ControlMessage;
using testing::Contains;
using testing::ServerId;
using testing::WorkerId;

proto::DeclareTensor Tensor(const std::string& name, int64_t elements, int dtype) {
  proto::DeclareTensor d;
  d.set_name(name);
  d.set_element_count(elements);
  d.set_dtype(dtype);
  return d;
}

std::vector<int32_t> Servers(const proto::DeclareReply& r) {
  return {r.partition_server().begin(), r.partition_server().end()};
}

class DeclarationsTest : public ::testing::Test {
 protected:
  void Start(int workers, int servers, proto::ClusterConfig overrides = {}) {
    config_ = testing::JobConfig(workers, servers, overrides);
    nodes_ = std::make_unique<NodeTable>(workers, servers);
    testing::RegisterAll(*nodes_);
    declarations_ = std::make_unique<Declarations>(config_, *nodes_);
  }
  Outbox Declare(int worker, const std::string& name, int64_t elements, int dtype,
                 int64_t now_ms = 0) {
    Outbox out;
    declarations_->Handle(*nodes_->At(proto::ROLE_WORKER, worker), Tensor(name, elements, dtype),
                          now_ms, &out);
    return out;
  }
  // The one DeclareReply `out` holds for worker `rank`.
  static proto::DeclareReply ReplyTo(const Outbox& out, int rank) {
    return testing::Only(out, WorkerId(rank), ControlMessage::kDeclareReply).declare_reply();
  }

  proto::ClusterConfig config_;
  std::unique_ptr<NodeTable> nodes_;
  std::unique_ptr<Declarations> declarations_;
};

TEST_F(DeclarationsTest, IdsFollowCompletionOrderAndPartitionsBalanceTheServers) {
  proto::ClusterConfig config;
  config.set_partition_bytes(64);  // 16 fp32 / 32 fp16 elements per partition
  Start(2, 2, config);
  EXPECT_TRUE(Declare(0, "conv1.weight", 40, proto::DTYPE_FLOAT32).messages().empty());
  Outbox out = Declare(1, "conv1.weight", 40, proto::DTYPE_FLOAT32);
  // Servers first: they validate pushes, and a worker may push the moment it has its reply.
  EXPECT_EQ(testing::Recipients(out),
            (std::vector<std::string>{ServerId(0), ServerId(1), WorkerId(0), WorkerId(1)}));
  for (const OutgoingControl& m : out.messages()) {
    const proto::DeclareReply& r = m.message.declare_reply();
    EXPECT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r.name(), "conv1.weight");
    EXPECT_EQ(r.tensor_id(), 0u);
    EXPECT_EQ(r.element_count(), 40);
    EXPECT_EQ(r.dtype(), proto::DTYPE_FLOAT32);
    EXPECT_EQ(r.partition_elements(), 16);
    EXPECT_EQ(Servers(r), std::vector<int32_t>({0, 1, 0}));
  }
  // Completion order gives the id, whatever order each worker declared in.
  EXPECT_TRUE(Declare(1, "fc.bias", 10, proto::DTYPE_FLOAT16).messages().empty());
  Declare(0, "fc.weight", 33, proto::DTYPE_FLOAT32);
  out = Declare(1, "fc.weight", 33, proto::DTYPE_FLOAT32);
  const proto::DeclareReply a = ReplyTo(out, 0);
  EXPECT_EQ(a.tensor_id(), 1u);
  // Loads before: server 0 96 B, server 1 64 B. 16 -> s1 (128), 16 -> s0 (160), 1 -> s1.
  EXPECT_EQ(Servers(a), std::vector<int32_t>({1, 0, 1}));
  out = Declare(0, "fc.bias", 10, proto::DTYPE_FLOAT16);
  const proto::DeclareReply b = ReplyTo(out, 1);
  EXPECT_EQ(b.tensor_id(), 2u);
  EXPECT_EQ(b.partition_elements(), 32);
  EXPECT_EQ(b.dtype(), proto::DTYPE_FLOAT16);
  // Loads: server 0 160 B, server 1 132 B.
  EXPECT_EQ(Servers(b), std::vector<int32_t>({1}));

  // Declaring identically again gets the same answer, to the one who asked.
  out = Declare(1, "fc.weight", 33, proto::DTYPE_FLOAT32);
  EXPECT_EQ(ReplyTo(out, 1).SerializeAsString(), a.SerializeAsString());
  EXPECT_EQ(out.messages().size(), 1u);
  // Declaring differently is an error for that worker alone; the tensor stays as decided.
  out = Declare(1, "fc.weight", 34, proto::DTYPE_FLOAT32);
  const proto::DeclareReply changed = ReplyTo(out, 1);
  EXPECT_FALSE(changed.ok());
  EXPECT_EQ(changed.error(),
            "tensor 'fc.weight' re-declared by worker 1 with 34 elements of fp32 after 33 "
            "elements of fp32");
  EXPECT_EQ(out.messages().size(), 1u);
  EXPECT_EQ(declarations_->NextDeadline(), std::nullopt);
}

TEST_F(DeclarationsTest, WorkersDeclaringInAnyOrderGetIdenticalRepliesAndBalancedServers) {
  constexpr int kWorkers = 24;
  constexpr int kServers = 4;
  constexpr int kTensors = 60;
  proto::ClusterConfig config;
  config.set_partition_bytes(4096);
  Start(kWorkers, kServers, config);
  auto size_of = [](int t) -> int64_t { return 1 + (t * 977) % 5000; };
  // Every worker declares every tensor in its own order (sizes around the 1024-element
  // partition boundary).
  std::vector<std::pair<int, int>> calls;  // (worker, tensor)
  for (int w = 0; w < kWorkers; ++w) {
    std::vector<int> order(kTensors);
    for (int t = 0; t < kTensors; ++t) order[t] = t;
    std::shuffle(order.begin(), order.end(), std::mt19937(w));
    for (int t : order) calls.emplace_back(w, t);
  }
  std::shuffle(calls.begin(), calls.end(), std::mt19937(99));
  Outbox out;
  for (const auto& [w, t] : calls) {
    declarations_->Handle(*nodes_->At(proto::ROLE_WORKER, w),
                          Tensor(absl::StrCat("layer", t), size_of(t), proto::DTYPE_FLOAT32), 0,
                          &out);
  }
  std::vector<proto::ControlMessage> first = testing::To(out, WorkerId(0));
  ASSERT_EQ(first.size(), static_cast<size_t>(kTensors));
  for (int w = 1; w < kWorkers; ++w) {
    std::vector<proto::ControlMessage> got = testing::To(out, WorkerId(w));
    ASSERT_EQ(got.size(), first.size());
    for (int i = 0; i < kTensors; ++i) {
      EXPECT_EQ(got[i].SerializeAsString(), first[i].SerializeAsString()) << "worker " << w;
    }
  }
  std::vector<int64_t> load(kServers, 0);
  for (int i = 0; i < kTensors; ++i) {
    const proto::DeclareReply& r = first[i].declare_reply();
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r.tensor_id(), static_cast<uint32_t>(i)) << "ids in completion order";
    const int64_t n = size_of(std::stoi(r.name().substr(5)));
    ASSERT_EQ(r.partition_server_size(), (n + 1023) / 1024) << r.name();
    for (int p = 0; p < r.partition_server_size(); ++p) {
      load[r.partition_server(p)] += std::min<int64_t>(1024, n - p * 1024) * 4;
    }
  }
  const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
  EXPECT_LE(*hi - *lo, 4096) << "servers unbalanced";
}

TEST_F(DeclarationsTest, AMismatchIsAnErrorForEveryWorkerGroupingTheWorkersByWhatTheyDeclared) {
  Start(3, 1);
  Declare(0, "fc.weight", 100, proto::DTYPE_FLOAT32);
  Declare(1, "fc.weight", 200, proto::DTYPE_FLOAT32);
  Outbox out = Declare(2, "fc.weight", 100, proto::DTYPE_FLOAT32);
  EXPECT_EQ(testing::To(out, ServerId(0)).size(), 0u) << "servers hear of successes only";
  for (int w = 0; w < 3; ++w) {
    const proto::DeclareReply r = ReplyTo(out, w);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.error(),
              "tensor 'fc.weight' declared with 100 elements by workers 0, 2 and 200 elements "
              "by worker 1");
  }
  Declare(0, "b", 8, proto::DTYPE_FLOAT32);
  Declare(1, "b", 8, proto::DTYPE_FLOAT16);
  out = Declare(2, "b", 8, proto::DTYPE_FLOAT32);
  EXPECT_EQ(ReplyTo(out, 1).error(),
            "tensor 'b' declared with dtype fp32 by workers 0, 2 and dtype fp16 by worker 1");
  Declare(2, "c", 8, proto::DTYPE_FLOAT32);
  Declare(0, "c", 9, proto::DTYPE_FLOAT16);
  out = Declare(1, "c", 8, proto::DTYPE_FLOAT32);
  EXPECT_EQ(ReplyTo(out, 0).error(),
            "tensor 'c' declared with 9 elements of fp16 by worker 0 and 8 elements of fp32 by "
            "workers 1, 2");
  // A failed declaration takes no tensor id.
  Declare(0, "d", 8, proto::DTYPE_FLOAT32);
  Declare(1, "d", 8, proto::DTYPE_FLOAT32);
  out = Declare(2, "d", 8, proto::DTYPE_FLOAT32);
  EXPECT_TRUE(ReplyTo(out, 2).ok());
  EXPECT_EQ(ReplyTo(out, 2).tensor_id(), 0u);
}

TEST_F(DeclarationsTest, TwoWorkersMismatchNamesEachWorker) {
  Start(2, 1);
  Declare(1, "fc.weight", 200, proto::DTYPE_FLOAT32);
  Outbox out = Declare(0, "fc.weight", 100, proto::DTYPE_FLOAT32);
  EXPECT_EQ(ReplyTo(out, 1).error(),
            "tensor 'fc.weight' declared with 100 elements by worker 0 and 200 elements by "
            "worker 1");
}

TEST_F(DeclarationsTest, BadDeclarationsAreRefusedAtOnceToTheSenderAlone) {
  Start(2, 1);
  auto refusal = [&](const Outbox& out, const std::string& id) {
    const proto::DeclareReply r =
        testing::Only(out, id, ControlMessage::kDeclareReply).declare_reply();
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(out.messages().size(), 1u);
    return r.error();
  };
  Outbox out;
  declarations_->Handle(*nodes_->At(proto::ROLE_SERVER, 0), Tensor("x", 1, proto::DTYPE_FLOAT32), 0,
                        &out);
  EXPECT_EQ(refusal(out, ServerId(0)), "only workers declare tensors; server 0 declared 'x'");
  EXPECT_EQ(refusal(Declare(0, "", 1, proto::DTYPE_FLOAT32), WorkerId(0)),
            "tensor name must not be empty");
  EXPECT_EQ(refusal(Declare(0, "empty", 0, proto::DTYPE_FLOAT32), WorkerId(0)),
            "tensor 'empty' declared with 0 elements by worker 0; a tensor needs at least 1 "
            "element");
  EXPECT_EQ(refusal(Declare(0, "odd", 5, 17), WorkerId(0)),
            "tensor 'odd' declared with unknown dtype 17 by worker 0");
  EXPECT_EQ(declarations_->NextDeadline(), std::nullopt) << "nothing refused waits";
}

TEST_F(DeclarationsTest, AShapeAgreedByEveryWorkerCutsPartitionsIntoWholeRows) {
  proto::ClusterConfig config;
  config.set_partition_bytes(4000);  // 1000 fp32 per partition
  Start(2, 2, config);
  auto declare = [&](int worker, const std::string& name, std::vector<int64_t> shape) {
    proto::DeclareTensor d = Tensor(name, 3 * 7 * 11 * 13, proto::DTYPE_FLOAT32);
    d.mutable_shape()->Add(shape.begin(), shape.end());
    Outbox out;
    declarations_->Handle(*nodes_->At(proto::ROLE_WORKER, worker), d, 0, &out);
    return out;
  };
  // A [3 * 7, 11 * 13] layer... as [21, 11, 13]: rows of 143 elements, 6 per partition.
  declare(0, "conv", {21, 11, 13});
  proto::DeclareReply conv = ReplyTo(declare(1, "conv", {21, 11, 13}), 0);
  ASSERT_TRUE(conv.ok()) << conv.error();
  EXPECT_EQ(conv.row_elements(), 143);
  EXPECT_EQ(conv.partition_elements(), 6 * 143);
  EXPECT_EQ(conv.partition_server_size(), 4);  // 21 rows: 6 + 6 + 6 + 3
  // Workers that disagree on the shape (or give none) get a flat tensor, cut as usual.
  declare(0, "mixed", {21, 143});
  proto::DeclareReply mixed = ReplyTo(declare(1, "mixed", {3, 1001}), 1);
  ASSERT_TRUE(mixed.ok());
  EXPECT_EQ(mixed.row_elements(), 0);
  EXPECT_EQ(mixed.partition_elements(), 1000);
  declare(0, "flat", {});
  EXPECT_EQ(ReplyTo(declare(1, "flat", {}), 0).row_elements(), 0);
  // A row longer than a partition: flat too. One dimension: no rows.
  declare(0, "wide", {1, 3003});
  EXPECT_EQ(ReplyTo(declare(1, "wide", {1, 3003}), 0).row_elements(), 0);
  declare(0, "bias", {3003});
  EXPECT_EQ(ReplyTo(declare(1, "bias", {3003}), 0).row_elements(), 0);
  // A shape that does not hold the elements is refused to its sender.
  const proto::DeclareReply bad = ReplyTo(declare(0, "bad", {3, 7}), 0);
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(),
            "tensor 'bad' declared by worker 0 with shape [3, 7], which does not hold 3003 "
            "elements");
  EXPECT_FALSE(ReplyTo(declare(0, "bad2", std::vector<int64_t>(33, 1)), 0).ok());
}

TEST_F(DeclarationsTest, ATensorBeyondTheJobsBytesFailsForEveryWorkerAndTakesNoId) {
  Start(2, 1);
  Declare(0, "huge", int64_t{1} << 60, proto::DTYPE_FLOAT32);
  Outbox out = Declare(1, "huge", int64_t{1} << 60, proto::DTYPE_FLOAT32);
  EXPECT_EQ(testing::Recipients(out), (std::vector<std::string>{WorkerId(0), WorkerId(1)}));
  const proto::DeclareReply r = ReplyTo(out, 0);
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.error(), "tensor 'huge': ")) << r.error();
  EXPECT_TRUE(Contains(r.error(), "ClusterConfig.max_declared_bytes")) << r.error();
  Declare(0, "small", 1, proto::DTYPE_FLOAT32);
  EXPECT_EQ(ReplyTo(Declare(1, "small", 1, proto::DTYPE_FLOAT32), 1).tensor_id(), 0u);
}

TEST_F(DeclarationsTest, ADeclarationNotCompleteInTimeFailsNamingTheMissingWorkers) {
  proto::ClusterConfig config;
  config.set_declare_timeout_ms(300);
  Start(3, 1, config);
  EXPECT_EQ(declarations_->NextDeadline(), std::nullopt);
  Declare(1, "emb", 1000, proto::DTYPE_FLOAT32, /*now_ms=*/1000);
  Declare(1, "other", 10, proto::DTYPE_FLOAT32, /*now_ms=*/1100);
  EXPECT_EQ(declarations_->NextDeadline(), 1300);
  Outbox out;
  declarations_->OnTime(1299, &out);
  EXPECT_TRUE(out.messages().empty());
  declarations_->OnTime(1300, &out);
  EXPECT_EQ(testing::Recipients(out),
            (std::vector<std::string>{WorkerId(0), WorkerId(1), WorkerId(2)}));
  for (int w = 0; w < 3; ++w) {
    const proto::DeclareReply r = ReplyTo(out, w);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.error(),
              "tensor 'emb' was not declared by workers 0, 2 within 0.3 s (declared by worker 1)");
  }
  EXPECT_EQ(declarations_->NextDeadline(), 1400) << "'other' still waits";
  // A late declaration gets the same verdict, alone.
  out = Declare(2, "emb", 1000, proto::DTYPE_FLOAT32, 1500);
  EXPECT_FALSE(ReplyTo(out, 2).ok());
  EXPECT_EQ(out.messages().size(), 1u);
  // The other tensor completes in time.
  Declare(0, "other", 10, proto::DTYPE_FLOAT32, 1350);
  out = Declare(2, "other", 10, proto::DTYPE_FLOAT32, 1399);
  EXPECT_TRUE(ReplyTo(out, 0).ok());
  EXPECT_EQ(ReplyTo(out, 0).tensor_id(), 0u);
  EXPECT_EQ(declarations_->NextDeadline(), std::nullopt);
  Outbox later;
  declarations_->OnTime(5000, &later);
  EXPECT_TRUE(later.messages().empty());
}

// The job's limits: a name too long is refused alone and kept nowhere; tensors beyond the
// declared bytes or the tensor count fail for every worker, before their partitions are placed.
TEST_F(DeclarationsTest, DeclarationsBeyondTheJobsLimitsAreRefused) {
  proto::ClusterConfig config;
  config.set_max_tensor_name_bytes(16);
  config.set_max_tensors(3);
  config.set_max_declared_bytes(int64_t{1} << 30);
  Start(2, 1, config);
  Outbox out = Declare(0, std::string(8 << 20, 'n'), 4, proto::DTYPE_FLOAT32);
  const proto::DeclareReply long_name = ReplyTo(out, 0);
  EXPECT_FALSE(long_name.ok());
  EXPECT_TRUE(Contains(long_name.error(),
                       "is longer than the job's limit of 16 bytes "
                       "(ClusterConfig.max_tensor_name_bytes)"))
      << long_name.error().substr(0, 300);
  EXPECT_LT(long_name.error().size(), 400u) << "the name is cut short in the error";
  ASSERT_EQ(out.refusals().size(), 1u);
  EXPECT_LT(out.refusals()[0].log_line.size(), 600u);

  // 2^40 elements: more than the job's bytes; fails for both workers.
  Declare(0, "huge", int64_t{1} << 40, proto::DTYPE_FLOAT32);
  out = Declare(1, "huge", int64_t{1} << 40, proto::DTYPE_FLOAT32);
  for (int w : {0, 1}) {
    const proto::DeclareReply r = ReplyTo(out, w);
    EXPECT_FALSE(r.ok());
    EXPECT_TRUE(Contains(r.error(),
                         "would bring the job's declared bytes beyond its limit of "
                         "1073741824 (ClusterConfig.max_declared_bytes; 0 declared so far)"))
        << r.error();
    EXPECT_EQ(r.partition_server_size(), 0);
  }
  // Names count against max_tensors, decided or not: "huge" and "a"; "b" fills the count.
  Declare(0, "a", 10, proto::DTYPE_FLOAT32);
  EXPECT_TRUE(ReplyTo(Declare(1, "a", 10, proto::DTYPE_FLOAT32), 0).ok());
  Declare(0, "b", 10, proto::DTYPE_FLOAT32);
  EXPECT_TRUE(ReplyTo(Declare(1, "b", 10, proto::DTYPE_FLOAT32), 0).ok());
  const proto::DeclareReply c = ReplyTo(Declare(0, "c", 10, proto::DTYPE_FLOAT32), 0);
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.error(),
            "tensor 'c': the job has declared 3 tensor names, its limit "
            "(ClusterConfig.max_tensors)");
}

}  // namespace
}  // namespace bytecomp
