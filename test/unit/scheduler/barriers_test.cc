// Barriers without sockets: groups, sequences, and requests that come before the topology.
#include "bytecomp/scheduler/barriers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "protocol_test_util.h"

namespace bytecomp {
namespace {

using proto::ControlMessage;
using testing::Recipients;
using testing::ServerId;
using testing::WorkerId;

proto::BarrierRequest Request(const std::string& group, uint64_t sequence) {
  proto::BarrierRequest r;
  r.set_group(group);
  r.set_sequence(sequence);
  return r;
}

class BarriersTest : public ::testing::Test {
 protected:
  // 2 workers and 1 server, all registered.
  BarriersTest() { testing::RegisterAll(nodes_); }

  const RegisteredNode& Worker(int rank) { return *nodes_.At(proto::ROLE_WORKER, rank); }
  const RegisteredNode& Server(int rank) { return *nodes_.At(proto::ROLE_SERVER, rank); }
  // Asks for `group`/`sequence` as `node`; what the outbox then holds.
  Outbox Ask(const RegisteredNode& node, const std::string& group, uint64_t sequence) {
    Outbox out;
    barriers_.Handle(node, Request(group, sequence), &out);
    return out;
  }
  static void ExpectReleased(const Outbox& out, const std::vector<std::string>& ids,
                             const std::string& group, uint64_t sequence) {
    std::vector<std::string> got = Recipients(out);
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, ids);
    for (const OutgoingControl& m : out.messages()) {
      ASSERT_TRUE(m.message.has_barrier_release()) << m.message.ShortDebugString();
      EXPECT_EQ(m.message.barrier_release().group(), group);
      EXPECT_EQ(m.message.barrier_release().sequence(), sequence);
    }
  }

  NodeTable nodes_{2, 1};
  Barriers barriers_{nodes_};
};

TEST_F(BarriersTest, ReleasesEveryMemberOnceTheLastArrives) {
  EXPECT_TRUE(Ask(Worker(0), "all", 7).messages().empty());
  EXPECT_TRUE(Ask(Server(0), "all", 7).messages().empty());
  ExpectReleased(Ask(Worker(1), "all", 7), {"s0", "w0", "w1"}, "all", 7);

  EXPECT_TRUE(Ask(Worker(1), "workers", 1).messages().empty());
  ExpectReleased(Ask(Worker(0), "workers", 1), {"w0", "w1"}, "workers", 1);
  ExpectReleased(Ask(Server(0), "servers", 1), {"s0"}, "servers", 1);
}

TEST_F(BarriersTest, SequencesAndGroupsDoNotMix) {
  EXPECT_TRUE(Ask(Worker(0), "workers", 2).messages().empty());
  EXPECT_TRUE(Ask(Worker(1), "workers", 3).messages().empty());
  EXPECT_TRUE(Ask(Worker(1), "all", 2).messages().empty());
  ExpectReleased(Ask(Worker(1), "workers", 2), {"w0", "w1"}, "workers", 2);
  ExpectReleased(Ask(Worker(0), "workers", 3), {"w0", "w1"}, "workers", 3);
}

TEST_F(BarriersTest, ARepeatedRequestForAReleasedSequenceReleasesThatNodeAlone) {
  Ask(Worker(0), "workers", 1);
  Ask(Worker(1), "workers", 1);
  ExpectReleased(Ask(Worker(1), "workers", 1), {"w1"}, "workers", 1);
}

TEST_F(BarriersTest, UnknownGroupsAndNonMembersGetAnError) {
  Outbox out = Ask(Server(0), "workers", 9);
  EXPECT_EQ(testing::Only(out, "s0", ControlMessage::kError).error().message(),
            "server 0 is not a member of barrier group 'workers'");
  out = Ask(Worker(0), "everyone", 1);
  EXPECT_EQ(testing::Only(out, "w0", ControlMessage::kError).error().message(),
            "unknown barrier group 'everyone'; valid: workers, servers, all");
  // The refused requests count for nothing.
  Ask(Worker(0), "workers", 9);
  ExpectReleased(Ask(Worker(1), "workers", 9), {"w0", "w1"}, "workers", 9);
}

TEST(BarriersBeforeTopologyTest, RequestsWaitUntilEveryNodeRegistered) {
  NodeTable nodes(2, 1);
  Barriers barriers(nodes);
  testing::AddWorker(nodes, 0);
  testing::AddWorker(nodes, 1);
  Outbox out;
  barriers.Handle(*nodes.At(proto::ROLE_WORKER, 0), Request("workers", 1), &out);
  barriers.Handle(*nodes.At(proto::ROLE_WORKER, 1), Request("workers", 1), &out);
  barriers.Handle(*nodes.At(proto::ROLE_WORKER, 1), Request("all", 1), &out);
  barriers.ReleaseWaiting(&out);
  EXPECT_TRUE(out.messages().empty()) << "the server may still be missing";
  testing::AddServer(nodes, 0);
  barriers.ReleaseWaiting(&out);
  std::vector<std::string> got = Recipients(out);
  EXPECT_EQ(got, (std::vector<std::string>{WorkerId(0), WorkerId(1)}));
  for (const OutgoingControl& m : out.messages()) {
    EXPECT_EQ(m.message.barrier_release().group(), "workers");
  }
  // "all" still waits for w0 and s0.
  Outbox more;
  barriers.Handle(*nodes.At(proto::ROLE_SERVER, 0), Request("all", 1), &more);
  barriers.Handle(*nodes.At(proto::ROLE_WORKER, 0), Request("all", 1), &more);
  std::vector<std::string> all = Recipients(more);
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<std::string>{ServerId(0), WorkerId(0), WorkerId(1)}));
}

}  // namespace
}  // namespace bytecomp
