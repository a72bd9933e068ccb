// Shared set-up for the socket-free protocol tests: a job's config, a node table with its
// nodes registered (workers "w0", "w1", ...; servers "s0", ...), and the messages an Outbox
// holds for one node.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/config.h"
#include "bytecomp/scheduler/local_groups.h"
#include "bytecomp/scheduler/node_table.h"
#include "bytecomp/scheduler/outbox.h"
#include "cluster_config.pb.h"
#include "control.pb.h"

namespace bytecomp::testing {

inline bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// `overrides` with W workers and S servers, the other fields defaulted.
inline proto::ClusterConfig JobConfig(int workers, int servers,
                                      proto::ClusterConfig overrides = {}) {
  overrides.set_scheduler_address("127.0.0.1:1");
  overrides.set_num_workers(workers);
  overrides.set_num_servers(servers);
  return WithClusterDefaults(overrides);
}

inline std::string WorkerId(int rank) { return absl::StrCat("w", rank); }
inline std::string ServerId(int rank) { return absl::StrCat("s", rank); }

// Adds worker `rank` ("w<rank>", pid 100 + rank) on `machine`.
inline void AddWorker(NodeTable& table, int rank, const std::string& machine = "hostA") {
  RegisteredNode node;
  node.identity = WorkerId(rank);
  node.role = proto::ROLE_WORKER;
  node.rank = rank;
  node.hostname = machine;
  node.pid = 100 + rank;
  node.slot.rank = rank;
  node.slot.machine = machine;
  ASSERT_TRUE(table.Add(node).ok());
}

// Adds server `rank` ("s<rank>", data address tcp://127.0.0.1:<7000 + rank>).
inline void AddServer(NodeTable& table, int rank) {
  RegisteredNode node;
  node.identity = ServerId(rank);
  node.role = proto::ROLE_SERVER;
  node.rank = rank;
  node.hostname = "hostS";
  node.pid = 200 + rank;
  node.data_address = absl::StrCat("tcp://127.0.0.1:", 7000 + rank);
  ASSERT_TRUE(table.Add(node).ok());
}

// Registers every node (worker r on machines[r], default "hostA") and groups the workers by
// machine, as Registration does when the topology goes out.
inline void RegisterAll(NodeTable& table, const std::vector<std::string>& machines = {}) {
  for (int r = 0; r < table.num_workers(); ++r) {
    AddWorker(table, r, r < static_cast<int>(machines.size()) ? machines[r] : "hostA");
  }
  for (int s = 0; s < table.num_servers(); ++s) AddServer(table, s);
  absl::StatusOr<LocalAssignment> local = AssignLocalRanks(table.WorkerSlots());
  ASSERT_TRUE(local.ok()) << local.status();
  table.SetLocal(*local);
}

// The messages for `to`, in order.
inline std::vector<proto::ControlMessage> To(const Outbox& out, const std::string& to) {
  std::vector<proto::ControlMessage> got;
  for (const OutgoingControl& m : out.messages()) {
    if (m.to == to) got.push_back(m.message);
  }
  return got;
}

// The recipients of every message, in order.
inline std::vector<std::string> Recipients(const Outbox& out) {
  std::vector<std::string> got;
  for (const OutgoingControl& m : out.messages()) got.push_back(m.to);
  return got;
}

// The one message for `to`, which must have body `body`.
inline proto::ControlMessage Only(const Outbox& out, const std::string& to,
                                  proto::ControlMessage::BodyCase body) {
  const std::vector<proto::ControlMessage> got = To(out, to);
  EXPECT_EQ(got.size(), 1u) << "messages for " << to;
  if (got.size() != 1) return {};
  EXPECT_EQ(got[0].body_case(), body) << got[0].ShortDebugString();
  return got[0];
}

}  // namespace bytecomp::testing
