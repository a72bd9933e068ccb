// RejoinRecord: what a node reports to a restarted scheduler and what it sends again.
#include "bytecomp/common/rejoin_record.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace bytecomp {
namespace {

proto::ControlMessage Declare(const std::string& name) {
  proto::ControlMessage m;
  m.mutable_declare_tensor()->set_name(name);
  m.mutable_declare_tensor()->set_element_count(10);
  return m;
}

proto::ControlMessage Reply(const std::string& name, uint32_t id, bool ok = true) {
  proto::ControlMessage m;
  m.mutable_declare_reply()->set_name(name);
  m.mutable_declare_reply()->set_ok(ok);
  m.mutable_declare_reply()->set_tensor_id(id);
  return m;
}

proto::ControlMessage Barrier(uint64_t sequence, bool release) {
  proto::ControlMessage m;
  if (release) {
    m.mutable_barrier_release()->set_group("workers");
    m.mutable_barrier_release()->set_sequence(sequence);
  } else {
    m.mutable_barrier_request()->set_group("workers");
    m.mutable_barrier_request()->set_sequence(sequence);
  }
  return m;
}

std::vector<std::string> Bodies(const std::vector<proto::ControlMessage>& messages) {
  std::vector<std::string> out;
  for (const proto::ControlMessage& m : messages) {
    if (m.has_declare_tensor()) out.push_back("declare " + m.declare_tensor().name());
    if (m.has_barrier_request()) {
      out.push_back("barrier " + std::to_string(m.barrier_request().sequence()));
    }
    if (m.has_profile_report()) out.push_back("profile");
    if (m.has_link_probe_report()) out.push_back("links");
    if (m.has_worker_done()) out.push_back("done");
  }
  return out;
}

TEST(RejoinRecordTest, ReportsWhatWasAnsweredAndSendsAgainWhatWasNot) {
  RejoinRecord record;
  proto::Topology topology;
  topology.mutable_strategy()->set_version(1);
  record.Registered(topology);
  proto::ControlMessage links;
  links.mutable_link_probe_report();
  record.Sent(links);
  record.Sent(Declare("a"));
  record.Sent(Declare("b"));
  record.Sent(Declare("c"));
  record.Received(Reply("a", 0));
  record.Received(Reply("c", 1, /*ok=*/false));  // answered: not sent again, not reported
  record.Sent(Barrier(1, false));
  record.Received(Barrier(1, true));
  record.Sent(Barrier(2, false));
  record.Sent(Declare("b"));  // a repeat is one pending declaration
  proto::ControlMessage prepare;
  prepare.mutable_strategy_prepare()->set_version(2);
  record.Received(prepare);

  proto::Rejoin report = record.Report();
  ASSERT_EQ(report.declarations_size(), 1);
  EXPECT_EQ(report.declarations(0).name(), "a");
  EXPECT_EQ(report.strategy().version(), 1u);
  EXPECT_EQ(report.prepared_version(), 2u);
  ASSERT_EQ(report.released_size(), 1);
  EXPECT_EQ(report.released(0).group(), "workers");
  EXPECT_EQ(report.released(0).sequence(), 1u);
  EXPECT_EQ(Bodies(record.Unanswered()),
            (std::vector<std::string>{"links", "declare b", "barrier 2"}));

  proto::ControlMessage commit;
  commit.mutable_strategy_commit()->mutable_strategy()->set_version(2);
  record.Received(commit);
  record.Received(Reply("b", 1));
  record.Received(Barrier(2, true));
  proto::ControlMessage done;
  done.mutable_worker_done();
  record.Sent(done);
  report = record.Report();
  EXPECT_EQ(report.strategy().version(), 2u);
  EXPECT_EQ(report.prepared_version(), 0u);
  EXPECT_EQ(report.declarations_size(), 2);
  EXPECT_EQ(report.released(0).sequence(), 2u);
  EXPECT_EQ(Bodies(record.Unanswered()), (std::vector<std::string>{"links", "done"}));
}

TEST(RejoinRecordTest, ABarrierAlreadyReleasedIsNotPending) {
  RejoinRecord record;
  record.Received(Barrier(5, true));
  record.Sent(Barrier(3, false));
  EXPECT_TRUE(record.Unanswered().empty());
}

}  // namespace
}  // namespace bytecomp
