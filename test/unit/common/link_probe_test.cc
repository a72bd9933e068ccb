// Link probe statistics and sequencing on a fake clock, the ZeroMQ exchange against a scripted
// ROUTER, and the cluster config's link probe fields.
#include "bytecomp/common/link_probe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>

#include "bytecomp/common/config.h"
#include "bytecomp/common/net.h"
#include "bytecomp/common/transport.h"
#include "data.pb.h"

namespace bytecomp {
namespace {

// A link of fixed round-trip latency and per-direction bandwidth (bytes per us) on a fake
// clock: a round trip takes rtt + sent / up + replied / down. The server's bandwidth turn is
// busy for the first `busy_answers` BEGINs (or, with busy_until_us, until then).
class FakeLink : public ProbeExchange {
 public:
  FakeLink(int64_t* now, double rtt_us, double up_bytes_per_us, double down_bytes_per_us)
      : now_(now), rtt_(rtt_us), up_(up_bytes_per_us), down_(down_bytes_per_us) {}
  absl::StatusOr<proto::ProbeTurn> RoundTrip(const ProbeRequest& r, int64_t deadline_us) override {
    ++calls;
    turns.push_back(r.turn);
    if (log != nullptr) {
      const std::string what = r.turn != proto::PROBE_TURN_NONE ? proto::ProbeTurn_Name(r.turn)
                               : r.send_bytes > 1000            ? "up"
                               : r.reply_bytes > 1000           ? "down"
                                                                : "small";
      log->push_back(name + " " + what);
    }
    double t = rtt_ + r.send_bytes / up_ + r.reply_bytes / down_;
    if (calls == slow_call) t *= 10;
    const int64_t done = *now_ + static_cast<int64_t>(t);
    if (done > deadline_us || hang) {
      *now_ = std::max(*now_, deadline_us);
      return absl::DeadlineExceededError("no reply before the time limit");
    }
    if (calls == fail_call) return absl::FailedPreconditionError("server 0: refused");
    *now_ = done;
    if (r.turn == proto::PROBE_TURN_END) held = false;
    if (r.turn == proto::PROBE_TURN_QUERY) {
      return *now_ < busy_until_us ? proto::PROBE_TURN_BUSY : proto::PROBE_TURN_IDLE;
    }
    if (r.turn != proto::PROBE_TURN_BEGIN) return proto::PROBE_TURN_NONE;
    turn_ms.push_back(r.turn_ms);
    if (busy_answers > 0 || *now_ < busy_until_us) {
      --busy_answers;
      return proto::PROBE_TURN_BUSY;
    }
    held = true;
    return proto::PROBE_TURN_GRANTED;
  }
  void Wait(int64_t us) override {
    waits.push_back(us);
    *now_ += us;
  }
  int calls = 0;
  int slow_call = -1;
  int fail_call = -1;
  bool hang = false;
  int busy_answers = 0;
  int64_t busy_until_us = 0;
  bool held = false;  // granted and not ended
  // Where set: every round trip as "<name> <BEGIN|END|up|down|small|...>", in call order.
  std::vector<std::string>* log = nullptr;
  std::string name;
  std::vector<proto::ProbeTurn> turns;
  std::vector<int64_t> turn_ms;
  std::vector<int64_t> waits;

 private:
  int64_t* now_;
  double rtt_, up_, down_;
};

LinkProbeOptions Options() {
  LinkProbeOptions o;
  o.latency_probes = 5;
  o.latency_bytes = 0;  // a pure round trip: latency is exactly the rtt
  o.transfers = 3;
  o.transfer_bytes = 1000000;
  o.timeout_ms = 10000;
  return o;
}

TEST(LinkProbeTest, LatencyAndBandwidthOfAnIdealLink) {
  int64_t now = 0;
  // 1 Gbit/s = 125 bytes/us up, 0.5 Gbit/s down, 200 us round trip.
  FakeLink link(&now, 200, 125, 62.5);
  LinkSamples samples;
  ASSERT_TRUE(CollectLinkSamples(
                  link, Options(), 1 << 30, [&] { return now; }, &samples)
                  .ok());
  // The uncounted first probe, small ones, the turn, transfers, the turn given back.
  EXPECT_EQ(link.calls, 1 + 5 + 1 + 2 * 3 + 1);
  EXPECT_EQ(samples.latency_us.size(), 5u);
  EXPECT_EQ(samples.up_us.size(), 3u);
  EXPECT_EQ(samples.down_us.size(), 3u);
  EXPECT_EQ(samples.up_us[0], 200 + 8000);
  EXPECT_EQ(samples.down_us[0], 200 + 16000);
  const proto::LinkProbe p = SummarizeLinkSamples(2, samples, 1000000);
  EXPECT_EQ(p.server(), 2);
  EXPECT_DOUBLE_EQ(p.latency_us(), 200);
  EXPECT_NEAR(p.up_gbps(), 1.0, 1e-9);  // the round trip's latency is not counted as transfer
  EXPECT_NEAR(p.down_gbps(), 0.5, 1e-9);
  EXPECT_EQ(p.latency_samples(), 5);
  EXPECT_EQ(p.transfer_samples(), 3);
  EXPECT_EQ(p.probe_bytes(), 1000000);
}

TEST(LinkProbeTest, MediansIgnoreOneSlowProbe) {
  int64_t now = 0;
  FakeLink link(&now, 100, 125, 125);
  link.slow_call = 1 + 5 + 1 + 1;  // the first up transfer takes ten times as long
  LinkSamples samples;
  ASSERT_TRUE(CollectLinkSamples(
                  link, Options(), 1 << 30, [&] { return now; }, &samples)
                  .ok());
  EXPECT_GT(samples.up_us[0], 10 * samples.up_us[1] - 1);
  const proto::LinkProbe p = SummarizeLinkSamples(0, samples, 1000000);
  EXPECT_NEAR(p.up_gbps(), 1.0, 1e-9);
  EXPECT_NEAR(p.down_gbps(), 1.0, 1e-9);
}

TEST(LinkProbeTest, SummaryOfHandMadeSamples) {
  LinkSamples s;
  s.latency_us = {300, 100, 100};  // median 100
  s.up_us = {2100, 1100, 900};     // median 1100: 1000 us of transfer
  s.down_us = {};
  const proto::LinkProbe p = SummarizeLinkSamples(1, s, 250000);
  EXPECT_DOUBLE_EQ(p.latency_us(), 100);
  EXPECT_DOUBLE_EQ(p.up_gbps(), 2.0);  // 2e6 bits in 1000 us
  EXPECT_EQ(p.down_gbps(), 0);         // no sample, no value
  EXPECT_EQ(p.transfer_samples(), 0);
  // A transfer faster than the small probes (noise): the whole round trip is used.
  s.up_us = {50};
  EXPECT_DOUBLE_EQ(SummarizeLinkSamples(1, s, 250000).up_gbps(), 40.0);
}

TEST(LinkProbeTest, ServersShareTheTimeLimitAndAHungOneDoesNotStopTheOthers) {
  int64_t now = 0;
  FakeLink hung(&now, 100, 125, 125);
  hung.hang = true;
  FakeLink fine(&now, 100, 125, 125);
  LinkProbeOptions o = Options();
  o.timeout_ms = 1000;
  const proto::LinkProbeReport r = ProbeLinks({&hung, &fine}, o, [&] { return now; });
  ASSERT_EQ(r.links_size(), 2);
  EXPECT_EQ(r.links(0).server(), 0);
  EXPECT_NE(r.links(0).error().find("no reply before the time limit"), std::string::npos)
      << r.links(0).error();
  EXPECT_NE(r.links(0).error().find("after 0 of 5 small probes"), std::string::npos);
  EXPECT_EQ(r.links(0).latency_us(), 0);
  EXPECT_EQ(r.links(1).error(), "");
  EXPECT_NEAR(r.links(1).up_gbps(), 1.0, 1e-9);
  // Server 0 used its half (500 ms); server 1 its 6 x 8.1 ms + 8 x 0.1 ms (with the turn's).
  EXPECT_NEAR(r.elapsed_ms(), 500 + 6 * 8.1 + 8 * 0.1, 1e-6);

  // Starting at server 1 (a worker of rank 1): the fine server gets the full second first.
  now = 0;
  hung.calls = 0;
  const proto::LinkProbeReport rotated = ProbeLinks(
      {&hung, &fine}, o, [&] { return now; }, 1);
  ASSERT_EQ(rotated.links_size(), 2);
  EXPECT_EQ(rotated.links(0).server(), 1);
  EXPECT_EQ(rotated.links(0).error(), "");
  EXPECT_EQ(rotated.links(1).server(), 0);
  EXPECT_NE(rotated.links(1).error(), "");
  EXPECT_NEAR(rotated.elapsed_ms(), 1000, 1e-6);  // the hung one had what was left
}

TEST(LinkProbeTest, TimeLimitInTheMiddleKeepsWhatCompleted) {
  int64_t now = 0;
  FakeLink link(&now, 100, 125, 125);
  LinkProbeOptions o = Options();
  o.timeout_ms = 20;  // the small probes and the turn (0.7 ms) and two transfers (8.1 ms each)
  const proto::LinkProbeReport r = ProbeLinks({&link}, o, [&] { return now; });
  ASSERT_EQ(r.links_size(), 1);
  EXPECT_DOUBLE_EQ(r.links(0).latency_us(), 100);
  EXPECT_EQ(r.links(0).latency_samples(), 5);
  EXPECT_NEAR(r.links(0).up_gbps(), 1.0, 1e-9);  // one up and one down transfer completed
  EXPECT_NEAR(r.links(0).down_gbps(), 1.0, 1e-9);
  EXPECT_EQ(r.links(0).transfer_samples(), 1);
  EXPECT_NE(r.links(0).error().find("1 of 3 transfers each way"), std::string::npos)
      << r.links(0).error();
  EXPECT_LE(r.elapsed_ms(), 20);
}

TEST(LinkProbeTest, TransfersWaitForTheTurnWithBackoffAndTheLastOneEndsIt) {
  int64_t now = 0;
  FakeLink link(&now, 100, 125, 125);
  link.busy_answers = 7;
  LinkSamples samples;
  ASSERT_TRUE(CollectLinkSamples(
                  link, Options(), 1000000, [&] { return now; }, &samples)
                  .ok());
  // Busy seven times: waits of 2, 4, 8, 16, 32, 32, 32 ms between the asks.
  EXPECT_EQ(link.waits, (std::vector<int64_t>{2000, 4000, 8000, 16000, 32000, 32000, 32000}));
  EXPECT_EQ(link.turn_ms.size(), 8u);
  EXPECT_EQ(link.turn_ms[0], 1000);  // the time left after the small probes, rounded up
  EXPECT_TRUE(samples.got_turn);
  EXPECT_EQ(samples.turn_wait_us, 126000 + 8 * 100);
  EXPECT_FALSE(link.held);  // given back
  // Small probes first, then only BEGINs until granted, the transfers, then END.
  ASSERT_EQ(link.turns.size(), 1u + 5 + 8 + 6 + 1);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(link.turns[i], proto::PROBE_TURN_NONE) << i;
  for (size_t i = 6; i < 14; ++i) EXPECT_EQ(link.turns[i], proto::PROBE_TURN_BEGIN) << i;
  for (size_t i = 14; i < 20; ++i) EXPECT_EQ(link.turns[i], proto::PROBE_TURN_NONE) << i;
  EXPECT_EQ(link.turns[20], proto::PROBE_TURN_END);
  // The wait is not in the samples: the bandwidths are the link's.
  const proto::LinkProbe p = SummarizeLinkSamples(0, samples, 1000000);
  EXPECT_NEAR(p.up_gbps(), 1.0, 1e-9);
  EXPECT_NEAR(p.down_gbps(), 1.0, 1e-9);
}

TEST(LinkProbeTest, TheTimeLimitWhileWaitingForTheTurnIsReported) {
  int64_t now = 0;
  FakeLink link(&now, 100, 125, 125);
  link.busy_until_us = 1 << 30;  // another prober never gives it back (until the server would)
  LinkProbeOptions o = Options();
  o.timeout_ms = 300;
  const proto::LinkProbeReport r = ProbeLinks({&link}, o, [&] { return now; });
  ASSERT_EQ(r.links_size(), 1);
  EXPECT_EQ(r.links(0).error(),
            "link probe: no bandwidth turn before the time limit (another prober held it) (after 5 "
            "of 5 small probes, waited for the bandwidth turn after 299 ms and 0 of 3 transfers "
            "each way)");
  EXPECT_DOUBLE_EQ(r.links(0).latency_us(), 100);  // the small probes still count
  EXPECT_EQ(r.links(0).up_gbps(), 0);
  EXPECT_NEAR(r.elapsed_ms(), 300, 1e-6);
  EXPECT_FALSE(link.held);
}

TEST(LinkProbeTest, AWorkerDoneProbingWaitsUntilEveryServerIsIdle) {
  int64_t now = 0;
  FakeLink idle(&now, 100, 125, 125);
  FakeLink busy(&now, 100, 125, 125);
  busy.busy_until_us = 50000;  // others probe server 1 for 50 ms more
  ASSERT_TRUE(AwaitOtherProbers({&idle, &busy}, 1000000, [&] { return now; }).ok());
  EXPECT_EQ(idle.calls, 1);
  EXPECT_GE(now, 50000);
  EXPECT_LT(now, 50000 + kProbeTurnMaxWaitUs + 200);
  EXPECT_EQ(busy.turns.back(), proto::PROBE_TURN_QUERY);

  now = 0;
  busy.busy_until_us = 1 << 30;
  absl::Status s = AwaitOtherProbers({&idle, &busy}, 100000, [&] { return now; });
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(),
            "link probe: server 1: other probers still measuring at the time limit (waited "
            "99 ms)");
  EXPECT_EQ(now, 100000);
}

// A colocated layout: the prober holds its machine's server's turn and the probed server's
// from its latency probes to its last transfer; while the probed server is busy it gives its
// machine's turn back, so that a prober probing this machine's server can go on.
TEST(LinkProbeTest, TheMachinesServerTurnIsHeldWithTheProbedServersAndGivenBackWhileWaiting) {
  int64_t now = 0;
  std::vector<std::string> log;
  FakeLink probed(&now, 100, 125, 125), machine(&now, 20, 1000, 1000);
  probed.log = machine.log = &log;
  probed.name = "probed";
  machine.name = "machine";
  probed.busy_answers = 2;
  LinkProbeOptions o = Options();
  o.latency_probes = 2;
  o.transfers = 2;
  LinkSamples samples;
  ASSERT_TRUE(CollectLinkSamples(
                  probed, o, 1 << 30, [&] { return now; }, &samples, &machine)
                  .ok());
  const std::vector<std::string> expected = {"probed small",  // the uncounted first probe
                                             "machine PROBE_TURN_BEGIN",
                                             "probed PROBE_TURN_BEGIN",
                                             "machine PROBE_TURN_END",  // busy
                                             "machine PROBE_TURN_BEGIN",
                                             "probed PROBE_TURN_BEGIN",
                                             "machine PROBE_TURN_END",  // busy
                                             "machine PROBE_TURN_BEGIN",
                                             "probed PROBE_TURN_BEGIN",  // both
                                             "probed small",
                                             "probed small",  // latency, under both turns
                                             "probed up",
                                             "probed down",
                                             "machine small",  // the machine's turn kept alive
                                             "probed up",
                                             "probed down",
                                             "machine small",
                                             "probed PROBE_TURN_END",
                                             "machine PROBE_TURN_END"};
  EXPECT_EQ(log, expected);
  EXPECT_EQ(machine.waits, std::vector<int64_t>{});
  EXPECT_EQ(probed.waits, (std::vector<int64_t>{2000, 4000}));
  EXPECT_TRUE(samples.got_turn);
  EXPECT_FALSE(probed.held);
  EXPECT_FALSE(machine.held);
  const proto::LinkProbe p = SummarizeLinkSamples(0, samples, o.transfer_bytes);
  EXPECT_NEAR(p.latency_us(), 100, 1e-9);
  EXPECT_NEAR(p.up_gbps(), 1.0, 1e-9);

  // The machine's own server: one turn, as without.
  log.clear();
  LinkSamples own;
  ASSERT_TRUE(CollectLinkSamples(
                  machine, o, 1 << 30, [&] { return now; }, &own, &machine)
                  .ok());
  EXPECT_EQ(std::count(log.begin(), log.end(), "machine PROBE_TURN_BEGIN"), 1);
  EXPECT_EQ(log.back(), "machine PROBE_TURN_END");
}

// A failure under both turns gives both back; the time limit while the machine's turn is taken
// by another prober is reported as such.
TEST(LinkProbeTest, BothTurnsAreGivenBackOnAFailureAndTheTimeLimitIsReported) {
  int64_t now = 0;
  FakeLink probed(&now, 100, 125, 125), machine(&now, 20, 1000, 1000);
  probed.fail_call = 6;  // after the first probe, a BEGIN and three latency probes
  LinkProbeOptions o = Options();
  LinkSamples samples;
  absl::Status s = CollectLinkSamples(
      probed, o, 1 << 30, [&] { return now; }, &samples, &machine);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(probed.turns.back(), proto::PROBE_TURN_END);
  EXPECT_FALSE(probed.held);
  EXPECT_FALSE(machine.held);

  now = 0;
  FakeLink probed2(&now, 100, 125, 125), taken(&now, 20, 1000, 1000);
  taken.busy_until_us = 1 << 30;
  LinkSamples waited;
  s = CollectLinkSamples(
      probed2, o, 100000, [&] { return now; }, &waited, &taken);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(),
            "link probe: no bandwidth turn of this machine's server before the time limit");
  EXPECT_FALSE(waited.got_turn);
  EXPECT_EQ(probed2.turn_ms.size(), 0u);  // the probed server was never asked
}

TEST(LinkProbeTest, TheServerOnThisMachineIsTheOneWhoseAddressIsLocal) {
  const std::vector<std::string> servers = {"tcp://10.213.2.1:4001", "tcp://10.213.2.2:4002",
                                            "tcp://[fd00::3]:4003", "tcp://node7:4004"};
  EXPECT_EQ(ServerOnThisMachine(servers, {"10.213.2.2"}), 1);
  EXPECT_EQ(ServerOnThisMachine(servers, {"192.168.0.9", "fd00:0::3"}), 2);
  EXPECT_EQ(ServerOnThisMachine(servers, {"192.168.0.9"}), -1);
  EXPECT_EQ(ServerOnThisMachine(servers, {"10.213.2.1", "10.213.2.2"}), -1);  // one machine
  EXPECT_EQ(ServerOnThisMachine(servers, {"node7"}), -1);  // names are not compared
  EXPECT_EQ(ServerOnThisMachine({}, {"10.213.2.2"}), -1);
  for (const std::string& a : LocalInterfaceAddresses()) {
    EXPECT_NE(a.rfind("127.", 0), 0u) << a;
    EXPECT_NE(a, "::1");
  }
}

TEST(LinkProbeTest, NoTurnIsAskedForWithoutTransfers) {
  int64_t now = 0;
  FakeLink link(&now, 100, 125, 125);
  LinkProbeOptions o = Options();
  o.transfers = 0;
  LinkSamples samples;
  ASSERT_TRUE(CollectLinkSamples(
                  link, o, 1 << 30, [&] { return now; }, &samples)
                  .ok());
  EXPECT_EQ(link.calls, 1 + 5);
  EXPECT_TRUE(link.turn_ms.empty());
}

TEST(LinkProbeTest, AnErrorReplyStopsThatServer) {
  int64_t now = 0;
  FakeLink link(&now, 100, 125, 125);
  link.fail_call = 3;
  const proto::LinkProbeReport r = ProbeLinks({&link}, Options(), [&] { return now; });
  EXPECT_NE(r.links(0).error().find("server 0: refused (after 1 of 5 small probes"),
            std::string::npos)
      << r.links(0).error();
  EXPECT_EQ(link.calls, 3);
}

TEST(LinkProbeTest, ZmqExchangeMatchesRepliesAndReportsErrors) {
  zmq::context_t ctx(1);
  zmq::socket_t router(ctx, zmq::socket_type::router);
  ConfigureSocket(router);
  absl::StatusOr<int> port = BindTcp(router, "127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  std::vector<proto::DataHeader> seen;
  std::vector<size_t> seen_payload;
  // Request 1: a stale reply (another id) first, then the answer. Request 2: an error.
  // Request 3: a reply of the wrong size. Request 4: never answered.
  std::thread server([&] {
    for (int i = 0; i < 4; ++i) {
      absl::StatusOr<std::vector<zmq::message_t>> f = RecvFrames(router, std::chrono::seconds(5));
      if (!f.ok() || f->size() < 2) return;
      proto::DataHeader h;
      h.ParseFromArray((*f)[1].data(), static_cast<int>((*f)[1].size()));
      seen.push_back(h);
      seen_payload.push_back(f->size() > 2 ? (*f)[2].size() : 0);
      auto reply = [&](proto::DataOp op, uint64_t id, int64_t bytes, const std::string& error,
                       bool granted = false) {
        proto::DataHeader r;
        r.set_op(op);
        if (granted) r.set_probe_turn(proto::PROBE_TURN_GRANTED);
        r.set_request_id(id);
        r.set_error(error);
        std::vector<zmq::message_t> out;
        out.emplace_back((*f)[0].data(), (*f)[0].size());
        out.push_back(ProtoFrame(r));
        if (bytes > 0) out.push_back(ProbePayload(bytes));
        (void)SendFrames(router, out);
      };
      if (i == 0) reply(proto::OP_PROBE_REPLY, 999, 0, "");
      if (i == 0) reply(proto::OP_PROBE_REPLY, h.request_id(), h.probe_reply_bytes(), "", true);
      if (i == 1) reply(proto::OP_ERROR, h.request_id(), 0, "server 0: link probe: no");
      if (i == 2) reply(proto::OP_PROBE_REPLY, h.request_id(), 5, "");
    }
  });
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  ConfigureSocket(dealer);
  dealer.connect(TcpEndpoint("127.0.0.1", *port));
  uint64_t next = 7;
  ZmqProbeExchange exchange(dealer, 3, &next);
  const int64_t far = MonotonicUs() + 5000000;
  absl::StatusOr<proto::ProbeTurn> first =
      exchange.RoundTrip({4096, 100, proto::PROBE_TURN_END}, far);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, proto::PROBE_TURN_GRANTED);  // the reply's probe_turn, as the server said
  absl::Status error = exchange.RoundTrip({0, 0, proto::PROBE_TURN_BEGIN, 250}, far).status();
  EXPECT_EQ(error.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(error.message(), "server 0: link probe: no");
  absl::Status wrong = exchange.RoundTrip({0, 16}, far).status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(wrong.message().find("with 16 bytes, got OP_PROBE_REPLY with 5"), std::string::npos);
  const int64_t before = MonotonicUs();
  absl::Status late = exchange.RoundTrip({0, 0}, before + 50000).status();
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(MonotonicUs() - before, 50000);
  server.join();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].op(), proto::OP_PROBE);
  EXPECT_EQ(seen[0].sender(), 3);
  EXPECT_EQ(seen[0].request_id(), 7u);
  EXPECT_EQ(seen[0].payload_bytes(), 4096);
  EXPECT_EQ(seen_payload[0], 4096u);
  EXPECT_EQ(seen[0].probe_reply_bytes(), 100);
  EXPECT_EQ(seen[0].probe_turn(), proto::PROBE_TURN_END);
  EXPECT_EQ(seen[0].probe_turn_ms(), 0);
  EXPECT_EQ(seen_payload[1], 0u);  // no payload frame for 0 bytes
  EXPECT_EQ(seen[1].probe_turn(), proto::PROBE_TURN_BEGIN);
  EXPECT_EQ(seen[1].probe_turn_ms(), 250);
  EXPECT_EQ(seen[2].probe_turn(), proto::PROBE_TURN_NONE);
  EXPECT_EQ(next, 11u);
}

TEST(LinkProbeTest, ConfigDefaultsAndLimits) {
  proto::ClusterConfig c = WithClusterDefaults({});
  EXPECT_EQ(c.link_probe_count(), 3);
  EXPECT_EQ(c.link_probe_bytes(), 1 << 20);
  EXPECT_EQ(c.link_latency_probes(), 16);
  EXPECT_EQ(c.link_probe_timeout_ms(), 5000);
  const LinkProbeOptions o = LinkProbeOptionsFrom(c);
  EXPECT_EQ(o.transfers, 3);
  EXPECT_EQ(o.transfer_bytes, 1 << 20);
  EXPECT_EQ(o.latency_probes, 16);
  EXPECT_EQ(o.timeout_ms, 5000);
  proto::ClusterConfig off;
  off.set_link_probe_count(0);  // an explicit 0 disables the probes, and stays 0
  EXPECT_EQ(WithClusterDefaults(off).link_probe_count(), 0);
  EXPECT_TRUE(ValidateClusterConfig(WithClusterDefaults(off)).ok());
  c.set_link_probe_bytes(kMaxProbeBytes + 1);
  c.set_link_probe_count(101);
  absl::Status s = ValidateClusterConfig(c);
  EXPECT_NE(s.message().find("link_probe_bytes must be in [1024, 67108864]"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("link_probe_count must be in [0, 100]"), std::string::npos);
  proto::ClusterConfig parsed;
  absl::Status bad =
      ParseTextProto("link_probe_count: 2\nlink_probe_bytez: 5\n", "c.pbtxt", &parsed);
  EXPECT_NE(bad.message().find("c.pbtxt:2:"), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace bytecomp
