// The local-communicator relay without sockets: refusals, and one relay per machine and kind.
#include "bytecomp/scheduler/local_relay.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "protocol_test_util.h"

namespace bytecomp {
namespace {

using proto::ControlMessage;
using testing::WorkerId;

proto::LocalCommunicator Comm(const std::string& kind, const std::string& id) {
  proto::LocalCommunicator c;
  c.set_kind(kind);
  c.set_id(id);
  return c;
}

class LocalRelayTest : public ::testing::Test {
 protected:
  // A hierarchical job of 5 workers: hostA has workers 0, 2, 4; hostB 1, 3; one server.
  LocalRelayTest() {
    proto::ClusterConfig config;
    config.set_hierarchical(true);
    config_ = testing::JobConfig(5, 1, config);
    testing::RegisterAll(nodes_, {"hostA", "hostB", "hostA", "hostB", "hostA"});
  }
  Outbox Send(const RegisteredNode& node, const proto::LocalCommunicator& comm) {
    Outbox out;
    relay_.Handle(node, comm, &out);
    return out;
  }
  Outbox SendFromWorker(int rank, const proto::LocalCommunicator& comm) {
    return Send(*nodes_.At(proto::ROLE_WORKER, rank), comm);
  }
  // The refusal `out` holds for `id`: the error reply, also counted as a bad message.
  static std::string Refusal(const Outbox& out, const std::string& id) {
    EXPECT_EQ(out.refusals().size(), 1u);
    return testing::Only(out, id, ControlMessage::kError).error().message();
  }

  proto::ClusterConfig config_;
  NodeTable nodes_{5, 1};
  LocalRelay relay_{config_, nodes_};
};

TEST_F(LocalRelayTest, RelaysEachKindOnceToTheOtherLocalRanksOfTheRootsMachine) {
  Outbox out = SendFromWorker(0, Comm("host", "tcp://127.0.0.1:5555"));
  EXPECT_EQ(testing::Recipients(out), (std::vector<std::string>{WorkerId(2), WorkerId(4)}));
  const proto::LocalCommunicator relayed =
      testing::Only(out, WorkerId(2), ControlMessage::kLocalCommunicator).local_communicator();
  EXPECT_EQ(relayed.kind(), "host");
  EXPECT_EQ(relayed.id(), "tcp://127.0.0.1:5555");
  EXPECT_TRUE(out.refusals().empty());
  // The NCCL id is a kind of its own.
  const std::string nccl_id(128, '\x2a');
  out = SendFromWorker(0, Comm("nccl", nccl_id));
  EXPECT_EQ(testing::Recipients(out), (std::vector<std::string>{WorkerId(2), WorkerId(4)}));
  EXPECT_EQ(
      testing::Only(out, WorkerId(4), ControlMessage::kLocalCommunicator).local_communicator().id(),
      nccl_id);
  // A repeat is ignored; another id of the same kind for the same machine is refused.
  EXPECT_TRUE(SendFromWorker(0, Comm("host", "tcp://127.0.0.1:5555")).messages().empty());
  out = SendFromWorker(0, Comm("host", "tcp://127.0.0.1:6666"));
  EXPECT_EQ(Refusal(out, WorkerId(0)),
            "LocalCommunicator refused: machine 'hostA' already has a different host local "
            "communicator");
  EXPECT_EQ(out.refusals()[0].log_line,
            "LocalCommunicator from worker 0 refused: machine 'hostA' already has a different "
            "host local communicator");
  out = SendFromWorker(0, Comm("nccl", std::string(128, '\x2b')));
  EXPECT_TRUE(testing::Contains(Refusal(out, WorkerId(0)), "different nccl local communicator"));
  // Machine B's root relays to its one other local rank.
  out = SendFromWorker(1, Comm("nccl", std::string(128, '\x07')));
  EXPECT_EQ(testing::Recipients(out), (std::vector<std::string>{WorkerId(3)}));
}

TEST_F(LocalRelayTest, RefusesWhatOnlyALocalRootMaySendAndBadIds) {
  EXPECT_EQ(Refusal(SendFromWorker(2, Comm("host", "tcp://127.0.0.1:5555")), WorkerId(2)),
            "LocalCommunicator refused: worker 2 is local rank 1 of 3 on machine 'hostA'; only "
            "the local root of a machine with more than one worker sends one");
  EXPECT_EQ(Refusal(SendFromWorker(0, Comm("nccl", "12345")), WorkerId(0)),
            "LocalCommunicator refused: a nccl id of 5 bytes (expected 128)");
  EXPECT_EQ(Refusal(SendFromWorker(0, Comm("gloo", "x")), WorkerId(0)),
            "LocalCommunicator refused: unknown kind 'gloo' (valid: host, nccl)");
  EXPECT_EQ(Refusal(SendFromWorker(0, Comm("host", "")), WorkerId(0)),
            "LocalCommunicator refused: a host id of 0 bytes (expected 1 to 1024)");
  EXPECT_EQ(Refusal(SendFromWorker(0, Comm("host", std::string(1025, 'x'))), WorkerId(0)),
            "LocalCommunicator refused: a host id of 1025 bytes (expected 1 to 1024)");
  EXPECT_EQ(Refusal(Send(*nodes_.At(proto::ROLE_SERVER, 0), Comm("host", "x")), "s0"),
            "LocalCommunicator refused: server 0 is not a worker");
  // None of them was kept: the root's first good id is relayed.
  EXPECT_EQ(SendFromWorker(0, Comm("host", "tcp://127.0.0.1:5555")).messages().size(), 2u);
}

TEST(LocalRelayJobTest, RefusesInAFlatJobAndBeforeTheTopology) {
  const proto::ClusterConfig flat = testing::JobConfig(2, 1);
  NodeTable nodes(2, 1);
  testing::RegisterAll(nodes);
  LocalRelay flat_relay(flat, nodes);
  Outbox out;
  flat_relay.Handle(*nodes.At(proto::ROLE_WORKER, 0), Comm("host", "tcp://127.0.0.1:5555"), &out);
  EXPECT_EQ(testing::Only(out, WorkerId(0), ControlMessage::kError).error().message(),
            "LocalCommunicator refused: the job is not hierarchical "
            "(ClusterConfig.hierarchical)");

  proto::ClusterConfig config;
  config.set_hierarchical(true);
  const proto::ClusterConfig hierarchical = testing::JobConfig(2, 1, config);
  NodeTable partial(2, 1);
  testing::AddWorker(partial, 0);
  LocalRelay early_relay(hierarchical, partial);
  Outbox early;
  early_relay.Handle(*partial.At(proto::ROLE_WORKER, 0), Comm("host", "x"), &early);
  EXPECT_EQ(testing::Only(early, WorkerId(0), ControlMessage::kError).error().message(),
            "LocalCommunicator refused: sent before the topology");
}

}  // namespace
}  // namespace bytecomp
