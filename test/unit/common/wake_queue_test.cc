// WakeQueue: items come out in order and all at once; the eventfd is readable exactly while
// something waits (written when the queue turns non-empty); no wake is lost between producers
// and a consumer that takes everything whenever it wakes.
#include "bytecomp/common/wake_queue.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace bytecomp {
namespace {

bool Readable(int fd, int timeout_ms = 0) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

TEST(WakeQueueTest, TakesEverythingInOrderAndIsReadableOnlyWhileItemsWait) {
  WakeQueue<std::string> q;
  EXPECT_FALSE(Readable(q.fd()));
  EXPECT_TRUE(q.TakeAll().empty());
  q.Push("a");
  EXPECT_TRUE(Readable(q.fd()));
  q.Push("b");
  q.Push("c");
  // Three pushes, one write: only the first found the queue empty.
  uint64_t writes = 0;
  ASSERT_EQ(read(q.fd(), &writes, sizeof(writes)), static_cast<ssize_t>(sizeof(writes)));
  EXPECT_EQ(writes, 1u);
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(q.TakeAll(), (std::deque<std::string>{"a", "b", "c"}));
  EXPECT_EQ(q.size(), 0u);
  EXPECT_FALSE(Readable(q.fd()));
  EXPECT_TRUE(q.TakeAll().empty());
  q.Push("d");
  EXPECT_TRUE(Readable(q.fd()));
  EXPECT_EQ(q.WaitAndTakeAll(), (std::deque<std::string>{"d"}));
  EXPECT_FALSE(Readable(q.fd()));
}

// Producers race a consumer that waits on the eventfd and takes everything each time: every
// item arrives, each producer's in its order. A lost wake would leave items queued with the
// eventfd silent: the consumer's wait would time out.
TEST(WakeQueueTest, NoWakeIsLostBetweenProducersAndTheConsumer) {
  constexpr int kProducers = 4;
  constexpr int kEach = 20000;
  WakeQueue<std::pair<int, int>> q;
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&q, p] {
      for (int i = 0; i < kEach; ++i) q.Push({p, i});
    });
  }
  std::vector<int> next(kProducers, 0);
  int received = 0;
  while (received < kProducers * kEach) {
    ASSERT_TRUE(Readable(q.fd(), /*timeout_ms=*/20000)) << "lost wake after " << received;
    for (const auto& [p, i] : q.TakeAll()) {
      ASSERT_EQ(i, next[p]) << "producer " << p;
      ++next[p];
      ++received;
    }
  }
  for (std::thread& t : producers) t.join();
  EXPECT_TRUE(q.TakeAll().empty());
  EXPECT_EQ(next, std::vector<int>(kProducers, kEach));
}

TEST(WakeQueueTest, WaitAndTakeAllWaitsForAnotherThread) {
  WakeQueue<int> q;
  std::thread producer([&q] {
    for (int i = 0; i < 1000; ++i) q.Push(i);
  });
  int expected = 0;
  while (expected < 1000) {
    for (int i : q.WaitAndTakeAll()) EXPECT_EQ(i, expected++);
  }
  producer.join();
  EXPECT_EQ(expected, 1000);
}

}  // namespace
}  // namespace bytecomp
