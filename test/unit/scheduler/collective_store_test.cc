// The collectives' rendezvous store without sockets (scheduler/.../collective_store.h): a get
// answered at once or when its key is set, every bound, and the strategy keeper's refusal of
// collective entries the job cannot run.
#include "bytecomp/scheduler/collective_store.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bytecomp/scheduler/strategy_keeper.h"
#include "protocol_test_util.h"

namespace bytecomp {
namespace {

using proto::ControlMessage;
using testing::WorkerId;

class CollectiveStoreTest : public ::testing::Test {
 protected:
  CollectiveStoreTest() { testing::RegisterAll(nodes_, {"a", "b", "c"}); }
  static proto::ClusterConfig WithCollectives() {
    proto::ClusterConfig config;
    config.set_collectives(true);
    return testing::JobConfig(3, 1, config);
  }
  Outbox Set(int rank, const std::string& key, const std::string& value) {
    proto::CollectiveStoreSet set;
    set.set_key(key);
    set.set_value(value);
    Outbox out;
    store_.HandleSet(*nodes_.At(proto::ROLE_WORKER, rank), set, &out);
    return out;
  }
  Outbox Get(int rank, const std::string& key) {
    proto::CollectiveStoreGet get;
    get.set_key(key);
    Outbox out;
    store_.HandleGet(*nodes_.At(proto::ROLE_WORKER, rank), get, &out);
    return out;
  }
  static std::string Refusal(const Outbox& out, const std::string& id) {
    EXPECT_EQ(out.refusals().size(), 1u);
    return testing::Only(out, id, ControlMessage::kError).error().message();
  }

  proto::ClusterConfig config_ = WithCollectives();
  NodeTable nodes_{3, 1};
  CollectiveStore store_{config_, nodes_};
};

TEST_F(CollectiveStoreTest, AGetIsAnsweredAtOnceOrWhenItsKeyIsSet) {
  EXPECT_TRUE(testing::Recipients(Get(1, "0")).empty());  // waits
  EXPECT_TRUE(testing::Recipients(Get(2, "0")).empty());
  Outbox out = Set(0, "0", "addresses of 0");
  EXPECT_EQ(testing::Recipients(out), (std::vector<std::string>{WorkerId(1), WorkerId(2)}));
  EXPECT_EQ(testing::Only(out, WorkerId(1), ControlMessage::kCollectiveStoreValue)
                .collective_store_value()
                .value(),
            "addresses of 0");
  out = Get(2, "0");
  EXPECT_EQ(testing::Only(out, WorkerId(2), ControlMessage::kCollectiveStoreValue)
                .collective_store_value()
                .key(),
            "0");
  // Its owner may set it again; another worker may not.
  EXPECT_TRUE(Set(0, "0", "again").refusals().empty());
  EXPECT_NE(Refusal(Set(1, "0", "mine"), WorkerId(1)).find("was set by worker 0"),
            std::string::npos);
}

TEST_F(CollectiveStoreTest, BoundsAreRefusedNamingThem) {
  EXPECT_NE(Refusal(Set(0, std::string(300, 'k'), "v"), WorkerId(0)).find("a key of 300 bytes"),
            std::string::npos);
  EXPECT_NE(
      Refusal(Set(0, "big", std::string(CollectiveStore::kMaxValueBytes + 1, 'v')), WorkerId(0))
          .find("a value of"),
      std::string::npos);
  for (int i = 0; i < CollectiveStore::kMaxKeysPerWorker; ++i) {
    EXPECT_TRUE(Set(1, "k" + std::to_string(i), "v").refusals().empty());
  }
  EXPECT_NE(Refusal(Set(1, "one more", "v"), WorkerId(1)).find("the most one worker may"),
            std::string::npos);
  for (int i = 0; i < CollectiveStore::kMaxWaitingPerWorker; ++i) {
    EXPECT_TRUE(Get(2, "w" + std::to_string(i)).refusals().empty());
  }
  EXPECT_NE(Refusal(Get(2, "w-last"), WorkerId(2)).find("the most one worker may"),
            std::string::npos);
  EXPECT_LE(store_.keys(), 1u + CollectiveStore::kMaxKeysPerWorker);
}

TEST(CollectiveStoreJobTest, AJobWithoutCollectivesRefusesTheStore) {
  proto::ClusterConfig config = testing::JobConfig(2, 1, proto::ClusterConfig());
  NodeTable nodes{2, 1};
  testing::RegisterAll(nodes, {"a", "b"});
  CollectiveStore store{config, nodes};
  proto::CollectiveStoreSet set;
  set.set_key("0");
  Outbox out;
  store.HandleSet(*nodes.At(proto::ROLE_WORKER, 0), set, &out);
  ASSERT_EQ(out.refusals().size(), 1u);
}

proto::Strategy WithScheme(proto::Scheme scheme, bool allow_unencrypted) {
  proto::Strategy s;
  s.add_tensors()->set_name_pattern("conv*");
  proto::TensorStrategy* t = s.add_tensors();
  t->set_name_pattern("fc.*");
  t->set_scheme(scheme);
  s.set_allow_unencrypted_collectives(allow_unencrypted);
  return s;
}

TEST(StrategyKeeperJobTest, CollectiveEntriesNeedCollectivesAndOnAKeyedJobConsent) {
  proto::ClusterConfig plain;
  EXPECT_TRUE(StrategyKeeper(plain).JobRefuses(WithScheme(proto::SCHEME_PS, false)).ok());
  absl::Status off = StrategyKeeper(plain).JobRefuses(WithScheme(proto::SCHEME_ALLREDUCE, false));
  EXPECT_NE(off.message().find("tensors[1] ('fc.*') asks for SCHEME_ALLREDUCE"), std::string::npos)
      << off;
  EXPECT_NE(off.message().find("collectives is off"), std::string::npos) << off;

  proto::ClusterConfig keyed;
  keyed.set_collectives(true);
  keyed.set_key_file("/some/cluster.key");
  absl::Status refused =
      StrategyKeeper(keyed).JobRefuses(WithScheme(proto::SCHEME_ALLGATHER, false));
  EXPECT_NE(refused.message().find("tensors[1] ('fc.*') asks for SCHEME_ALLGATHER"),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.message().find("allow_unencrypted_collectives"), std::string::npos);
  EXPECT_TRUE(StrategyKeeper(keyed).JobRefuses(WithScheme(proto::SCHEME_ALLGATHER, true)).ok());
  proto::ClusterConfig hierarchical;
  hierarchical.set_collectives(true);
  hierarchical.set_hierarchical(true);
  EXPECT_NE(StrategyKeeper(hierarchical)
                .JobRefuses(WithScheme(proto::SCHEME_ALLREDUCE, false))
                .message()
                .find("hierarchical"),
            std::string::npos);
  // The update path refuses it too, and the current strategy stays.
  StrategyKeeper keeper(keyed);
  ASSERT_TRUE(keeper.LoadInitial("").ok());
  EXPECT_FALSE(keeper.BeginUpdate(WithScheme(proto::SCHEME_ALLREDUCE, false)).ok());
  EXPECT_FALSE(keeper.update_pending());
}

// Fusion groups: refused in a hierarchical job; set once (an update to a job without any may
// set them, as --strategy=auto's plan does, unless a member keeps error-feedback memory) and
// then fixed (an update that changes them is refused, naming why; one that keeps them goes).
TEST(StrategyKeeperJobTest, FusionGroupsAreFlatOnlySetOnceAndThenFixed) {
  proto::Strategy fused;
  proto::FusionGroup* g = fused.add_fusion_groups();
  g->set_name("fused.0");
  g->add_tensors("b0");
  g->add_tensors("b1");
  proto::ClusterConfig hierarchical;
  hierarchical.set_hierarchical(true);
  absl::Status refused = StrategyKeeper(hierarchical).JobRefuses(fused);
  EXPECT_NE(refused.message().find("fusion_groups[0] ('fused.0'): the job is hierarchical"),
            std::string::npos)
      << refused;
  EXPECT_TRUE(StrategyKeeper(proto::ClusterConfig()).JobRefuses(fused).ok());

  // A member with error-feedback memory under the strategy in force: refused.
  {
    StrategyKeeper keeper{proto::ClusterConfig()};
    ASSERT_TRUE(keeper.LoadInitial("").ok());
    proto::Strategy with_memory;
    proto::TensorStrategy* t = with_memory.add_tensors();
    t->set_name_pattern("b*");
    t->mutable_push_codec()->set_name("topk");
    t->mutable_push_codec()->set_memory("residual");
    absl::StatusOr<proto::ControlMessage> prepare = keeper.BeginUpdate(with_memory);
    ASSERT_TRUE(prepare.ok()) << prepare.status();
    proto::StrategyPrepareReply reply;
    reply.set_version(prepare->strategy_prepare().version());
    ASSERT_TRUE(keeper.OnPrepareReply(0, reply, 1).has_value());
    absl::StatusOr<proto::ControlMessage> dropped = keeper.BeginUpdate(fused);
    ASSERT_FALSE(dropped.ok());
    EXPECT_NE(dropped.status().message().find(
                  "its member 'b0' has error-feedback memory under the job's strategy (entry "
                  "'b*')"),
              std::string::npos)
        << dropped.status();
  }

  StrategyKeeper keeper{proto::ClusterConfig()};
  ASSERT_TRUE(keeper.LoadInitial("").ok());  // no groups
  absl::StatusOr<proto::ControlMessage> set = keeper.BeginUpdate(fused);
  ASSERT_TRUE(set.ok()) << set.status();
  proto::StrategyPrepareReply reply;
  reply.set_version(set->strategy_prepare().version());
  reply.set_highest_started_round(4);
  std::optional<proto::ControlMessage> commit = keeper.OnPrepareReply(0, reply, 1);
  ASSERT_TRUE(commit.has_value());
  EXPECT_EQ(commit->strategy_commit().strategy().fusion_groups_size(), 1);
  EXPECT_EQ(commit->strategy_commit().strategy().first_round(), 6u);

  proto::Strategy other = fused;
  other.mutable_fusion_groups(0)->add_tensors("b2");
  absl::StatusOr<proto::ControlMessage> changed = keeper.BeginUpdate(other);
  ASSERT_FALSE(changed.ok());
  EXPECT_NE(changed.status().message().find("fusion_groups differ"), std::string::npos)
      << changed.status();
  EXPECT_FALSE(keeper.BeginUpdate(proto::Strategy()).ok()) << "dropping them is a change too";
  EXPECT_FALSE(keeper.update_pending());
  EXPECT_TRUE(keeper.BeginUpdate(fused).ok());  // the same: goes
}

}  // namespace
}  // namespace bytecomp
