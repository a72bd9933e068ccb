// RoundObserver: what a KeyStore tells of its rounds (rounds started and summed, pushes and
// pull replies with their bytes and codecs, nothing for refusals and aborts), and
// RoundTelemetry, which turns that into the server's metrics and timeline.
#include "bytecomp/server/round_observer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/text_proto.h"
#include "bytecomp/server/key_store.h"
#include "server_test_util.h"

namespace bytecomp::server {
namespace {

using server_test::kN;

// Every call, as a line.
class RecordingObserver : public RoundObserver {
 public:
  void RoundStarted(uint64_t key) override { events.push_back(absl::StrCat("start ", key)); }
  void PushAccepted(absl::string_view codec, int64_t wire, int64_t raw) override {
    events.push_back(absl::StrCat("push '", codec, "' ", wire, " ", raw));
  }
  void RoundSummed(uint64_t key, uint64_t iteration, absl::string_view codec,
                   int64_t bytes) override {
    events.push_back(
        absl::StrCat("summed ", key, " iteration ", iteration, " '", codec, "' ", bytes));
  }
  void PullAnswered(absl::string_view codec, int64_t wire, int64_t raw) override {
    events.push_back(absl::StrCat("pull '", codec, "' ", wire, " ", raw));
  }
  // The events since the last look.
  std::vector<std::string> Take() {
    std::vector<std::string> taken;
    taken.swap(events);
    return taken;
  }
  std::vector<std::string> events;
};

const uint64_t kKey = MakeKey(1, 0);

TEST(RoundObserverTest, AStoreTellsOfEveryRoundAndNothingOfRefusals) {
  server_test::Store s(/*workers=*/2);
  RecordingObserver seen;
  s.store.Observe(&seen);
  EXPECT_TRUE(s.Pull(1, 0).empty());
  s.Push(0, 0, {1, 2, 3, 4});
  EXPECT_EQ(seen.Take(), (std::vector<std::string>{absl::StrCat("start ", kKey), "push '' 16 16"}));
  s.Push(1, 0, {1, 2, 3, 4});  // completes the round, answers the held pull
  EXPECT_EQ(seen.Take(), (std::vector<std::string>{
                             "push '' 16 16", absl::StrCat("summed ", kKey, " iteration 0 '' 16"),
                             "pull '' 16 16"}));
  s.Pull(0, 0);
  EXPECT_EQ(seen.Take(), std::vector<std::string>{"pull '' 16 16"});
  s.Push(0, 3, {1, 1, 1, 1});  // refused: not the round the key accumulates
  s.Pull(0, 3);
  EXPECT_TRUE(seen.Take().empty());

  // An abort starts the round but carries no bytes; the failed round's pulls get errors.
  proto::DataHeader abort = server_test::Request(proto::OP_PUSH, 0, 1, kN);
  abort.set_error("cannot encode");
  s.Handle(abort);
  s.Push(1, 1, {1, 1, 1, 1});
  s.Pull(0, 1);
  EXPECT_EQ(seen.Take(),
            (std::vector<std::string>{absl::StrCat("start ", kKey), "push '' 16 16",
                                      absl::StrCat("summed ", kKey, " iteration 1 '' 0")}));
}

TEST(RoundObserverTest, CompressedBytesAreCountedUnderTheirCodecs) {
  server_test::Store s(/*workers=*/2);
  RecordingObserver seen;
  s.store.Observe(&seen);
  proto::DataHeader h;
  std::vector<OutgoingReply> reply = s.TwoWayRound(&h);
  ASSERT_EQ(reply.size(), 1u);
  const size_t onebit = reply[0].payload.size();
  EXPECT_EQ(seen.Take(), (std::vector<std::string>{
                             absl::StrCat("start ", kKey), "push 'fp16' 8 16", "push 'fp16' 8 16",
                             absl::StrCat("summed ", kKey, " iteration 7 'fp16' ", onebit),
                             absl::StrCat("pull 'onebit' ", onebit, " 16")}));
}

int Occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(RoundTelemetryTest, BytesAndRoundsGoToTheMetricsAndSummingToTheTimeline) {
  telemetry::NodeMetrics metrics("server", 0);
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/round-telemetry-", getpid(), ".json");
  {
    absl::StatusOr<std::unique_ptr<telemetry::Timeline>> timeline =
        telemetry::Timeline::Open(path, "server 0");
    ASSERT_TRUE(timeline.ok()) << timeline.status();
    RoundTelemetry t(timeline->get(), &metrics);
    t.RoundStarted(MakeKey(3, 2));
    t.PushAccepted("fp16", 8, 16);
    t.PushAccepted("fp16", 8, 16);
    t.RoundSummed(MakeKey(3, 2), /*iteration=*/7, "fp16", /*bytes=*/12);
    t.PullAnswered("onebit", 12, 16);
  }
  EXPECT_EQ(metrics.WireBytes(telemetry::Direction::kIn), 16);
  EXPECT_EQ(metrics.WireBytes(telemetry::Direction::kOut), 12);
  const std::string rendered = metrics.Render();
  EXPECT_NE(rendered.find("bytecomp_rounds_total{rank=\"0\",role=\"server\"} 1\n"),
            std::string::npos)
      << rendered;
  absl::StatusOr<std::string> read = ReadTextFile(path, "timeline");
  ASSERT_TRUE(read.ok()) << read.status();
  const std::string& text = *read;
  // One async span, begin and end, for tensor 3 partition 2 iteration 7.
  EXPECT_EQ(Occurrences(text, "\"name\":\"summed on server\""), 2) << text;
  EXPECT_EQ(Occurrences(text, "\"id\":\"3.2.7\""), 2) << text;
  EXPECT_NE(
      text.find("\"tensor_id\":3,\"partition\":2,\"round\":7,\"bytes\":12,\"codec\":\"fp16\""),
      std::string::npos)
      << text;
}

// Metrics alone (no timeline) still count rounds and bytes.
TEST(RoundTelemetryTest, EitherPartMayBeOff) {
  telemetry::NodeMetrics metrics("server", 2);
  RoundTelemetry only_metrics(nullptr, &metrics);
  only_metrics.RoundStarted(1);
  only_metrics.RoundSummed(1, 0, "", 16);
  only_metrics.PushAccepted("", 16, 16);
  EXPECT_NE(metrics.Render().find("bytecomp_rounds_total{rank=\"2\",role=\"server\"} 1\n"),
            std::string::npos);
  EXPECT_EQ(metrics.WireBytes(telemetry::Direction::kIn), 16);
}

}  // namespace
}  // namespace bytecomp::server
