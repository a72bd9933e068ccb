// The node table: lookups by identity and by rank, rank order, what is missing, and the
// writes it refuses.
#include "bytecomp/scheduler/node_table.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace bytecomp {
namespace {

RegisteredNode Node(const std::string& identity, proto::Role role, int rank) {
  RegisteredNode node;
  node.identity = identity;
  node.role = role;
  node.rank = rank;
  return node;
}

TEST(NodeTableTest, FindsNodesByIdentityAndRankAndListsThemWorkersFirstByRank) {
  NodeTable table(3, 2);
  EXPECT_EQ(table.Missing(),
            "worker ranks 0, 1, 2 (0 of 3 workers registered); server ranks 0, 1 (0 of 2 "
            "servers registered)");
  ASSERT_TRUE(table.Add(Node("b", proto::ROLE_SERVER, 1)).ok());
  ASSERT_TRUE(table.Add(Node("c", proto::ROLE_WORKER, 2)).ok());
  ASSERT_TRUE(table.Add(Node("a", proto::ROLE_WORKER, 0)).ok());
  EXPECT_EQ(table.size(), 3);
  EXPECT_FALSE(table.all_registered());
  EXPECT_EQ(table.Missing(),
            "worker rank 1 (2 of 3 workers registered); server rank 0 (1 of 2 servers "
            "registered)");
  ASSERT_NE(table.Find("c"), nullptr);
  EXPECT_EQ(NodeTable::Name(*table.Find("c")), "worker 2");
  EXPECT_EQ(table.Find("nobody"), nullptr);
  EXPECT_EQ(table.At(proto::ROLE_WORKER, 1), nullptr);
  EXPECT_EQ(table.At(proto::ROLE_SERVER, 1)->identity, "b");
  EXPECT_EQ(table.At(proto::ROLE_SERVER, 2), nullptr);
  EXPECT_EQ(table.At(proto::ROLE_SCHEDULER, 0), nullptr);
  EXPECT_EQ(table.WorkerIdentities(), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(table.ServerIdentities(), (std::vector<std::string>{"b"}));
  EXPECT_EQ(table.AllIdentities(), (std::vector<std::string>{"a", "c", "b"}));
  ASSERT_TRUE(table.Add(Node("d", proto::ROLE_WORKER, 1)).ok());
  ASSERT_TRUE(table.Add(Node("e", proto::ROLE_SERVER, 0)).ok());
  EXPECT_TRUE(table.all_registered());
  EXPECT_EQ(table.Missing(), "");
  std::vector<std::string> registered;
  for (const RegisteredNode* node : table.Registered()) registered.push_back(node->identity);
  EXPECT_EQ(registered, (std::vector<std::string>{"a", "d", "c", "e", "b"}));
}

TEST(NodeTableTest, RefusesWritesThatWouldBreakIt) {
  NodeTable table(1, 1);
  ASSERT_TRUE(table.Add(Node("a", proto::ROLE_WORKER, 0)).ok());
  auto refused = [&](const RegisteredNode& node) {
    const absl::Status s = table.Add(node);
    EXPECT_FALSE(s.ok());
    return std::string(s.message());
  };
  EXPECT_EQ(refused(Node("x", proto::ROLE_WORKER, 0)), "worker 0 is registered already");
  EXPECT_EQ(refused(Node("x", proto::ROLE_SERVER, 1)), "server 1 is out of range");
  EXPECT_EQ(refused(Node("x", proto::ROLE_SERVER, -1)), "server -1 is out of range");
  EXPECT_EQ(refused(Node("a", proto::ROLE_SERVER, 0)),
            "server 0: its identity is empty or registered already");
  EXPECT_EQ(refused(Node("", proto::ROLE_SERVER, 0)),
            "server 0: its identity is empty or registered already");
  EXPECT_EQ(refused(Node("x", proto::ROLE_SCHEDULER, 0)), "a scheduler cannot register");
  EXPECT_EQ(table.size(), 1);
  EXPECT_EQ(table.At(proto::ROLE_SERVER, 0), nullptr);
}

// A node is found by its token, and moving it to a new connection keeps everything else.
TEST(NodeTableTest, FindsNodesByTokenAndMovesThemToANewConnection) {
  NodeTable table(2, 1);
  RegisteredNode w0 = Node("a", proto::ROLE_WORKER, 0);
  w0.token = NewNodeToken();
  w0.hostname = "hostA";
  RegisteredNode s0 = Node("b", proto::ROLE_SERVER, 0);
  s0.token = NewNodeToken();
  ASSERT_TRUE(table.Add(w0).ok());
  ASSERT_TRUE(table.Add(s0).ok());
  ASSERT_NE(table.FindByToken(w0.token), nullptr);
  EXPECT_EQ(NodeTable::Name(*table.FindByToken(w0.token)), "worker 0");
  EXPECT_EQ(NodeTable::Name(*table.FindByToken(s0.token)), "server 0");
  EXPECT_EQ(table.FindByToken(NewNodeToken()), nullptr);

  ASSERT_TRUE(table.MoveConnection(proto::ROLE_WORKER, 0, "a2").ok());
  EXPECT_EQ(table.Find("a"), nullptr);
  ASSERT_NE(table.Find("a2"), nullptr);
  EXPECT_EQ(table.Find("a2")->hostname, "hostA");
  EXPECT_EQ(table.At(proto::ROLE_WORKER, 0)->identity, "a2");
  EXPECT_EQ(table.size(), 2);
  // Not to another node's connection, not to none, not for a free rank.
  EXPECT_EQ(table.MoveConnection(proto::ROLE_WORKER, 0, "b").message(),
            "worker 0: the new connection's identity is empty or another node's");
  EXPECT_FALSE(table.MoveConnection(proto::ROLE_WORKER, 0, "").ok());
  EXPECT_EQ(table.MoveConnection(proto::ROLE_WORKER, 1, "c").message(),
            "worker 1 is not registered");
  EXPECT_EQ(table.At(proto::ROLE_WORKER, 0)->identity, "a2");
  EXPECT_EQ(table.Find("b")->role, proto::ROLE_SERVER);
}

}  // namespace
}  // namespace bytecomp
