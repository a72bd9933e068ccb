// The scheduler driven in-process (Run on a thread) by test DEALER sockets on loopback.
#include "bytecomp/scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <set>
#include <memory>
#include <thread>

#include "bytecomp/common/config.h"
#include "bytecomp/common/transport.h"
#include "test_node.h"

namespace bytecomp {
namespace {

using proto::ControlMessage;
using proto::ROLE_SERVER;
using proto::ROLE_WORKER;
using testing::TestNode;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class SchedulerTest : public ::testing::Test {
 protected:
  void Start(int workers, int servers, proto::ClusterConfig overrides = {}) {
    proto::ClusterConfig config = overrides;
    config.set_scheduler_address("127.0.0.1:1");  // the port comes from options.port
    config.set_num_workers(workers);
    config.set_num_servers(servers);
    SchedulerOptions options;
    options.config = WithClusterDefaults(config);
    options.bind_host = "127.0.0.1";
    options.port = 0;
    options.shutdown_linger_ms = 200;
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
  std::unique_ptr<TestNode> Node() { return std::make_unique<TestNode>(context_, scheduler_->port()); }
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
  for (const Expected& e : {Expected{w_y.get(), 0, 0, 1}, Expected{w_z.get(), 1, 0, 2},
                            Expected{w_x.get(), 2, 1, 2}, Expected{s_b.get(), 0, 0, 0},
                            Expected{s_a.get(), 1, 0, 0}}) {
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

TEST_F(SchedulerTest, RejectsRankConflictsDuplicatesAndLateNodes) {
  Start(2, 1);
  auto w0 = Node(), other = Node(), server = Node(), w1 = Node(), late = Node();
  w0->Register(ROLE_WORKER, 0);
  w0->Sync();
  other->Register(ROLE_WORKER, 0, "hostB");
  EXPECT_TRUE(Contains(other->ExpectError(), "worker rank 0 is already taken by pid 4242 on hostA"));
  other->Register(ROLE_WORKER, 5);
  EXPECT_TRUE(Contains(other->ExpectError(), "rank 5 is out of range"));
  w0->Register(ROLE_WORKER, 1);  // same connection again
  EXPECT_TRUE(Contains(w0->ExpectError(), "already registered as worker 0"));
  server->Register(ROLE_SERVER, -1, "hostA", "not-an-address");
  EXPECT_TRUE(Contains(server->ExpectError(), "data_address 'not-an-address'"));
  other->Register(proto::ROLE_SCHEDULER, -1);
  EXPECT_TRUE(Contains(other->ExpectError(), "role must be worker or server"));
  // A rejected connection may try again with a free rank.
  other->Register(ROLE_WORKER, -1, "hostB");
  other->Sync();
  w1->Register(ROLE_WORKER, -1);
  EXPECT_TRUE(Contains(w1->ExpectError(), "all 2 worker ranks are taken"));
  server->Register(ROLE_SERVER, 0);
  for (TestNode* n : {w0.get(), other.get(), server.get()}) {
    n->Expect(ControlMessage::kTopology);
  }
  late->Register(ROLE_SERVER, -1);
  EXPECT_TRUE(Contains(late->ExpectError(), "the job is full"));
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
  // Different sequences do not mix.
  w0->Barrier("workers", 2);
  w1->Barrier("workers", 3);
  w0->ExpectNothing(100);
  w1->ExpectNothing(0);

  s0->Barrier("servers", 1);
  EXPECT_EQ(s0->Expect(ControlMessage::kBarrierRelease).barrier_release().group(), "servers");
  s0->Barrier("workers", 9);
  EXPECT_TRUE(Contains(s0->ExpectError(), "server 0 is not a member of barrier group 'workers'"));
  s0->Barrier("everyone", 1);
  EXPECT_TRUE(Contains(s0->ExpectError(), "unknown barrier group 'everyone'"));
}

// Registers W workers and S servers and consumes their topologies.
std::vector<std::unique_ptr<TestNode>> RegisterAll(
    std::function<std::unique_ptr<TestNode>()> make, int workers, int servers) {
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

TEST_F(SchedulerTest, DeclarationAssignsIdsAndBalancedServersToEveryWorker) {
  proto::ClusterConfig config;
  config.set_partition_bytes(64);  // 16 fp32 / 32 fp16 elements per partition
  Start(2, 2, config);
  auto nodes = RegisterAll([this] { return Node(); }, 2, 2);
  TestNode& w0 = *nodes[0];
  TestNode& w1 = *nodes[1];

  w0.Declare("conv1.weight", 40, proto::DTYPE_FLOAT32);
  w0.ExpectNothing(100);  // waits for worker 1
  w1.Declare("conv1.weight", 40, proto::DTYPE_FLOAT32);
  for (TestNode* w : {&w0, &w1}) {
    const proto::DeclareReply r = w->Expect(ControlMessage::kDeclareReply).declare_reply();
    EXPECT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r.name(), "conv1.weight");
    EXPECT_EQ(r.tensor_id(), 0u);
    EXPECT_EQ(r.partition_elements(), 16);
    EXPECT_EQ(std::vector<int32_t>(r.partition_server().begin(), r.partition_server().end()),
              std::vector<int32_t>({0, 1, 0}));
  }
  // Completion order gives the id, whatever order each worker declared in.
  w1.Declare("fc.bias", 10, proto::DTYPE_FLOAT16);
  w0.Declare("fc.weight", 33, proto::DTYPE_FLOAT32);
  w1.Declare("fc.weight", 33, proto::DTYPE_FLOAT32);
  for (TestNode* w : {&w0, &w1}) {
    const proto::DeclareReply a = w->Expect(ControlMessage::kDeclareReply).declare_reply();
    EXPECT_EQ(a.name(), "fc.weight");
    EXPECT_EQ(a.tensor_id(), 1u);
    // Loads before: server 0 96 B, server 1 64 B. 16 -> s1 (128), 16 -> s0 (160), 1 -> s1.
    EXPECT_EQ(std::vector<int32_t>(a.partition_server().begin(), a.partition_server().end()),
              std::vector<int32_t>({1, 0, 1}));
  }
  // Only now (messages from two sockets may arrive in any order) does fc.bias complete.
  w0.Declare("fc.bias", 10, proto::DTYPE_FLOAT16);
  for (TestNode* w : {&w0, &w1}) {
    const proto::DeclareReply b = w->Expect(ControlMessage::kDeclareReply).declare_reply();
    EXPECT_EQ(b.name(), "fc.bias");
    EXPECT_EQ(b.tensor_id(), 2u);
    EXPECT_EQ(b.partition_elements(), 32);
    // Loads: server 0 160 B, server 1 132 B.
    EXPECT_EQ(std::vector<int32_t>(b.partition_server().begin(), b.partition_server().end()),
              std::vector<int32_t>({1}));
  }
  // Re-declaring identically gets the same answer again (only to the one who asked).
  w1.Declare("fc.weight", 33, proto::DTYPE_FLOAT32);
  const proto::DeclareReply again = w1.Expect(ControlMessage::kDeclareReply).declare_reply();
  EXPECT_TRUE(again.ok());
  EXPECT_EQ(again.tensor_id(), 1u);
  EXPECT_EQ(again.partition_server_size(), 3);
  w0.ExpectNothing(50);
  // Re-declaring differently is an error for that worker.
  w1.Declare("fc.weight", 34, proto::DTYPE_FLOAT32);
  const proto::DeclareReply changed = w1.Expect(ControlMessage::kDeclareReply).declare_reply();
  EXPECT_FALSE(changed.ok());
  EXPECT_TRUE(Contains(changed.error(), "re-declared by worker 1 with 34 elements of fp32"))
      << changed.error();
  // Every server got each successful declaration, with size and dtype, to validate pushes.
  for (int s : {2, 3}) {
    std::vector<std::string> names;
    for (int i = 0; i < 3; ++i) {
      const proto::DeclareReply d = nodes[s]->Expect(ControlMessage::kDeclareReply).declare_reply();
      EXPECT_TRUE(d.ok());
      names.push_back(d.name());
      if (d.name() == "fc.bias") {
        EXPECT_EQ(d.element_count(), 10);
        EXPECT_EQ(d.dtype(), proto::DTYPE_FLOAT16);
      }
    }
    EXPECT_EQ(names, std::vector<std::string>({"conv1.weight", "fc.weight", "fc.bias"}));
    nodes[s]->ExpectNothing(20);
  }
  // Servers do not declare; bad values are refused at once.
  nodes[2]->Declare("x", 1, proto::DTYPE_FLOAT32);
  EXPECT_FALSE(nodes[2]->Expect(ControlMessage::kDeclareReply).declare_reply().ok());
  w0.Declare("empty", 0, proto::DTYPE_FLOAT32);
  EXPECT_TRUE(Contains(w0.Expect(ControlMessage::kDeclareReply).declare_reply().error(),
                       "declared with 0 elements by worker 0"));
  w0.Declare("odd", 5, 17);
  EXPECT_TRUE(Contains(w0.Expect(ControlMessage::kDeclareReply).declare_reply().error(),
                       "unknown dtype 17"));
}

TEST_F(SchedulerTest, ManyWorkersGetIdenticalDeclarationsInOneOrder) {
  constexpr int kWorkers = 24;
  constexpr int kServers = 4;
  constexpr int kTensors = 60;
  proto::ClusterConfig config;
  config.set_partition_bytes(4096);
  Start(kWorkers, kServers, config);
  auto nodes = RegisterAll([this] { return Node(); }, kWorkers, kServers);
  // Every worker declares every tensor (sizes around the 1024-element partition boundary);
  // the order across workers interleaves arbitrarily at the scheduler.
  auto size_of = [](int t) -> int64_t { return 1 + (t * 977) % 5000; };
  for (int t = 0; t < kTensors; ++t) {
    for (int w = 0; w < kWorkers; ++w) {
      nodes[w]->Declare(absl::StrCat("layer", t), size_of(t), proto::DTYPE_FLOAT32);
    }
  }
  std::vector<std::vector<proto::DeclareReply>> got(kWorkers);
  for (int w = 0; w < kWorkers; ++w) {
    for (int t = 0; t < kTensors; ++t) {
      got[w].push_back(nodes[w]->Expect(ControlMessage::kDeclareReply).declare_reply());
    }
  }
  std::set<uint32_t> ids;
  std::vector<int64_t> load(kServers, 0);
  for (int t = 0; t < kTensors; ++t) {
    const proto::DeclareReply& r = got[0][t];
    ASSERT_TRUE(r.ok()) << r.error();
    ids.insert(r.tensor_id());
    EXPECT_EQ(r.partition_elements(), 1024);
    const int64_t n = size_of(std::stoi(r.name().substr(5)));
    ASSERT_EQ(r.partition_server_size(), (n + 1023) / 1024) << r.name();
    for (int p = 0; p < r.partition_server_size(); ++p) {
      load[r.partition_server(p)] += std::min<int64_t>(1024, n - p * 1024) * 4;
    }
    for (int w = 1; w < kWorkers; ++w) {
      EXPECT_EQ(got[w][t].SerializeAsString(), r.SerializeAsString()) << "worker " << w;
    }
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(kTensors));
  EXPECT_EQ(*ids.rbegin(), static_cast<uint32_t>(kTensors - 1));
  const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
  EXPECT_LE(*hi - *lo, 4096) << "servers unbalanced";
}

TEST_F(SchedulerTest, MismatchedDeclarationIsAnErrorForEveryWorker) {
  Start(3, 1);
  auto nodes = RegisterAll([this] { return Node(); }, 3, 1);
  nodes[0]->Declare("fc.weight", 100, proto::DTYPE_FLOAT32);
  nodes[1]->Declare("fc.weight", 200, proto::DTYPE_FLOAT32);
  nodes[2]->Declare("fc.weight", 100, proto::DTYPE_FLOAT32);
  for (int w = 0; w < 3; ++w) {
    const proto::DeclareReply r = nodes[w]->Expect(ControlMessage::kDeclareReply).declare_reply();
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.error(),
              "tensor 'fc.weight' declared with 100 elements by workers 0, 2 and 200 elements "
              "by worker 1");
  }
  nodes[0]->Declare("b", 8, proto::DTYPE_FLOAT32);
  nodes[1]->Declare("b", 8, proto::DTYPE_FLOAT16);
  nodes[2]->Declare("b", 8, proto::DTYPE_FLOAT32);
  for (int w = 0; w < 3; ++w) {
    EXPECT_EQ(nodes[w]->Expect(ControlMessage::kDeclareReply).declare_reply().error(),
              "tensor 'b' declared with dtype fp32 by workers 0, 2 and dtype fp16 by worker 1");
  }
  // A failed declaration uses no tensor id.
  for (int w = 0; w < 3; ++w) nodes[w]->Declare("c", 8, proto::DTYPE_FLOAT32);
  for (int w = 0; w < 3; ++w) {
    const proto::DeclareReply r = nodes[w]->Expect(ControlMessage::kDeclareReply).declare_reply();
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(r.tensor_id(), 0u);
  }
}

TEST_F(SchedulerTest, TwoWorkerMismatchMessage) {
  Start(2, 1);
  auto nodes = RegisterAll([this] { return Node(); }, 2, 1);
  nodes[1]->Declare("fc.weight", 200, proto::DTYPE_FLOAT32);
  nodes[0]->Declare("fc.weight", 100, proto::DTYPE_FLOAT32);
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(nodes[w]->Expect(ControlMessage::kDeclareReply).declare_reply().error(),
              "tensor 'fc.weight' declared with 100 elements by worker 0 and 200 elements by "
              "worker 1");
  }
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

TEST_F(SchedulerTest, FailedServerIsNamedWithItsDataAddress) {
  proto::ClusterConfig config;
  config.set_heartbeat_interval_ms(50);
  config.set_heartbeat_timeout_ms(200);
  Start(1, 2, config);
  auto nodes = RegisterAll([this] { return Node(); }, 1, 2);
  std::optional<ControlMessage> m;
  const int64_t start = MonotonicMs();
  while (!m.has_value() && MonotonicMs() - start < 1500) {
    nodes[0]->Heartbeat();
    nodes[1]->Heartbeat();  // server 0 beats, server 1 is silent
    m = nodes[0]->Recv(40);
  }
  ASSERT_TRUE(m.has_value() && m->has_node_failed());
  EXPECT_EQ(m->node_failed().node().role(), ROLE_SERVER);
  EXPECT_EQ(m->node_failed().node().rank(), 1);
  EXPECT_EQ(m->node_failed().data_address(), "tcp://127.0.0.1:7001");
  EXPECT_FALSE(Result().ok());
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
  a->SendRaw({""});
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

TEST_F(SchedulerTest, NodeWithItsOwnRoutingIdSurvivesAReconnect) {
  Start(1, 1);
  auto worker = std::make_unique<TestNode>(context_, scheduler_->port(), "worker-host-1234");
  auto server = Node();
  worker->Register(ROLE_WORKER, -1);
  server->Register(ROLE_SERVER, -1);
  worker->Expect(ControlMessage::kTopology);
  server->Expect(ControlMessage::kTopology);
  // The same node on a new connection (a TCP reconnect) is still worker 0.
  worker.reset();
  auto again = std::make_unique<TestNode>(context_, scheduler_->port(), "worker-host-1234");
  again->Barrier("no-such-group", 0);
  EXPECT_TRUE(Contains(again->ExpectError(), "unknown barrier group")) << "not seen as registered";
  again->Barrier("workers", 1);
  EXPECT_EQ(again->Expect(ControlMessage::kBarrierRelease).barrier_release().sequence(), 1u);
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

TEST_F(SchedulerTest, HierarchicalJobRelaysTheLocalRootsCommunicatorToItsMachineOnly) {
  proto::ClusterConfig config;
  config.set_hierarchical(true);
  Start(4, 1, config);
  auto server = Node(), w0 = Node(), w1 = Node(), w2 = Node(), w3 = Node();
  server->Register(ROLE_SERVER, 0);
  w0->Register(ROLE_WORKER, 0, "hostA");
  w1->Register(ROLE_WORKER, 1, "hostB");
  w2->Register(ROLE_WORKER, 2, "hostA");
  w3->Register(ROLE_WORKER, 3, "hostB");
  struct Expected {
    TestNode* node;
    int local_rank, local_root;
  };
  for (const Expected& e : {Expected{w0.get(), 0, 0}, Expected{w1.get(), 0, 1},
                            Expected{w2.get(), 1, 0}, Expected{w3.get(), 1, 1}}) {
    const proto::Topology t = e.node->Expect(ControlMessage::kTopology).topology();
    EXPECT_EQ(t.local_rank(), e.local_rank);
    EXPECT_EQ(t.local_size(), 2);
    EXPECT_EQ(t.local_root(), e.local_root);
    EXPECT_EQ(std::vector<int>(t.pushers().begin(), t.pushers().end()), (std::vector<int>{0, 1}));
    EXPECT_TRUE(t.config().hierarchical());
  }
  const proto::Topology st = server->Expect(ControlMessage::kTopology).topology();
  EXPECT_EQ(std::vector<int>(st.pushers().begin(), st.pushers().end()), (std::vector<int>{0, 1}));

  w2->Send(LocalComm("host", "tcp://127.0.0.1:5555"));
  EXPECT_TRUE(Contains(w2->ExpectError(), "worker 2 is local rank 1 of 2 on machine 'hostA'; only the local root"));
  w0->Send(LocalComm("nccl", "12345"));
  EXPECT_TRUE(Contains(w0->ExpectError(), "a nccl id of 5 bytes (expected 128)"));
  w0->Send(LocalComm("gloo", "x"));
  EXPECT_TRUE(Contains(w0->ExpectError(), "unknown kind 'gloo'"));
  w0->Send(LocalComm("host", ""));
  EXPECT_TRUE(Contains(w0->ExpectError(), "a host id of 0 bytes"));
  server->Send(LocalComm("host", "x"));
  EXPECT_TRUE(Contains(server->ExpectError(), "server 0 is not a worker"));

  w0->Send(LocalComm("host", "tcp://127.0.0.1:5555"));
  const ControlMessage relayed = w2->Expect(ControlMessage::kLocalCommunicator);
  EXPECT_EQ(relayed.local_communicator().kind(), "host");
  EXPECT_EQ(relayed.local_communicator().id(), "tcp://127.0.0.1:5555");
  w1->ExpectNothing(100);
  w3->ExpectNothing(100);
  w0->ExpectNothing(0);
  // A repeat is ignored; a different id for the same machine is refused.
  w0->Send(LocalComm("host", "tcp://127.0.0.1:5555"));
  w0->Sync();
  w0->Send(LocalComm("host", "tcp://127.0.0.1:6666"));
  EXPECT_TRUE(Contains(w0->ExpectError(), "machine 'hostA' already has a different host local communicator"));
  w2->ExpectNothing(100);
  // Machine B's root has a 128-byte NCCL id.
  w1->Send(LocalComm("nccl", std::string(128, '\x07')));
  EXPECT_EQ(w3->Expect(ControlMessage::kLocalCommunicator).local_communicator().id(), std::string(128, '\x07'));
  EXPECT_TRUE(Running());
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
  EXPECT_TRUE(Contains(w0->ExpectError(), "machine 'hostA' already has a different nccl local communicator"));
  w1->ExpectNothing(100);
  w2->ExpectNothing(0);
  EXPECT_TRUE(Running());
}

TEST_F(SchedulerTest, FlatJobListsEveryWorkerAsPusherAndRefusesLocalCommunicators) {
  Start(2, 1);
  auto server = Node(), w0 = Node(), w1 = Node();
  server->Register(ROLE_SERVER, 0);
  w0->Register(ROLE_WORKER, 0, "hostA");
  w1->Register(ROLE_WORKER, 1, "hostA");
  for (TestNode* n : {w0.get(), w1.get(), server.get()}) {
    const proto::Topology t = n->Expect(ControlMessage::kTopology).topology();
    EXPECT_EQ(std::vector<int>(t.pushers().begin(), t.pushers().end()), (std::vector<int>{0, 1}));
  }
  w0->Send(LocalComm("host", "tcp://127.0.0.1:5555"));
  EXPECT_TRUE(Contains(w0->ExpectError(), "the job is not hierarchical"));
  w1->ExpectNothing(100);
}

TEST_F(SchedulerTest, HierarchicalRegistrationRefusesATakenLocalRankAndAShortMachineStopsTheJob) {
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
    node.Send(m);
  };
  auto server = Node(), w0 = Node(), w1 = Node(), w2 = Node();
  server->Register(ROLE_SERVER, 0);
  register_on(*w0, 0, "m1", 0, 3);
  w0->Sync();
  register_on(*w1, 1, "m1", 0, 3);
  EXPECT_TRUE(Contains(w1->ExpectError(), "asked for local rank 0, already taken by worker 0"));
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

namespace bytecomp {
namespace {

TEST_F(SchedulerTest, KeepsWorkersLinkProbesAndRefusesThemFromServers) {
  Start(2, 1);
  auto nodes = RegisterAll([this] { return Node(); }, 2, 1);
  ControlMessage report;
  proto::LinkProbe* link = report.mutable_link_probe_report()->add_links();
  link->set_latency_us(80);
  link->set_up_gbps(1.5);
  link->set_down_gbps(2.5);
  nodes[2]->Send(report);  // the server
  EXPECT_TRUE(Contains(nodes[2]->ExpectError(), "LinkProbeReport from server 0"));
  nodes[0]->Send(report);
  nodes[0]->Sync();
  EXPECT_EQ(scheduler_->links().size(), 1);
  link->set_latency_us(120);
  nodes[1]->Send(report);
  nodes[1]->Sync();
  ASSERT_EQ(scheduler_->links().size(), 2);
  std::optional<MeasuredLinks> m = scheduler_->links().Median();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->pairs, 2);
  EXPECT_DOUBLE_EQ(m->latency_us, 120);
  EXPECT_DOUBLE_EQ(m->up_gbps, 1.5);
  EXPECT_TRUE(Running());
}

}  // namespace
}  // namespace bytecomp
