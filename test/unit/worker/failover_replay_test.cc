// Server failover's worker side on its own: the kept result of each key goes, shared and not
// copied, as a replay with the addressed server's epoch to a replacement of the server it was
// kept for, or once to the server its key moved to; moved keys are found where they went.
#include "failover_replay.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace bytecomp::worker {
namespace {

proto::DataHeader KeptHeader(uint64_t key, uint64_t round) {
  proto::DataHeader header;
  header.set_op(proto::OP_PUSH);
  header.set_key(key);
  header.set_round(round);
  header.set_codec("fp16");
  return header;
}

proto::DataHeader HeaderOfReplay(const FailoverReplay::Replay& replay) {
  proto::DataHeader header;
  EXPECT_TRUE(
      header.ParseFromArray(replay.frames[0].data(), static_cast<int>(replay.frames[0].size())));
  return header;
}

TEST(FailoverReplay, AReplacementGetsItsKeysKeptResultsWithItsEpochSharedNotCopied) {
  FailoverReplay failover(/*servers=*/2);
  const std::string sum(100, 'x');
  zmq::message_t payload(sum.data(), sum.size());
  failover.Keep(MakeKey(1, 0), 0, KeptHeader(MakeKey(1, 0), 4), payload);
  failover.Keep(MakeKey(1, 1), 1, KeptHeader(MakeKey(1, 1), 4), payload);
  failover.Keep(MakeKey(2, 0), 0, KeptHeader(MakeKey(2, 0), 8), payload);
  // A later round of a key replaces what was kept for it.
  failover.Keep(MakeKey(2, 0), 0, KeptHeader(MakeKey(2, 0), 9), payload);
  EXPECT_EQ(failover.kept(), 3);

  std::vector<FailoverReplay::Replay> replays = failover.Replace(0, /*epoch=*/3);
  EXPECT_EQ(failover.epoch(0), 3u);
  EXPECT_EQ(failover.epoch(1), 0u);
  ASSERT_EQ(replays.size(), 2u);
  uint64_t rounds = 0;
  for (const FailoverReplay::Replay& replay : replays) {
    EXPECT_EQ(replay.server, 0);
    const proto::DataHeader header = HeaderOfReplay(replay);
    EXPECT_TRUE(header.replay());
    EXPECT_EQ(header.server_epoch(), 3u);
    EXPECT_EQ(header.key(), replay.key);
    EXPECT_EQ(header.codec(), "fp16");
    rounds += header.round();
    ASSERT_EQ(replay.frames.size(), 2u);
    EXPECT_EQ(replay.frames[1].data(), payload.data());  // the reply's buffer, shared
  }
  EXPECT_EQ(rounds, 4u + 9u);
  // Another replacement of the same rank gets them again, with its epoch.
  replays = failover.Replace(0, /*epoch=*/4);
  ASSERT_EQ(replays.size(), 2u);
  EXPECT_EQ(HeaderOfReplay(replays[0]).server_epoch(), 4u);
}

TEST(FailoverReplay, MovedKeysAreFoundWhereTheyWentAndReplayedThereOnce) {
  FailoverReplay failover(/*servers=*/3);
  TensorLayout layout;
  layout.tensor_id = 7;
  layout.element_count = 3;
  layout.partition_server = {2, 2, 1};
  zmq::message_t payload(std::string(40, 'y').data(), 40);
  failover.Keep(MakeKey(7, 0), 2, KeptHeader(MakeKey(7, 0), 1), payload);
  failover.Keep(MakeKey(7, 2), 1, KeptHeader(MakeKey(7, 2), 1), payload);
  EXPECT_EQ(failover.ServerOf(layout, 0), 2);

  failover.Move(MakeKey(7, 0), 0);
  failover.Move(MakeKey(7, 1), 1);
  EXPECT_EQ(failover.ServerOf(layout, 0), 0);
  EXPECT_EQ(failover.ServerOf(layout, 1), 1);
  EXPECT_EQ(failover.ServerOf(layout, 2), 1);  // not moved: its layout's
  std::vector<FailoverReplay::Replay> replays = failover.ReplaysToNewServers();
  ASSERT_EQ(replays.size(), 1u);  // 7:1 has no kept result; 7:2 did not move
  EXPECT_EQ(replays[0].key, MakeKey(7, 0));
  EXPECT_EQ(replays[0].server, 0);
  EXPECT_EQ(HeaderOfReplay(replays[0]).server_epoch(), 0u);
  EXPECT_TRUE(failover.ReplaysToNewServers().empty());
  // A replacement of its new server gets it from now on, not one of its old server.
  EXPECT_TRUE(failover.Replace(2, 1).empty());
  EXPECT_EQ(failover.Replace(0, 1).size(), 1u);
}

}  // namespace
}  // namespace bytecomp::worker
