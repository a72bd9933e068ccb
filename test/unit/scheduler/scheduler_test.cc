// The scheduler driven in-process (Run on a thread) by test DEALER sockets on loopback.
#include "bytecomp/scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <future>
#include <memory>
#include <set>
#include <thread>

#include "bytecomp/common/config.h"
#include "bytecomp/common/control_parts.h"
#include "bytecomp/common/scheduler_client.h"
#include "bytecomp/common/socket_limits.h"
#include "bytecomp/common/socket_security.h"
#include "bytecomp/common/transport.h"
#include "protocol_test_util.h"
#include "test_node.h"

namespace bytecomp {
namespace {

using proto::ControlMessage;
using proto::ROLE_SERVER;
using proto::ROLE_WORKER;
using testing::Contains;
using testing::TestNode;

class SchedulerTest : public ::testing::Test {
 protected:
  void Start(int workers, int servers, proto::ClusterConfig overrides = {},
             const std::string& strategy_path = "", int port = 0) {
    proto::ClusterConfig config = overrides;
    config.set_scheduler_address("127.0.0.1:1");  // the port comes from options.port
    config.set_num_workers(workers);
    config.set_num_servers(servers);
    SchedulerOptions options;
    options.config = WithClusterDefaults(config);
    options.bind_host = "127.0.0.1";
    options.port = port;
    options.shutdown_linger_ms = 200;
    options.strategy_path = strategy_path;
    absl::StatusOr<std::unique_ptr<Scheduler>> created = Scheduler::Create(options);
    ASSERT_TRUE(created.ok()) << created.status();
    scheduler_ = std::move(*created);
    result_ = std::async(std::launch::async, [this] { return scheduler_->Run(); });
  }
  void TearDown() override {
    if (scheduler_ == nullptr) return;
    scheduler_->Stop();
    if (result_.valid()) result_.wait();
    scheduler_.reset();
  }
  std::unique_ptr<TestNode> Node() {
    return std::make_unique<TestNode>(context_, scheduler_->port());
  }
  // Waits for Run to return.
  absl::Status Result(int timeout_ms = 3000) {
    if (result_.wait_for(std::chrono::milliseconds(timeout_ms)) != std::future_status::ready) {
      return absl::DeadlineExceededError("Run did not return");
    }
    return result_.get();
  }
  bool Running(int wait_ms = 0) {
    return result_.valid() &&
           result_.wait_for(std::chrono::milliseconds(wait_ms)) != std::future_status::ready;
  }

  zmq::context_t context_{1};
  std::unique_ptr<Scheduler> scheduler_;
  std::future<absl::Status> result_;
};

TEST_F(SchedulerTest, AssignsRequestedAndFreeRanksAndSendsTopology) {
  proto::ClusterConfig config;
  config.set_partition_bytes(1 << 16);
  Start(3, 2, config);
  auto s_a = Node(), s_b = Node(), w_x = Node(), w_y = Node(), w_z = Node();
  s_a->Register(ROLE_SERVER, 1, "hostS", "tcp://10.0.0.1:7001");
  s_b->Register(ROLE_SERVER, -1, "hostS", "tcp://10.0.0.2:7002");  // lowest free: 0
  w_x->Register(ROLE_WORKER, 2, "hostA");
  w_y->Register(ROLE_WORKER, -1, "hostB");  // 0
  w_y->Sync();
  // Not complete yet: nobody hears anything.
  s_a->ExpectNothing(150);
  w_z->Register(ROLE_WORKER, -1, "hostA");  // 1

  struct Expected {
    TestNode* node;
    int rank, local_rank, local_size;
  };
  for (const Expected& e :
       {Expected{w_y.get(), 0, 0, 1}, Expected{w_z.get(), 1, 0, 2}, Expected{w_x.get(), 2, 1, 2},
        Expected{s_b.get(), 0, 0, 0}, Expected{s_a.get(), 1, 0, 0}}) {
    const proto::Topology t = e.node->Expect(ControlMessage::kTopology).topology();
    EXPECT_EQ(t.your_rank(), e.rank);
    EXPECT_EQ(t.num_workers(), 3);
    EXPECT_EQ(t.num_servers(), 2);
    ASSERT_EQ(t.servers_size(), 2);
    EXPECT_EQ(t.servers(0).rank(), 0);
    EXPECT_EQ(t.servers(0).data_address(), "tcp://10.0.0.2:7002");
    EXPECT_EQ(t.servers(1).rank(), 1);
    EXPECT_EQ(t.servers(1).data_address(), "tcp://10.0.0.1:7001");
    EXPECT_EQ(t.config().partition_bytes(), 1 << 16);
    EXPECT_EQ(t.config().heartbeat_timeout_ms(), 5000);  // defaults filled in
    EXPECT_EQ(t.local_rank(), e.local_rank) << "rank " << e.rank;
    EXPECT_EQ(t.local_size(), e.local_size) << "rank " << e.rank;
  }
  EXPECT_TRUE(Running());
}

TEST_F(SchedulerTest, BarrierReleasesOnlyWhenEveryMemberArrived) {
  Start(2, 1);
  auto w0 = Node(), w1 = Node(), s0 = Node();
  w0->Register(ROLE_WORKER, 0);
  w1->Register(ROLE_WORKER, 1);
  // A request before the job is complete waits for the topology.
  w0->Barrier("workers", 1);
  w1->Barrier("workers", 1);
  w0->ExpectNothing(100);
  s0->Register(ROLE_SERVER, 0);
  for (TestNode* n : {w0.get(), w1.get(), s0.get()}) n->Expect(ControlMessage::kTopology);
  for (TestNode* n : {w0.get(), w1.get()}) {
    const proto::BarrierRelease r = n->Expect(ControlMessage::kBarrierRelease).barrier_release();
    EXPECT_EQ(r.group(), "workers");
    EXPECT_EQ(r.sequence(), 1u);
  }
  s0->ExpectNothing(50);

  w0->Barrier("all", 7);
  s0->Barrier("all", 7);
  w0->ExpectNothing(100);  // w1 not there yet
  w1->Barrier("all", 7);
  for (TestNode* n : {w0.get(), w1.get(), s0.get()}) {
    const proto::BarrierRelease r = n->Expect(ControlMessage::kBarrierRelease).barrier_release();
    EXPECT_EQ(r.group(), "all");
    EXPECT_EQ(r.sequence(), 7u);
  }
  s0->Barrier("everyone", 1);
  EXPECT_TRUE(Contains(s0->ExpectError(), "unknown barrier group 'everyone'"));
}

// Registers W workers and S servers and consumes their topologies.
std::vector<std::unique_ptr<TestNode>> RegisterAll(std::function<std::unique_ptr<TestNode>()> make,
                                                   int workers, int servers) {
  std::vector<std::unique_ptr<TestNode>> nodes;
  for (int i = 0; i < workers; ++i) {
    nodes.push_back(make());
    nodes.back()->Register(ROLE_WORKER, i);
  }
  for (int i = 0; i < servers; ++i) {
    nodes.push_back(make());
    nodes.back()->Register(ROLE_SERVER, i, "hostA", absl::StrCat("tcp://127.0.0.1:", 7000 + i));
  }
  for (auto& n : nodes) n->Expect(ControlMessage::kTopology);
  return nodes;
}

TEST_F(SchedulerTest, DeclarationReachesTheServersAndEveryWorker) {
  proto::ClusterConfig config;
  config.set_partition_bytes(64);  // 16 fp32 elements per partition
  Start(2, 2, config);
  auto nodes = RegisterAll([this] { return Node(); }, 2, 2);
  TestNode& w0 = *nodes[0];
  TestNode& w1 = *nodes[1];
  w0.Declare("conv1.weight", 40, proto::DTYPE_FLOAT32);
  w0.ExpectNothing(100);  // waits for worker 1
  w1.Declare("conv1.weight", 40, proto::DTYPE_FLOAT32);
  for (auto& n : nodes) {
    const proto::DeclareReply r = n->Expect(ControlMessage::kDeclareReply).declare_reply();
    EXPECT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r.name(), "conv1.weight");
    EXPECT_EQ(r.tensor_id(), 0u);
    EXPECT_EQ(std::vector<int32_t>(r.partition_server().begin(), r.partition_server().end()),
              std::vector<int32_t>({0, 1, 0}));
  }
  // A bad declaration is answered to its sender alone.
  w0.Declare("odd", 5, 17);
  EXPECT_TRUE(Contains(w0.Expect(ControlMessage::kDeclareReply).declare_reply().error(),
                       "unknown dtype 17"));
  w1.ExpectNothing(50);
}

TEST_F(SchedulerTest, DeclarationTimesOutNamingTheMissingWorkers) {
  proto::ClusterConfig config;
  config.set_declare_timeout_ms(300);
  Start(3, 1, config);
  auto nodes = RegisterAll([this] { return Node(); }, 3, 1);
  nodes[1]->Declare("emb", 1000, proto::DTYPE_FLOAT32);
  for (int w = 0; w < 3; ++w) {
    const proto::DeclareReply r =
        nodes[w]->Expect(ControlMessage::kDeclareReply, 1500).declare_reply();
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.error(),
              "tensor 'emb' was not declared by workers 0, 2 within 0.3 s (declared by worker 1)");
  }
  // A late declaration gets the same verdict.
  nodes[2]->Declare("emb", 1000, proto::DTYPE_FLOAT32);
  EXPECT_FALSE(nodes[2]->Expect(ControlMessage::kDeclareReply).declare_reply().ok());
}

TEST_F(SchedulerTest, SilentNodeIsReportedToTheOthersAndTheJobStops) {
  proto::ClusterConfig config;
  config.set_heartbeat_interval_ms(50);
  config.set_heartbeat_timeout_ms(300);
  Start(2, 1, config);
  auto nodes = RegisterAll([this] { return Node(); }, 2, 1);
  const int64_t start = MonotonicMs();
  // Worker 0 and server 0 keep beating; worker 1 is silent.
  std::vector<ControlMessage> w0_got, s0_got;
  int64_t failed_at = -1;
  while (MonotonicMs() - start < 1500 && (w0_got.size() < 2 || s0_got.size() < 2)) {
    nodes[0]->Heartbeat();
    nodes[2]->Heartbeat();
    for (auto [node, got] : {std::pair{nodes[0].get(), &w0_got}, {nodes[2].get(), &s0_got}}) {
      while (std::optional<ControlMessage> m = node->Recv(0)) {
        if (failed_at < 0) failed_at = MonotonicMs() - start;
        got->push_back(*m);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_GE(failed_at, 0) << "no NodeFailed within 1.5 s";
  EXPECT_GE(failed_at, 150);  // not before the timeout (less the set-up time)
  EXPECT_LE(failed_at, 800);  // timeout 300 ms plus scheduling slack on a busy machine
  for (const auto* got : {&w0_got, &s0_got}) {
    ASSERT_EQ(got->size(), 2u);
    ASSERT_TRUE((*got)[0].has_node_failed()) << (*got)[0].ShortDebugString();
    const proto::NodeFailed& nf = (*got)[0].node_failed();
    EXPECT_EQ(nf.node().role(), ROLE_WORKER);
    EXPECT_EQ(nf.node().rank(), 1);
    EXPECT_EQ(nf.reason(), "missed heartbeats for 0.3 s");
    ASSERT_TRUE((*got)[1].has_shutdown());
    EXPECT_TRUE(Contains((*got)[1].shutdown().reason(), "worker 1 failed"));
  }
  const absl::Status status = Result();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
}

TEST_F(SchedulerTest, WorkersDoneShutsDownServersAndEndsCleanly) {
  Start(2, 2);
  auto nodes = RegisterAll([this] { return Node(); }, 2, 2);
  ControlMessage done;
  done.mutable_worker_done();
  nodes[0]->Send(done);
  nodes[0]->Send(done);  // a repeat does not count twice
  nodes[2]->ExpectNothing(100);
  EXPECT_TRUE(Running());
  nodes[1]->Send(done);
  for (int s : {2, 3}) {
    EXPECT_EQ(nodes[s]->Expect(ControlMessage::kShutdown).shutdown().reason(),
              "every worker is done");
  }
  EXPECT_TRUE(Result().ok());
  nodes[0]->ExpectNothing(50);  // workers are not told: they are leaving already
}

TEST_F(SchedulerTest, ShutdownFromANodeIsForwardedAndFailsTheJob) {
  Start(2, 1);
  auto nodes = RegisterAll([this] { return Node(); }, 2, 1);
  ControlMessage shutdown;
  shutdown.mutable_shutdown()->set_reason("CUDA out of memory");
  nodes[1]->Send(shutdown);
  for (int n : {0, 2}) {
    EXPECT_EQ(nodes[n]->Expect(ControlMessage::kShutdown).shutdown().reason(),
              "worker 1 asked to shut the job down: CUDA out of memory");
  }
  const absl::Status status = Result();
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
}

TEST_F(SchedulerTest, MalformedFramesGetErrorRepliesAndServingContinues) {
  Start(1, 1);
  auto a = Node();
  a->SendRaw({std::string("\xff\xff\xff\xff", 4)});
  EXPECT_TRUE(Contains(a->ExpectError(), "malformed bytecomp.proto.ControlMessage frame"));
  a->SendRaw({"x", "y"});
  EXPECT_TRUE(Contains(a->ExpectError(), "expected one frame holding a ControlMessage, got 2"));
  a->SendRaw({""});  // parses, but carries no body
  EXPECT_TRUE(Contains(a->ExpectError(), "has not registered"));
  a->Heartbeat();
  EXPECT_TRUE(Contains(a->ExpectError(), "received heartbeat from a node that has not registered"));
  // Still serving: a registration completes the job.
  auto s = Node();
  a->Register(ROLE_WORKER, -1);
  s->Register(ROLE_SERVER, -1);
  a->Expect(ControlMessage::kTopology);
  s->Expect(ControlMessage::kTopology);
  a->SendRaw({""});  // no body, and no token
  EXPECT_TRUE(Contains(a->ExpectError(), "does not carry the token that worker 0 registered with"));
  a->Send(ControlMessage());
  EXPECT_TRUE(Contains(a->ExpectError(), "empty ControlMessage"));
  ControlMessage topology;
  topology.mutable_topology()->set_your_rank(3);
  a->Send(topology);
  EXPECT_TRUE(Contains(a->ExpectError(), "does not accept topology"));
  ControlMessage error;
  error.mutable_error()->set_message("confused");
  a->Send(error);
  a->ExpectNothing(100);  // errors are logged, never answered
  a->Barrier("all", 1);
  s->Barrier("all", 1);
  a->Expect(ControlMessage::kBarrierRelease);
  s->Expect(ControlMessage::kBarrierRelease);
  EXPECT_TRUE(Running());
}

// The scheduler takes frames of at most 1 MiB from anyone: a larger one (here from a peer
// that has not registered) never arrives. A registered node's larger message comes in parts;
// parts that do not follow each other are refused naming why, and the node goes on.
TEST_F(SchedulerTest, FramesAreSmallAndLargerMessagesComeInPartsOnlyFromNodes) {
  Start(1, 1);
  auto stranger = Node();
  stranger->SendRaw({std::string(kMaxControlFrameBytes + 1, 'x')});
  auto other = Node();
  other->SendRaw({std::string(kMaxControlFrameBytes - 1024, '\xff')});  // arrives: refused
  EXPECT_TRUE(Contains(other->ExpectError(), "malformed"));
  ControlMessage part;
  part.mutable_part()->set_count(2);
  other->Send(part);
  EXPECT_TRUE(Contains(other->ExpectError(), "has not registered"));

  auto w = Node(), s = Node();
  w->Register(ROLE_WORKER, -1);
  s->Register(ROLE_SERVER, -1);
  w->Expect(ControlMessage::kTopology);
  s->Expect(ControlMessage::kTopology);
  ControlMessage large;
  for (int g = 0; g < 30000; ++g) {
    proto::BarrierRelease* r = large.mutable_rejoin_report()->add_released();
    r->set_group(absl::StrCat("group", g));
    r->set_sequence(1);
  }
  const std::vector<ControlMessage> parts = SplitControlMessage(large, 5);
  ASSERT_GE(parts.size(), 2u);
  w->Send(parts[1]);
  EXPECT_TRUE(Contains(w->ExpectError(), "without its part 0"));
  // Joined whole, it is a rejoin report, which a fresh job refuses.
  for (const ControlMessage& p : parts) w->Send(p);
  EXPECT_TRUE(Contains(w->ExpectError(), "takes no rejoin report"));
  w->Barrier("all", 1);
  s->Barrier("all", 1);
  w->Expect(ControlMessage::kBarrierRelease);
  s->Expect(ControlMessage::kBarrierRelease);
  EXPECT_TRUE(Running());
}

// A node is its token, not its connection: the same node (its token) on a new connection, as
// after a TCP reconnect, is still worker 0 at once, whether or not ZeroMQ dropped the old
// connection yet, and what the scheduler sends the node goes to the new one. A barrier it
// waited in on the old connection is released to the new one.
TEST_F(SchedulerTest, ANodeOnANewConnectionIsKnownByItsToken) {
  Start(1, 1);
  auto worker = Node();
  auto server = Node();
  worker->Register(ROLE_WORKER, -1);
  server->Register(ROLE_SERVER, -1);
  worker->Expect(ControlMessage::kTopology);
  server->Expect(ControlMessage::kTopology);
  worker->Barrier("all", 1);
  worker->Sync();  // the barrier request is in before the new connection speaks
  const NodeToken token = worker->token();
  // The old connection stays open: the new one takes over all the same.
  auto again = std::make_unique<TestNode>(context_, scheduler_->port(), "", token);
  again->Barrier("no-such-group", 0);
  EXPECT_TRUE(Contains(again->ExpectError(), "unknown barrier group"));
  server->Barrier("all", 1);
  EXPECT_EQ(again->Expect(ControlMessage::kBarrierRelease).barrier_release().sequence(), 1u);
  worker->ExpectNothing(100);
  worker.reset();
  again->Barrier("workers", 2);
  EXPECT_EQ(again->Expect(ControlMessage::kBarrierRelease).barrier_release().sequence(), 2u);
  // A fresh connection without the token is no one.
  auto stranger = Node();
  stranger->Barrier("workers", 3);
  EXPECT_TRUE(Contains(stranger->ExpectError(), "has not registered"));
  EXPECT_TRUE(Running());
}

// A connection acts as a node only with the node's token: a message on a registered
// connection without it, or another connection that takes the node's routing id, gets nowhere
// (no handover: the id stays with the live connection), and the node's messages still count.
TEST_F(SchedulerTest, ConnectionsWithoutTheNodesTokenCannotActAsIt) {
  Start(2, 1);
  auto worker = std::make_unique<TestNode>(context_, scheduler_->port(), "worker-host-77");
  auto other = Node();
  auto server = Node();
  worker->Register(ROLE_WORKER, 0);
  other->Register(ROLE_WORKER, 1);
  server->Register(ROLE_SERVER, 0);
  for (TestNode* n : {worker.get(), other.get(), server.get()})
    n->Expect(ControlMessage::kTopology);
  ControlMessage shutdown;
  shutdown.mutable_shutdown()->set_reason("taken over");
  worker->Send(shutdown, /*with_token=*/false);
  EXPECT_EQ(worker->ExpectError(),
            "shutdown refused: it does not carry the token that worker 0 registered with");
  ControlMessage foreign = shutdown;  // worker 1's token on worker 0's connection
  foreign.set_token(TokenBytes(other->token()));
  worker->Send(foreign, /*with_token=*/false);
  EXPECT_TRUE(Contains(worker->ExpectError(), "does not carry the token"));
  // An impostor with worker 0's routing id: its connection is not taken, its messages vanish.
  auto impostor = std::make_unique<TestNode>(context_, scheduler_->port(), "worker-host-77");
  impostor->Send(shutdown);
  impostor->ExpectNothing(300);
  EXPECT_TRUE(Running());
  worker->Barrier("no-such-group", 0);
  EXPECT_TRUE(Contains(worker->ExpectError(), "unknown barrier group"));
  // The job is whole: a barrier of every node completes.
  for (TestNode* n : {worker.get(), other.get(), server.get()}) n->Barrier("all", 1);
  for (TestNode* n : {worker.get(), other.get(), server.get()}) {
    n->Expect(ControlMessage::kBarrierRelease);
  }
}

// Every registered node hears the scheduler each heartbeat interval.
TEST_F(SchedulerTest, NodesGetTheSchedulersHeartbeats) {
  proto::ClusterConfig config;
  config.set_heartbeat_interval_ms(50);
  config.set_heartbeat_timeout_ms(5000);
  Start(1, 1, config);
  auto w = Node();
  w->Register(ROLE_WORKER, 0);  // registered, the job not yet complete
  w->ExpectNothing(400);
  EXPECT_GE(w->heartbeats(), 3);
}

TEST_F(SchedulerTest, RegistrationTimeoutNamesMissingRanksAndTellsRegisteredNodes) {
  proto::ClusterConfig config;
  config.set_connect_timeout_ms(300);
  Start(3, 2, config);
  auto w1 = Node(), s0 = Node();
  w1->Register(ROLE_WORKER, 1);
  s0->Register(ROLE_SERVER, 0);
  const std::string reason = w1->Expect(ControlMessage::kShutdown, 1500).shutdown().reason();
  EXPECT_EQ(reason,
            "registration did not complete within 0.3 s: missing worker ranks 0, 2 (1 of 3 "
            "workers registered); server rank 1 (1 of 2 servers registered)");
  EXPECT_EQ(s0->Expect(ControlMessage::kShutdown).shutdown().reason(), reason);
  const absl::Status status = Result();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(SchedulerTest, StopTellsEveryNode) {
  Start(1, 1);
  auto nodes = RegisterAll([this] { return Node(); }, 1, 1);
  scheduler_->Stop();
  for (auto& n : nodes) {
    EXPECT_EQ(n->Expect(ControlMessage::kShutdown).shutdown().reason(), "scheduler was stopped");
  }
  EXPECT_EQ(Result().code(), absl::StatusCode::kCancelled);
}

ControlMessage LocalComm(const std::string& kind, const std::string& id) {
  ControlMessage m;
  m.mutable_local_communicator()->set_kind(kind);
  m.mutable_local_communicator()->set_id(id);
  return m;
}

TEST_F(SchedulerTest, HierarchicalJobRelaysBothTheHostAndTheNcclCommunicator) {
  proto::ClusterConfig config;
  config.set_hierarchical(true);
  Start(3, 1, config);
  auto server = Node(), w0 = Node(), w1 = Node(), w2 = Node();
  server->Register(ROLE_SERVER, 0);
  w0->Register(ROLE_WORKER, 0, "hostA");
  w1->Register(ROLE_WORKER, 1, "hostA");
  w2->Register(ROLE_WORKER, 2, "hostA");
  for (TestNode* n : {w0.get(), w1.get(), w2.get()}) n->Expect(ControlMessage::kTopology);
  const std::string nccl_id(128, '\x2a');
  w0->Send(LocalComm("host", "tcp://127.0.0.1:5555"));
  w0->Send(LocalComm("nccl", nccl_id));
  for (TestNode* n : {w1.get(), w2.get()}) {
    const ControlMessage host = n->Expect(ControlMessage::kLocalCommunicator);
    EXPECT_EQ(host.local_communicator().kind(), "host");
    EXPECT_EQ(host.local_communicator().id(), "tcp://127.0.0.1:5555");
    const ControlMessage nccl = n->Expect(ControlMessage::kLocalCommunicator);
    EXPECT_EQ(nccl.local_communicator().kind(), "nccl");
    EXPECT_EQ(nccl.local_communicator().id(), nccl_id);
  }
  // Each kind is checked on its own: a repeat is ignored, another NCCL id is refused.
  w0->Send(LocalComm("nccl", nccl_id));
  w0->Sync();
  w0->Send(LocalComm("nccl", std::string(128, '\x2b')));
  EXPECT_TRUE(Contains(w0->ExpectError(),
                       "machine 'hostA' already has a different nccl local communicator"));
  w1->ExpectNothing(100);
  w2->ExpectNothing(0);
  EXPECT_TRUE(Running());
}

TEST_F(SchedulerTest, HierarchicalJobWithAShortMachineStopsAtTheTopology) {
  proto::ClusterConfig config;
  config.set_hierarchical(true);
  Start(3, 1, config);
  auto register_on = [](TestNode& node, int rank, const std::string& machine, int local_rank,
                        int local_size) {
    ControlMessage m;
    proto::Register* r = m.mutable_register_();
    r->set_role(ROLE_WORKER);
    r->set_requested_rank(rank);
    r->set_hostname("host");
    r->set_machine(machine);
    r->set_requested_local_rank(local_rank);
    r->set_declared_local_size(local_size);
    r->set_token(TokenBytes(node.token()));
    node.Send(m);
  };
  auto server = Node(), w0 = Node(), w1 = Node(), w2 = Node();
  server->Register(ROLE_SERVER, 0);
  register_on(*w0, 0, "m1", 0, 3);
  register_on(*w1, 1, "m1", 1, 3);
  register_on(*w2, 2, "m2", 0, 1);
  // Everyone registered, but machine m1 has 2 of its 3 workers: the job cannot start.
  for (TestNode* n : {server.get(), w0.get(), w1.get(), w2.get()}) {
    const ControlMessage m = n->Expect(ControlMessage::kShutdown);
    EXPECT_TRUE(Contains(m.shutdown().reason(),
                         "machine 'm1' declared local size 3 but 2 workers registered from it"))
        << m.shutdown().reason();
  }
  absl::Status result = Result();
  EXPECT_EQ(result.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(std::string(result.message()), "missing local rank 2")) << result;
}

TEST_F(SchedulerTest, AReloadIsPreparedAndCommittedThroughTheLoop) {
  const std::string path = ::testing::TempDir() + "/scheduler_test_strategy.pbtxt";
  std::ofstream(path) << "seed: 7\n";
  Start(1, 1, {}, path);
  auto nodes = RegisterAll([this] { return Node(); }, 1, 1);
  TestNode& worker = *nodes[0];
  TestNode& server = *nodes[1];
  std::ofstream(path) << "seed: 8\n";
  scheduler_->RequestReload();
  EXPECT_EQ(worker.Expect(ControlMessage::kStrategyPrepare).strategy_prepare().version(), 2u);
  ControlMessage reply;
  reply.mutable_strategy_prepare_reply()->set_version(2);
  reply.mutable_strategy_prepare_reply()->set_highest_started_round(3);
  server.Send(reply);
  EXPECT_TRUE(Contains(server.ExpectError(), "StrategyPrepareReply from server 0"));
  worker.Send(reply);
  for (TestNode* n : {&server, &worker}) {
    const proto::Strategy s =
        n->Expect(ControlMessage::kStrategyCommit).strategy_commit().strategy();
    EXPECT_EQ(s.version(), 2u);
    EXPECT_EQ(s.seed(), 8u);
    EXPECT_EQ(s.first_round(), 5u);
  }
  EXPECT_TRUE(Running());
}

// A node that reads slower than the scheduler answers loses nothing: what its queue has no
// room for waits in the scheduler, in order (ZMQ_ROUTER_MANDATORY and a backlog).
TEST_F(SchedulerTest, ANodeThatReadsSlowlyGetsEveryReplyInOrder) {
  proto::ClusterConfig config;
  config.set_heartbeat_timeout_ms(120000);  // the test nodes send none; slow under sanitizers
  Start(1, 1, config);
  auto nodes = RegisterAll([this] { return Node(); }, 1, 1);
  // Beyond the queues and the TCP buffers: 40000 replies of about 230 bytes (9 MB).
  constexpr int kTensors = 40000;
  const std::string pad(200, 'p');
  for (int t = 0; t < kTensors; ++t) {
    nodes[0]->Declare(absl::StrCat("t", t, pad), 1, proto::DTYPE_FLOAT32);
  }
  for (auto& n : nodes) {
    for (int t = 0; t < kTensors; ++t) {
      const proto::DeclareReply r = n->Expect(ControlMessage::kDeclareReply, 10000).declare_reply();
      ASSERT_EQ(r.name(), absl::StrCat("t", t, pad));
      ASSERT_EQ(r.tensor_id(), static_cast<uint32_t>(t));
    }
  }
  EXPECT_TRUE(Running());
}

// The node (by its token) registers again with a restarted scheduler (Register.rejoining).
void RegisterRejoining(TestNode& node, proto::Role role, int rank) {
  ControlMessage m;
  proto::Register* r = m.mutable_register_();
  r->set_role(role);
  r->set_requested_rank(rank);
  r->set_hostname("hostA");
  r->set_pid(4242);
  if (role == ROLE_SERVER) r->set_data_address(absl::StrCat("tcp://127.0.0.1:", 7000 + rank));
  r->set_token(TokenBytes(node.token()));
  r->set_rejoining(true);
  node.Send(m);
}

// The node rejoins a restarted scheduler, then reports what it knows.
void Rejoin(TestNode& node, proto::Role role, int rank, const proto::Rejoin& report) {
  RegisterRejoining(node, role, rank);
  ControlMessage reported;
  *reported.mutable_rejoin_report() = report;
  // In parts when large, as SchedulerClient sends it.
  for (const ControlMessage& piece : SplitControlMessage(reported, 1)) node.Send(piece);
}

// A scheduler that restarts takes the running job up from what its nodes report
// (takeover.h): declarations, the strategy in force, released barriers; the nodes then send
// again what the old one left unanswered, and the job goes on.
TEST_F(SchedulerTest, ARestartedSchedulerTakesTheJobUpFromItsRejoiningNodes) {
  proto::ClusterConfig config;
  config.set_partition_bytes(64);  // 16 fp32 elements per partition
  Start(2, 2, config);
  std::vector<NodeToken> tokens;
  std::vector<proto::DeclareReply> declared;
  {
    auto nodes = RegisterAll([this] { return Node(); }, 2, 2);
    nodes[0]->Declare("a", 40, proto::DTYPE_FLOAT32);
    nodes[1]->Declare("a", 40, proto::DTYPE_FLOAT32);
    for (auto& n : nodes)
      declared.push_back(n->Expect(ControlMessage::kDeclareReply).declare_reply());
    for (auto& n : nodes) n->Barrier("all", 1);
    for (auto& n : nodes) n->Expect(ControlMessage::kBarrierRelease);
    for (auto& n : nodes) tokens.push_back(n->token());
  }
  // The scheduler goes; another starts (the nodes come back on new connections).
  scheduler_->Stop();
  result_.wait();
  scheduler_.reset();
  Start(2, 2, config);
  std::vector<std::unique_ptr<TestNode>> nodes;
  for (const NodeToken& t : tokens) {
    nodes.push_back(std::make_unique<TestNode>(context_, scheduler_->port(), "", t));
  }
  nodes[0]->Heartbeat();
  const proto::Error unknown = nodes[0]->Expect(ControlMessage::kError).error();
  EXPECT_TRUE(unknown.not_registered()) << unknown.message();

  proto::Rejoin base;
  base.mutable_strategy()->set_version(1);
  proto::Rejoin w0 = base, w1 = base, s0 = base, s1 = base;
  for (proto::Rejoin* r : {&w0, &w1, &s0}) *r->add_declarations() = declared[0];
  for (proto::Rejoin* r : {&w0, &s0, &s1}) {
    r->add_released()->set_group("all");
    r->mutable_released(0)->set_sequence(1);
  }
  w0.set_prepared_version(2);  // a switch the old scheduler never committed
  // Worker 1's report is larger than one of the scheduler's frames (a node that repeats
  // itself): it goes in parts. Its last entry says barrier 2 of 'all' was released too.
  for (int g = 0; g < 60000; ++g) {
    proto::BarrierRelease* r = w1.add_released();
    r->set_group("all");
    r->set_sequence(g < 59999 ? 1 : 2);
  }
  ASSERT_GT(w1.ByteSizeLong(), static_cast<size_t>(kControlPartBytes));
  Rejoin(*nodes[0], ROLE_WORKER, 0, w0);
  Rejoin(*nodes[1], ROLE_WORKER, 1, w1);
  Rejoin(*nodes[2], ROLE_SERVER, 0, s0);
  nodes[2]->Sync();
  // Meanwhile a node of no job cannot register.
  auto fresh = Node();
  fresh->Register(ROLE_SERVER, 1);
  const proto::Error refused = fresh->Expect(ControlMessage::kError).error();
  EXPECT_TRUE(refused.registration_refused());
  EXPECT_TRUE(Contains(refused.message(), "taking a running job over")) << refused.message();
  Rejoin(*nodes[3], ROLE_SERVER, 1, s1);

  // Server 1 lacked tensor 'a'; worker 0 held a prepare: it gets the version in force.
  const proto::DeclareReply again = nodes[3]->Expect(ControlMessage::kDeclareReply).declare_reply();
  EXPECT_EQ(again.name(), "a");
  EXPECT_EQ(again.tensor_id(), declared[0].tensor_id());
  EXPECT_EQ(
      nodes[0]->Expect(ControlMessage::kStrategyCommit).strategy_commit().strategy().version(), 1u);
  for (auto& n : nodes) {
    EXPECT_EQ(n->Expect(ControlMessage::kRejoined).rejoined().strategy_version(), 1u);
  }
  // What worker 1 sends again is answered as before: its declaration of 'a' with the same
  // reply, its barrier 1 released at once.
  nodes[1]->Declare("a", 40, proto::DTYPE_FLOAT32);
  const proto::DeclareReply a = nodes[1]->Expect(ControlMessage::kDeclareReply).declare_reply();
  EXPECT_TRUE(a.ok());
  EXPECT_EQ(a.partition_server_size(), declared[0].partition_server_size());
  nodes[1]->Barrier("all", 1);
  EXPECT_EQ(nodes[1]->Expect(ControlMessage::kBarrierRelease).barrier_release().sequence(), 1u);
  nodes[1]->Barrier("all", 2);  // its report, joined from the parts, said so
  EXPECT_EQ(nodes[1]->Expect(ControlMessage::kBarrierRelease).barrier_release().sequence(), 2u);
  // A new tensor takes the next id.
  nodes[0]->Declare("b", 16, proto::DTYPE_FLOAT32);
  nodes[1]->Declare("b", 16, proto::DTYPE_FLOAT32);
  for (auto& n : nodes) {
    const proto::DeclareReply b = n->Expect(ControlMessage::kDeclareReply).declare_reply();
    EXPECT_TRUE(b.ok()) << b.error();
    EXPECT_EQ(b.tensor_id(), declared[0].tensor_id() + 1);
  }
  EXPECT_TRUE(Running());
}

// A node's rejoin report names every tensor it declared; for a large model it is larger than
// one of the scheduler's frames, and SchedulerClient sends it in parts after its Register. The
// restarted scheduler (same port) joins them and takes the job up with every tensor.
TEST_F(SchedulerTest, ALargeRejoinReportTravelsInPartsFromTheSchedulerClient) {
  constexpr int kTensors = 1500;
  proto::ClusterConfig config;
  config.set_heartbeat_interval_ms(50);
  Start(1, 1, config);
  const int port = scheduler_->port();
  proto::ClusterConfig client_config = config;
  client_config.set_scheduler_address(absl::StrCat("127.0.0.1:", port));
  client_config.set_num_workers(1);
  client_config.set_num_servers(1);
  client_config = WithClusterDefaults(client_config);
  SocketSecurity unkeyed(context_, std::nullopt, false);
  SchedulerClient client(context_, client_config, unkeyed);
  std::future<absl::StatusOr<proto::Topology>> topology =
      std::async(std::launch::async, [&] { return client.Register(ROLE_WORKER, 0, ""); });
  auto server = Node();
  server->Register(ROLE_SERVER, 0);
  server->Expect(ControlMessage::kTopology);
  ASSERT_TRUE(topology.get().ok());
  const std::string pad(300, 'p');
  for (int t = 0; t < kTensors; ++t) {
    ControlMessage m;
    m.mutable_declare_tensor()->set_name(absl::StrCat("t", t, pad));
    m.mutable_declare_tensor()->set_element_count(16);
    m.mutable_declare_tensor()->set_dtype(proto::DTYPE_FLOAT32);
    ASSERT_TRUE(client.Send(m).ok());
  }
  int replies = 0;
  const int64_t deadline = MonotonicMs() + 20000;
  while (replies < kTensors && MonotonicMs() < deadline) {
    absl::StatusOr<std::optional<ControlMessage>> m = client.Receive(100);
    ASSERT_TRUE(m.ok()) << m.status();
    if (m->has_value() && (*m)->has_declare_reply()) {
      ASSERT_TRUE((*m)->declare_reply().ok()) << (*m)->declare_reply().error();
      ++replies;
    }
  }
  ASSERT_EQ(replies, kTensors);
  const NodeToken server_token = server->token();
  server.reset();

  scheduler_->Stop();
  result_.wait();
  scheduler_.reset();
  Start(1, 1, config, "", port);
  // The client hears the new scheduler's not_registered and rejoins, its report in parts.
  std::atomic<bool> rejoined{false};
  std::future<void> client_loop = std::async(std::launch::async, [&] {
    const int64_t until = MonotonicMs() + 20000;
    while (!rejoined && MonotonicMs() < until) {
      client.HeartbeatIfDue();
      absl::StatusOr<std::optional<ControlMessage>> m = client.Receive(20);
      if (!m.ok()) {
        ADD_FAILURE() << m.status();
        return;
      }
    }
  });
  TestNode again(context_, port, "", server_token);
  proto::Rejoin lacking_everything;
  lacking_everything.mutable_strategy()->set_version(1);
  Rejoin(again, ROLE_SERVER, 0, lacking_everything);
  // The server lacked every tensor: it gets them all from the worker's report, then Rejoined.
  for (int t = 0; t < kTensors; ++t) {
    const proto::DeclareReply r =
        again.Expect(ControlMessage::kDeclareReply, 20000).declare_reply();
    ASSERT_EQ(r.name(), absl::StrCat("t", t, pad));
  }
  again.Expect(ControlMessage::kRejoined, 5000);
  rejoined = true;
  client_loop.get();
  EXPECT_TRUE(Running());
}

// Nodes that disagree on a tensor cannot be taken up: the job ends, every node told why.
TEST_F(SchedulerTest, ATakeoverOfNodesThatDisagreeEndsTheJob) {
  Start(1, 1);
  auto worker = Node(), server = Node();
  proto::Rejoin w, s;
  proto::DeclareReply* a = w.add_declarations();
  a->set_name("a");
  a->set_ok(true);
  a->set_element_count(4);
  a->set_dtype(proto::DTYPE_FLOAT32);
  a->set_partition_elements(4);
  a->add_partition_server(0);
  *s.add_declarations() = *a;
  s.mutable_declarations(0)->set_tensor_id(3);
  Rejoin(*worker, ROLE_WORKER, 0, w);
  Rejoin(*server, ROLE_SERVER, 0, s);
  const std::string reason = worker->Expect(ControlMessage::kShutdown).shutdown().reason();
  EXPECT_TRUE(Contains(reason, "cannot take the job up: the nodes disagree on tensor 'a'"))
      << reason;
  EXPECT_EQ(Result().code(), absl::StatusCode::kFailedPrecondition);
}

// A node that rejoined but never reports (it died in between) cannot hold the takeover up
// forever: at the registration deadline the job ends, naming it.
TEST_F(SchedulerTest, ATakeoverMissingAReportEndsAtTheRegistrationDeadline) {
  proto::ClusterConfig config;
  config.set_connect_timeout_ms(500);
  Start(1, 1, config);
  auto worker = Node(), server = Node();
  proto::Rejoin report;
  report.mutable_strategy()->set_version(1);
  Rejoin(*worker, ROLE_WORKER, 0, report);
  RegisterRejoining(*server, ROLE_SERVER, 0);
  const absl::Status result = Result(5000);
  EXPECT_EQ(result.code(), absl::StatusCode::kDeadlineExceeded) << result;
  EXPECT_TRUE(Contains(std::string(result.message()), "no rejoin report from server 0")) << result;
}

TEST(SchedulerCreateTest, RejectsInvalidConfigAndBusyPort) {
  SchedulerOptions options;
  options.config = WithClusterDefaults({});
  options.config.set_num_workers(-1);
  absl::StatusOr<std::unique_ptr<Scheduler>> bad = Scheduler::Create(options);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(std::string(bad.status().message()), "num_workers"));

  options.config = WithClusterDefaults({});
  options.bind_host = "127.0.0.1";
  options.port = 0;
  absl::StatusOr<std::unique_ptr<Scheduler>> first = Scheduler::Create(options);
  ASSERT_TRUE(first.ok());
  options.port = (*first)->port();
  absl::StatusOr<std::unique_ptr<Scheduler>> second = Scheduler::Create(options);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(Contains(std::string(second.status().message()), "cannot bind"));
}

}  // namespace
}  // namespace bytecomp
