// Registration without sockets: ranks, refusals, and the topology once the job is complete.
#include "bytecomp/scheduler/registration.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "protocol_test_util.h"

namespace bytecomp {
namespace {

using proto::ControlMessage;
using proto::ROLE_SERVER;
using proto::ROLE_WORKER;
using testing::Contains;
using testing::JobConfig;
using testing::To;

proto::Register Reg(proto::Role role, int rank, const std::string& hostname = "hostA",
                    const std::string& data_address = "") {
  proto::Register r;
  r.set_role(role);
  r.set_requested_rank(rank);
  r.set_hostname(hostname);
  r.set_pid(4242);
  r.set_data_address(!data_address.empty() || role != ROLE_SERVER ? data_address
                                                                  : "tcp://127.0.0.1:7000");
  r.set_token(TokenBytes(NewNodeToken()));
  return r;
}

// A worker on `machine` asking for a local rank in a machine of `local_size` workers.
proto::Register OnMachine(int rank, const std::string& machine, int local_rank, int local_size) {
  proto::Register r = Reg(ROLE_WORKER, rank, "host");
  r.set_machine(machine);
  r.set_requested_local_rank(local_rank);
  r.set_declared_local_size(local_size);
  return r;
}

class RegistrationTest : public ::testing::Test {
 protected:
  void Start(int workers, int servers, proto::ClusterConfig overrides = {}) {
    config_ = JobConfig(workers, servers, overrides);
    nodes_ = std::make_unique<NodeTable>(workers, servers);
    ASSERT_TRUE(strategy_.LoadInitial("").ok());
    registration_ = std::make_unique<Registration>(config_, nodes_.get(), strategy_, 0);
  }
  // Registers `reg` from `identity`; the outbox, and whether the topology went out.
  bool Register(const std::string& identity, const proto::Register& reg, Outbox* out) {
    return registration_->Handle(identity, reg, 50, out);
  }
  // The error `identity` gets for `reg`; the registration must have been refused.
  std::string Refusal(const std::string& identity, const proto::Register& reg) {
    Outbox out;
    EXPECT_FALSE(Register(identity, reg, &out));
    return testing::Only(out, identity, ControlMessage::kError).error().message();
  }

  proto::ClusterConfig config_;
  StrategyKeeper strategy_;
  std::unique_ptr<NodeTable> nodes_;
  std::unique_ptr<Registration> registration_;
};

TEST_F(RegistrationTest, AssignsRequestedAndFreeRanksAndSendsTheTopologyOnceComplete) {
  proto::ClusterConfig config;
  config.set_partition_bytes(1 << 16);
  Start(3, 2, config);
  Outbox out;
  EXPECT_FALSE(Register("sA", Reg(ROLE_SERVER, 1, "hostS", "tcp://10.0.0.1:7001"), &out));
  EXPECT_FALSE(Register("sB", Reg(ROLE_SERVER, -1, "hostS", "tcp://10.0.0.2:7002"), &out));
  EXPECT_FALSE(Register("wX", Reg(ROLE_WORKER, 2, "hostA"), &out));
  EXPECT_FALSE(Register("wY", Reg(ROLE_WORKER, -1, "hostB"), &out));  // lowest free: 0
  EXPECT_TRUE(out.messages().empty()) << "no answer before the job is complete";
  EXPECT_EQ(nodes_->At(ROLE_SERVER, 0)->identity, "sB");
  EXPECT_EQ(nodes_->At(ROLE_WORKER, 0)->identity, "wY");
  EXPECT_EQ(nodes_->local(), nullptr);

  EXPECT_TRUE(Register("wZ", Reg(ROLE_WORKER, -1, "hostA"), &out));  // 1
  EXPECT_EQ(testing::Recipients(out), (std::vector<std::string>{"wY", "wZ", "wX", "sB", "sA"}));
  struct Expected {
    std::string id;
    int rank, local_rank, local_size, local_root;
  };
  for (const Expected& e :
       {Expected{"wY", 0, 0, 1, 0}, Expected{"wZ", 1, 0, 2, 1}, Expected{"wX", 2, 1, 2, 1},
        Expected{"sB", 0, 0, 0, 0}, Expected{"sA", 1, 0, 0, 0}}) {
    const proto::Topology t = testing::Only(out, e.id, ControlMessage::kTopology).topology();
    EXPECT_EQ(t.your_rank(), e.rank) << e.id;
    EXPECT_EQ(t.num_workers(), 3);
    EXPECT_EQ(t.num_servers(), 2);
    ASSERT_EQ(t.servers_size(), 2);
    EXPECT_EQ(t.servers(0).data_address(), "tcp://10.0.0.2:7002");
    EXPECT_EQ(t.servers(1).rank(), 1);
    EXPECT_EQ(t.servers(1).data_address(), "tcp://10.0.0.1:7001");
    EXPECT_EQ(t.config().partition_bytes(), 1 << 16);
    EXPECT_EQ(t.config().heartbeat_timeout_ms(), 5000);  // defaults filled in
    EXPECT_EQ(t.strategy().version(), 1u);
    EXPECT_EQ(t.local_rank(), e.local_rank) << e.id;
    EXPECT_EQ(t.local_size(), e.local_size) << e.id;
    EXPECT_EQ(t.local_root(), e.local_root) << e.id;
    // A flat job: every worker pushes, which only the servers are told.
    const std::vector<int> pushers =
        e.id[0] == 's' ? std::vector<int>{0, 1, 2} : std::vector<int>{};
    EXPECT_EQ(std::vector<int>(t.pushers().begin(), t.pushers().end()), pushers) << e.id;
  }
  ASSERT_NE(nodes_->local(), nullptr);
  EXPECT_EQ(nodes_->local()->machines, (std::vector<std::vector<int>>{{0}, {1, 2}}));
}

// A keyed job seals its data messages: each node brings its data key, the servers learn the
// workers' and the workers the servers', and a node whose data_protection differs is refused.
TEST_F(RegistrationTest, DataKeysGoToTheNodesThatOpenWhatTheyAreSealedWith) {
  proto::ClusterConfig keyed;
  keyed.set_key_file("/etc/bytecomp/cluster.key");
  Start(2, 1, keyed);
  auto with_key = [](proto::Register r, char fill) {
    r.set_data_key(std::string(32, fill));
    return r;
  };
  EXPECT_TRUE(Contains(Refusal("w?", Reg(ROLE_WORKER, 0)),
                       "seals its data messages (data_protection: encrypt) and this node "
                       "brings no data key"));
  EXPECT_TRUE(Contains(Refusal("w?", with_key(Reg(ROLE_WORKER, 0), '\0')), "all zero"));
  proto::Register short_key = Reg(ROLE_WORKER, 0);
  short_key.set_data_key("short");
  EXPECT_TRUE(Contains(Refusal("w?", short_key), "data key is 5 bytes, not 32"));
  Outbox out;
  EXPECT_FALSE(Register("w0", with_key(Reg(ROLE_WORKER, 0), 'a'), &out));
  EXPECT_FALSE(Register("w1", with_key(Reg(ROLE_WORKER, 1), 'b'), &out));
  EXPECT_TRUE(Register("s0", with_key(Reg(ROLE_SERVER, 0), 'c'), &out));
  const proto::Topology server = testing::Only(out, "s0", ControlMessage::kTopology).topology();
  ASSERT_EQ(server.worker_data_keys_size(), 2);
  EXPECT_EQ(server.worker_data_keys(0), std::string(32, 'a'));
  EXPECT_EQ(server.worker_data_keys(1), std::string(32, 'b'));
  for (const char* w : {"w0", "w1"}) {
    const proto::Topology worker = testing::Only(out, w, ControlMessage::kTopology).topology();
    EXPECT_EQ(worker.worker_data_keys_size(), 0) << "no worker learns another's key";
    EXPECT_EQ(worker.servers(0).data_key(), std::string(32, 'c'));
  }

  proto::ClusterConfig curve = keyed;
  curve.set_data_protection(proto::ClusterConfig::curve);
  Start(1, 1, curve);
  EXPECT_TRUE(Contains(Refusal("w?", with_key(Reg(ROLE_WORKER, 0), 'a')),
                       "this node seals its data messages (it brings a data key) and the job "
                       "does not (data_protection: curve)"));
  Start(1, 1);  // no cluster key: nothing sealed
  EXPECT_TRUE(Contains(Refusal("w?", with_key(Reg(ROLE_WORKER, 0), 'a')), "(no cluster key)"));
}

TEST_F(RegistrationTest, RefusesRankConflictsDuplicatesBadAddressesAndLateNodes) {
  Start(2, 1);
  Outbox out;
  ASSERT_FALSE(Register("w0", Reg(ROLE_WORKER, 0), &out));
  EXPECT_TRUE(Contains(Refusal("other", Reg(ROLE_WORKER, 0, "hostB")),
                       "registration rejected: requested worker rank 0 is already taken by pid "
                       "4242 on hostA"));
  EXPECT_TRUE(Contains(Refusal("other", Reg(ROLE_WORKER, 5)),
                       "requested worker rank 5 is out of range: the job has 2 workers (ranks "
                       "0..1)"));
  EXPECT_TRUE(Contains(Refusal("w0", Reg(ROLE_WORKER, 1)), "already registered as worker 0"));
  EXPECT_TRUE(Contains(Refusal("s", Reg(ROLE_SERVER, -1, "hostA", "not-an-address")),
                       "server data_address 'not-an-address' is not tcp://host:port"));
  EXPECT_TRUE(Contains(Refusal("other", Reg(proto::ROLE_SCHEDULER, -1)),
                       "role must be worker or server, got scheduler"));
  EXPECT_EQ(nodes_->size(), 1) << "refusals register nothing";
  // A refused connection may try again with a free rank.
  ASSERT_FALSE(Register("other", Reg(ROLE_WORKER, -1, "hostB"), &out));
  EXPECT_EQ(nodes_->At(ROLE_WORKER, 1)->identity, "other");
  EXPECT_TRUE(Contains(Refusal("w1", Reg(ROLE_WORKER, -1)), "all 2 worker ranks are taken"));
  EXPECT_TRUE(out.messages().empty());
  EXPECT_TRUE(Register("s", Reg(ROLE_SERVER, 0), &out));
  EXPECT_EQ(out.messages().size(), 3u);  // the topology, once to each
  EXPECT_TRUE(Contains(Refusal("late", Reg(ROLE_SERVER, -1)),
                       "the job is full: all 2 workers and 1 servers have registered"));
}

TEST_F(RegistrationTest, HierarchicalTopologyListsTheLocalRootsAsPushers) {
  proto::ClusterConfig config;
  config.set_hierarchical(true);
  Start(4, 1, config);
  Outbox out;
  Register("s0", Reg(ROLE_SERVER, 0), &out);
  Register("w0", Reg(ROLE_WORKER, 0, "hostA"), &out);
  Register("w1", Reg(ROLE_WORKER, 1, "hostB"), &out);
  Register("w2", Reg(ROLE_WORKER, 2, "hostA"), &out);
  ASSERT_TRUE(Register("w3", Reg(ROLE_WORKER, 3, "hostB"), &out));
  struct Expected {
    std::string id;
    int local_rank, local_root;
  };
  for (const Expected& e :
       {Expected{"w0", 0, 0}, Expected{"w1", 0, 1}, Expected{"w2", 1, 0}, Expected{"w3", 1, 1}}) {
    const proto::Topology t = testing::Only(out, e.id, ControlMessage::kTopology).topology();
    EXPECT_EQ(t.local_rank(), e.local_rank) << e.id;
    EXPECT_EQ(t.local_size(), 2);
    EXPECT_EQ(t.local_root(), e.local_root) << e.id;
    EXPECT_TRUE(t.pushers().empty()) << e.id;  // the servers' alone
    EXPECT_TRUE(t.config().hierarchical());
  }
  const proto::Topology st = testing::Only(out, "s0", ControlMessage::kTopology).topology();
  EXPECT_EQ(std::vector<int>(st.pushers().begin(), st.pushers().end()), (std::vector<int>{0, 1}));
}

TEST_F(RegistrationTest, HierarchicalJobRefusesATakenLocalRankAndEndsWhenAMachineIsShort) {
  proto::ClusterConfig config;
  config.set_hierarchical(true);
  Start(3, 1, config);
  Outbox out;
  Register("s0", Reg(ROLE_SERVER, 0), &out);
  Register("w0", OnMachine(0, "m1", 0, 3), &out);
  EXPECT_TRUE(Contains(Refusal("w1", OnMachine(1, "m1", 0, 3)),
                       "asked for local rank 0, already taken by worker 0"));
  Register("w1", OnMachine(1, "m1", 1, 3), &out);
  ASSERT_TRUE(out.messages().empty());
  // Everyone registered, but machine m1 has 2 of its 3 workers: the job cannot start.
  EXPECT_FALSE(Register("w2", OnMachine(2, "m2", 0, 1), &out));
  ASSERT_TRUE(out.job_end().has_value());
  EXPECT_EQ(out.job_end()->code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(std::string(out.job_end()->message()), "missing local rank 2"))
      << *out.job_end();
  EXPECT_EQ(testing::Recipients(out), (std::vector<std::string>{"w0", "w1", "w2", "s0"}));
  for (const std::string id : {"w0", "w1", "w2", "s0"}) {
    const std::string reason =
        testing::Only(out, id, ControlMessage::kShutdown).shutdown().reason();
    EXPECT_TRUE(Contains(reason,
                         "cannot group the workers by machine: machine 'm1' declared "
                         "local size 3 but 2 workers registered from it"))
        << reason;
  }
  EXPECT_EQ(nodes_->local(), nullptr);
}

TEST_F(RegistrationTest, FlatJobIgnoresLocalRanksAndNumbersEachMachineInRankOrder) {
  Start(2, 1);
  Outbox out;
  Register("s0", Reg(ROLE_SERVER, 0), &out);
  Register("w1", OnMachine(1, "m", 0, 5), &out);  // informational: not checked, not honoured
  ASSERT_TRUE(Register("w0", OnMachine(0, "m", 0, 5), &out));
  EXPECT_EQ(testing::Only(out, "w0", ControlMessage::kTopology).topology().local_rank(), 0);
  EXPECT_EQ(testing::Only(out, "w1", ControlMessage::kTopology).topology().local_rank(), 1);
}

TEST_F(RegistrationTest, RefusesRegistrationsWithoutATokenOrWithOversizedFields) {
  Start(1, 1);
  proto::Register none = Reg(ROLE_WORKER, 0);
  none.clear_token();
  EXPECT_TRUE(
      Contains(Refusal("a", none),
               "the Register carries no token (16 random bytes, not all zero; got 0 bytes)"));
  proto::Register zero = Reg(ROLE_WORKER, 0);
  zero.set_token(std::string(16, '\0'));
  EXPECT_TRUE(Contains(Refusal("a", zero), "carries no token"));
  proto::Register long_host = Reg(ROLE_WORKER, 0, std::string(100000, 'h'));
  EXPECT_TRUE(Contains(Refusal("a", long_host), "hostname longer than 256 bytes (100000)"));
  EXPECT_EQ(nodes_->size(), 0);
  // The refusal's log line is cut short, whatever the peer sent.
  Outbox out;
  Register("a", long_host, &out);
  ASSERT_EQ(out.refusals().size(), 1u);
  EXPECT_LT(out.refusals()[0].log_line.size(), 400u);
}

// Peer-supplied text is logged: a hostname holding a newline would forge a log line ("worker 0
// failed: ..."). It is refused, and the refusal shows the bytes escaped.
TEST_F(RegistrationTest, RefusesHostnamesAndAddressesWithControlBytes) {
  Start(1, 1);
  proto::Register forged =
      Reg(ROLE_WORKER, 0, "host\nE 2026-11-27 [scheduler] worker 0 failed: FORGED LOG LINE");
  EXPECT_TRUE(Contains(Refusal("a", forged),
                       "hostname 'host\\x0aE 2026-11-27 [scheduler] worker 0 failed: FORGED LOG "
                       "LINE' holds a byte outside printable ASCII"))
      << Refusal("a", forged);
  proto::Register machine = Reg(ROLE_WORKER, 0);
  machine.set_machine("m\r1");
  EXPECT_TRUE(Contains(Refusal("a", machine), "machine 'm\\x0d1' holds a byte"));
  proto::Register address = Reg(ROLE_SERVER, 0);
  address.set_data_address(std::string("tcp://h:1\0x", 11));
  EXPECT_TRUE(Contains(Refusal("a", address), "data_address 'tcp://h:1\\x00x' holds a byte"));
  EXPECT_EQ(nodes_->size(), 0);
  Outbox out;
  Register("a", forged, &out);
  ASSERT_EQ(out.refusals().size(), 1u);
  EXPECT_EQ(out.refusals()[0].log_line.find('\n'), std::string::npos);
}

// Local sizes and ranks are checked against the job before anything is sized by them: a
// worker claiming a machine of 2^31 - 1 workers is refused, and the scheduler stays up.
TEST_F(RegistrationTest, LocalSizesAndRanksBeyondTheJobAreRefused) {
  proto::ClusterConfig config;
  config.set_hierarchical(true);
  Start(2, 1, config);
  EXPECT_EQ(Refusal("w", OnMachine(0, "m", 0, 2147483647)),
            "registration rejected: declared local size 2147483647 (BYTECOMP_LOCAL_SIZE) is "
            "outside [1, 2]: the job has 2 workers");
  EXPECT_TRUE(Contains(Refusal("w", OnMachine(0, "m", 5000000, 2)),
                       "requested local rank 5000000 (BYTECOMP_LOCAL_RANK) is outside [0, 2)"));
  EXPECT_TRUE(Contains(Refusal("w", OnMachine(0, "m", 0, 0)), "declared local size 0"));
  EXPECT_EQ(nodes_->size(), 0);
  Outbox out;
  ASSERT_FALSE(Register("w0", OnMachine(0, "m", 0, 2), &out));
  EXPECT_EQ(nodes_->size(), 1);
}

// Servers learn every worker's token with the topology, to check pushes and pulls; workers
// learn none.
TEST_F(RegistrationTest, ServersGetTheWorkersTokensWorkersNone) {
  Start(2, 1);
  Outbox out;
  const proto::Register w0 = Reg(ROLE_WORKER, 0), w1 = Reg(ROLE_WORKER, 1);
  Register("w0", w0, &out);
  Register("w1", w1, &out);
  ASSERT_TRUE(Register("s0", Reg(ROLE_SERVER, 0), &out));
  const proto::Topology st = testing::Only(out, "s0", ControlMessage::kTopology).topology();
  ASSERT_EQ(st.worker_tokens_size(), 2);
  EXPECT_EQ(st.worker_tokens(0), w0.token());
  EXPECT_EQ(st.worker_tokens(1), w1.token());
  for (const std::string id : {"w0", "w1"}) {
    EXPECT_EQ(testing::Only(out, id, ControlMessage::kTopology).topology().worker_tokens_size(), 0);
  }
  EXPECT_TRUE(SameToken(nodes_->At(ROLE_WORKER, 1)->token, *TokenFromBytes(w1.token())));
}

}  // namespace
}  // namespace bytecomp
