// The host local reducer with real sockets on loopback, its ranks on threads of one process.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "bytecomp/common/half.h"
#include "bytecomp/common/net.h"
#include "bytecomp/common/socket_limits.h"
#include "bytecomp/common/socket_security.h"
#include "bytecomp/common/transport.h"
#include "bytecomp/worker/local_reducer.h"

namespace bytecomp::worker {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A callback that fulfils a future with the call's status.
struct Waiter {
  std::shared_ptr<std::promise<absl::Status>> promise =
      std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> future = promise->get_future();
  LocalReducer::Done Callback() {
    return [p = promise](absl::Status s) { p->set_value(std::move(s)); };
  }
  absl::Status Get(int timeout_ms = 5000) {
    if (future.wait_for(std::chrono::milliseconds(timeout_ms)) != std::future_status::ready) {
      return absl::DeadlineExceededError("callback did not run");
    }
    return future.get();
  }
};

class HostLocalReducerTest : public ::testing::Test {
 protected:
  // A machine of `size` local ranks, set up and started.
  void Connect(int size) {
    absl::StatusOr<std::unique_ptr<HostLocalReducer>> root =
        HostLocalReducer::Listen(context_, size);
    ASSERT_TRUE(root.ok()) << root.status();
    std::vector<std::future<absl::StatusOr<std::unique_ptr<HostLocalReducer>>>> joins;
    for (int lr = 1; lr < size; ++lr) {
      joins.push_back(std::async(std::launch::async, [this, lr, size, ep = (*root)->endpoint()] {
        return HostLocalReducer::Join(context_, ep, lr, size, 5000, nullptr);
      }));
    }
    ASSERT_TRUE((*root)->AcceptAll(5000, nullptr).ok());
    ranks_.push_back(std::move(*root));
    for (auto& j : joins) {
      absl::StatusOr<std::unique_ptr<HostLocalReducer>> member = j.get();
      ASSERT_TRUE(member.ok()) << member.status();
      ranks_.push_back(std::move(*member));
    }
    for (auto& r : ranks_) r->Start();
  }
  void TearDown() override {
    for (auto& r : ranks_) r->Stop();
    ranks_.clear();
  }

  zmq::context_t context_{1};
  std::vector<std::unique_ptr<HostLocalReducer>> ranks_;
};

TEST_F(HostLocalReducerTest, SumsToTheRootAndBroadcastsWhateverTheTagOrder) {
  Connect(3);
  constexpr int n = 1000;
  // data[rank][tag]
  std::vector<std::vector<std::vector<float>>> data(
      3, std::vector<std::vector<float>>(2, std::vector<float>(n)));
  for (int r = 0; r < 3; ++r) {
    for (int t = 0; t < 2; ++t) {
      for (int i = 0; i < n; ++i)
        data[r][t][i] = static_cast<float>((i * (t + 2) + r * 17) % 97) - 40.0f;
    }
  }
  std::vector<std::vector<float>> expected(2, std::vector<float>(n));
  for (int t = 0; t < 2; ++t) {
    for (int i = 0; i < n; ++i) expected[t][i] = data[0][t][i] + data[1][t][i] + data[2][t][i];
  }
  const std::string tags[2] = {"w@0", "w@1"};
  // Local rank 2 contributes in the opposite order from the others.
  std::vector<Waiter> reduced(6), broadcast(6);
  for (int r = 0; r < 3; ++r) {
    for (int k = 0; k < 2; ++k) {
      const int t = r == 2 ? 1 - k : k;
      ranks_[r]->Reduce(tags[t], data[r][t].data(), n, proto::DTYPE_FLOAT32,
                        reduced[r * 2 + t].Callback());
    }
  }
  for (int t = 0; t < 2; ++t) {
    ASSERT_TRUE(reduced[t].Get().ok());
    EXPECT_EQ(data[0][t], expected[t]) << "the root holds the machine's sum of tag " << t;
  }
  for (int r = 1; r < 3; ++r) {
    for (int t = 0; t < 2; ++t) {
      EXPECT_TRUE(reduced[r * 2 + t].Get().ok());
      ranks_[r]->Broadcast(tags[t], data[r][t].data(), n, proto::DTYPE_FLOAT32, absl::OkStatus(),
                           broadcast[r * 2 + t].Callback());
    }
  }
  // The root answers tag 1 first: the others match by tag.
  for (int t : {1, 0}) {
    ranks_[0]->Broadcast(tags[t], data[0][t].data(), n, proto::DTYPE_FLOAT32, absl::OkStatus(),
                         broadcast[t].Callback());
  }
  for (int r = 0; r < 3; ++r) {
    for (int t = 0; t < 2; ++t) {
      ASSERT_TRUE(broadcast[r * 2 + t].Get().ok()) << "rank " << r << " tag " << t;
      EXPECT_EQ(data[r][t], expected[t]) << "rank " << r << " tag " << t;
    }
  }
}

TEST_F(HostLocalReducerTest, HalfPrecisionIsSummedInFloat32) {
  Connect(3);
  // 2048 + 1 + 1: fp16's spacing above 2048 is 2, so adding in fp16 would round each +1 away
  // (2049 ties to 2048); summed in fp32 and narrowed once it is 2050.
  std::vector<uint16_t> root = {FloatToHalfBits(2048.0f), FloatToHalfBits(-3.0f)};
  std::vector<uint16_t> one = {FloatToHalfBits(1.0f), FloatToHalfBits(0.5f)};
  std::vector<uint16_t> two = {FloatToHalfBits(1.0f), FloatToHalfBits(0.25f)};
  Waiter a, b, c;
  ranks_[1]->Reduce("h@0", one.data(), 2, proto::DTYPE_FLOAT16, b.Callback());
  ranks_[2]->Reduce("h@0", two.data(), 2, proto::DTYPE_FLOAT16, c.Callback());
  ranks_[0]->Reduce("h@0", root.data(), 2, proto::DTYPE_FLOAT16, a.Callback());
  ASSERT_TRUE(a.Get().ok());
  ASSERT_TRUE(b.Get().ok());
  ASSERT_TRUE(c.Get().ok());
  EXPECT_EQ(HalfBitsToFloat(root[0]), 2050.0f);
  EXPECT_EQ(HalfBitsToFloat(root[1]), -2.25f);
}

TEST_F(HostLocalReducerTest, MismatchFailsTheRootNamingTheRankAndTheErrorReachesTheOthers) {
  Connect(3);
  std::vector<float> root(4, 1.0f), one(4, 1.0f), two(5, 1.0f);
  Waiter r0, r1, r2, b1, b2, b0;
  ranks_[1]->Reduce("x@0", one.data(), 4, proto::DTYPE_FLOAT32, r1.Callback());
  ranks_[2]->Reduce("x@0", two.data(), 5, proto::DTYPE_FLOAT32, r2.Callback());
  ranks_[0]->Reduce("x@0", root.data(), 4, proto::DTYPE_FLOAT32, r0.Callback());
  absl::Status s = r0.Get();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(std::string(s.message()), "local rank 2 has 5 elements")) << s;
  EXPECT_EQ(root, std::vector<float>(4, 1.0f)) << "nothing summed";
  ranks_[1]->Broadcast("x@0", one.data(), 4, proto::DTYPE_FLOAT32, absl::OkStatus(), b1.Callback());
  ranks_[2]->Broadcast("x@0", two.data(), 5, proto::DTYPE_FLOAT32, absl::OkStatus(), b2.Callback());
  ranks_[0]->Broadcast("x@0", root.data(), 4, proto::DTYPE_FLOAT32, s, b0.Callback());
  EXPECT_TRUE(b0.Get().ok());
  for (Waiter* w : {&b1, &b2}) {
    absl::Status got = w->Get();
    EXPECT_FALSE(got.ok());
    EXPECT_TRUE(Contains(std::string(got.message()), "local root: ")) << got;
    EXPECT_TRUE(Contains(std::string(got.message()), "local rank 2 has 5 elements")) << got;
  }
}

TEST_F(HostLocalReducerTest, FailEndsPendingAndLaterCallsWithTheReason) {
  Connect(2);
  std::vector<float> v(8, 1.0f);
  Waiter pending, later;
  ranks_[1]->Broadcast("y@0", v.data(), 8, proto::DTYPE_FLOAT32, absl::OkStatus(),
                       pending.Callback());
  ranks_[1]->Fail(absl::UnavailableError("worker 0 failed: missed heartbeats"));
  EXPECT_EQ(pending.Get().message(), "worker 0 failed: missed heartbeats");
  ranks_[1]->Reduce("y@1", v.data(), 8, proto::DTYPE_FLOAT32, later.Callback());
  EXPECT_EQ(later.Get().message(), "worker 0 failed: missed heartbeats");
  // The root's pending reduction is ended by Stop.
  Waiter root_pending;
  ranks_[0]->Reduce("y@2", v.data(), 8, proto::DTYPE_FLOAT32, root_pending.Callback());
  ranks_[0]->Stop();
  EXPECT_EQ(root_pending.Get(100).code(), absl::StatusCode::kCancelled);
}

TEST(HostLocalReducerSetupTest, JoinWithoutARootTimesOutClearly) {
  zmq::context_t context(1);
  // Nobody listens on the port of a socket bound and closed again.
  std::string endpoint;
  {
    absl::StatusOr<std::unique_ptr<HostLocalReducer>> gone = HostLocalReducer::Listen(context, 2);
    ASSERT_TRUE(gone.ok());
    endpoint = (*gone)->endpoint();
  }
  int ticks = 0;
  const int64_t start = MonotonicMs();
  absl::StatusOr<std::unique_ptr<HostLocalReducer>> r =
      HostLocalReducer::Join(context, endpoint, 1, 2, 400, [&ticks] {
        ++ticks;
        return absl::OkStatus();
      });
  const int64_t took = MonotonicMs() - start;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Contains(std::string(r.status().message()), "got no WELCOME from the local root"))
      << r.status();
  EXPECT_GE(took, 400);
  EXPECT_LT(took, 2000);
  EXPECT_GE(ticks, 3) << "the caller's heartbeats keep running while it waits";
}

TEST(HostLocalReducerSetupTest, AcceptAllNamesTheMissingLocalRanksAndATickErrorAborts) {
  zmq::context_t context(1);
  absl::StatusOr<std::unique_ptr<HostLocalReducer>> root = HostLocalReducer::Listen(context, 3);
  ASSERT_TRUE(root.ok());
  auto joined = std::async(std::launch::async, [&] {
    return HostLocalReducer::Join(context, (*root)->endpoint(), 2, 3, 1000, nullptr);
  });
  absl::Status s = (*root)->AcceptAll(300, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Contains(std::string(s.message()), "local rank(s) 1 of 3")) << s;
  EXPECT_FALSE(joined.get().ok()) << "local rank 2 was never welcomed";
  absl::Status aborted = (*root)->AcceptAll(5000, [] { return absl::CancelledError("shut down"); });
  EXPECT_EQ(aborted.message(), "shut down");
}

// The root's socket takes the connections of its local ranks and a few more
// (LocalReduceConnectionCaps); another process on the host that opens many is cut beyond them,
// and the machine's ranks still join.
TEST(HostLocalReducerSetupTest, ConnectionsBeyondTheCapsAreCut) {
  zmq::context_t context(1);
  SocketSecurity unkeyed(context, std::nullopt, /*allow_insecure=*/false);
  absl::StatusOr<std::unique_ptr<HostLocalReducer>> root =
      HostLocalReducer::Listen(context, 2, &unkeyed);
  ASSERT_TRUE(root.ok()) << root.status();
  absl::StatusOr<HostPort> where = ParseHostPort((*root)->endpoint());
  ASSERT_TRUE(where.ok()) << (*root)->endpoint();
  const int cap = LocalReduceConnectionCaps(2).per_address;
  std::vector<int> fds;
  for (int i = 0; i < cap + 10; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(where->port));
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    fds.push_back(fd);
  }
  // Each connection beyond the cap is closed: read() sees its end (the others get ZeroMQ's
  // greeting and stay open).
  int cut = 0;
  const int64_t deadline = MonotonicMs() + 10000;
  std::vector<bool> ended(fds.size(), false);
  while (cut < 10 && MonotonicMs() < deadline) {
    for (size_t i = 0; i < fds.size(); ++i) {
      if (ended[i]) continue;
      pollfd p{fds[i], POLLIN, 0};
      if (poll(&p, 1, 10) <= 0) continue;
      char buffer[256];
      if (read(fds[i], buffer, sizeof(buffer)) <= 0) {
        ended[i] = true;
        ++cut;
      }
    }
  }
  EXPECT_EQ(cut, 10);
  for (int fd : fds) close(fd);
  auto joined = std::async(std::launch::async, [&] {
    return HostLocalReducer::Join(context, (*root)->endpoint(), 1, 2, 5000, nullptr);
  });
  EXPECT_TRUE((*root)->AcceptAll(5000, nullptr).ok());
  absl::StatusOr<std::unique_ptr<HostLocalReducer>> member = joined.get();
  ASSERT_TRUE(member.ok()) << member.status();
  (*member)->Stop();
  (*root)->Stop();
}

}  // namespace
}  // namespace bytecomp::worker
