// Connection caps (connection_book.h): counted per address and in all, and on a real listening
// socket a connection beyond a cap is cut when accepted while the others stay.
#include "bytecomp/common/connection_book.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "bytecomp/common.h"

namespace bytecomp {
namespace {

using ::testing::HasSubstr;

TEST(ConnectionBookTest, CapsPerAddressAndInAll) {
  ConnectionBook book(ConnectionCaps{/*per_address=*/2, /*total=*/3});
  EXPECT_FALSE(book.Accepted(10, "10.0.0.1").has_value());
  EXPECT_FALSE(book.Accepted(11, "10.0.0.1").has_value());
  EXPECT_THAT(book.Accepted(12, "10.0.0.1").value_or(""), HasSubstr("per address"));
  EXPECT_FALSE(book.Accepted(13, "10.0.0.2").has_value());
  EXPECT_THAT(book.Accepted(14, "10.0.0.3").value_or(""), HasSubstr("3 connections"));
  EXPECT_EQ(book.open(), 3);
  book.Closed(10);
  book.Closed(12);  // never counted: nothing happens
  EXPECT_EQ(book.open_from("10.0.0.1"), 1);
  EXPECT_FALSE(book.Accepted(14, "10.0.0.1").has_value());
  // A descriptor reused before its end was heard counts once.
  EXPECT_FALSE(book.Accepted(14, "10.0.0.3").has_value());
  EXPECT_EQ(book.open(), 3);
  EXPECT_EQ(book.open_from("10.0.0.1"), 1);
}

// ZeroMQ reports an accept after handing the connection to an I/O thread, which may report its
// end first. Such a connection counts nothing; the end of one that was cut leaves nothing
// behind, so it cannot excuse a later connection from the caps.
TEST(ConnectionBookTest, AConnectionWhoseEndIsHeardBeforeItsAcceptIsNotCounted) {
  ConnectionBook book(ConnectionCaps{/*per_address=*/2, /*total=*/8});
  book.Closed(20);  // its end first
  EXPECT_FALSE(book.Accepted(20, "10.0.0.1").has_value());
  EXPECT_EQ(book.open(), 0);
  // A burst of short connections, each end heard before or after its accept, leaves the
  // address with nothing counted.
  for (int fd = 30; fd < 60; ++fd) {
    if (fd % 2 == 0) {
      book.Closed(fd);
      EXPECT_FALSE(book.Accepted(fd, "10.0.0.1").has_value());
    } else {
      book.Accepted(fd, "10.0.0.1");
      book.Closed(fd);
    }
  }
  EXPECT_EQ(book.open_from("10.0.0.1"), 0);
  EXPECT_FALSE(book.Accepted(70, "10.0.0.1").has_value());
  EXPECT_FALSE(book.Accepted(71, "10.0.0.1").has_value());
  // A cut connection's end is its own: the next connection beyond the cap is cut too.
  ASSERT_TRUE(book.Accepted(72, "10.0.0.1").has_value());
  book.Closed(72);
  EXPECT_TRUE(book.Accepted(72, "10.0.0.1").has_value());
  EXPECT_EQ(book.open_from("10.0.0.1"), 2);
}

// Events read together: an accept followed by its own end is a connection already over (a
// cut would hit whatever holds its descriptor now); an end before an accept is an older one's.
TEST(ConnectionBookTest, AnAcceptAndItsEndReadTogetherAreAConnectionAlreadyOver) {
  const std::vector<ConnectionEvent> events = {
      {true, 5},              // over: its end comes at 3
      {false, 6},             // an older connection's end
      {true, 6},              // open: no end of 6 follows
      {false, 5}, {true, 5},  // the descriptor again: open
      {true, 7},              // over: ends at 6
      {false, 7},
  };
  EXPECT_EQ(ConnectionsAlreadyOver(events),
            (std::vector<bool>{true, false, false, true, false, true, true}));
  EXPECT_TRUE(ConnectionsAlreadyOver({}).empty());
}

// A raw TCP connection from `from` (a loopback address) to 127.0.0.1:port.
int ConnectFrom(const char* from, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  inet_pton(AF_INET, from, &local.sin_addr);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)), 0);
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof(remote)), 0);
  return fd;
}

// Whether the other end closed the connection within `wait_ms` (what ZeroMQ sends first, its
// greeting, is read and skipped).
bool ClosedWithin(int fd, int wait_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  char buffer[256];
  while (true) {
    const int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          deadline - std::chrono::steady_clock::now())
                                          .count());
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, left) <= 0) return false;
    const ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got <= 0) return true;
  }
}

TEST(ConnectionCapsTest, AListeningSocketCutsTheConnectionsBeyondItsCaps) {
  zmq::context_t context(1);
  SocketSecurity security(context, std::nullopt, /*allow_insecure=*/false);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  ASSERT_TRUE(security.CapConnections(router, ConnectionCaps{2, 3}).ok());
  absl::StatusOr<int> port = BindTcp(router, "127.0.0.1", 0);
  ASSERT_TRUE(port.ok());

  const int a1 = ConnectFrom("127.0.0.1", *port);
  const int a2 = ConnectFrom("127.0.0.1", *port);
  const int a3 = ConnectFrom("127.0.0.1", *port);  // beyond 2 from one address
  EXPECT_TRUE(ClosedWithin(a3, 10000));
  const int b1 = ConnectFrom("127.0.0.2", *port);
  const int b2 = ConnectFrom("127.0.0.2", *port);  // beyond 3 in all
  EXPECT_TRUE(ClosedWithin(b2, 10000));
  // Those within the caps were accepted before the cut ones, so they would have been cut first.
  EXPECT_FALSE(ClosedWithin(a1, 0));
  EXPECT_FALSE(ClosedWithin(a2, 0));
  EXPECT_FALSE(ClosedWithin(b1, 0));
  // One that ends makes room again.
  close(a1);
  int again = -1;
  for (int tries = 0; tries < 100; ++tries) {  // until its end is heard
    again = ConnectFrom("127.0.0.2", *port);
    if (!ClosedWithin(again, 200)) break;
    close(again);
    again = -1;
  }
  EXPECT_GE(again, 0) << "a closed connection never made room for another";
  // Caps raised once the job is known: a fourth connection stays.
  security.UpdateConnectionCaps(router, ConnectionCaps{4, 4});
  const int b3 = ConnectFrom("127.0.0.2", *port);
  const int b4 = ConnectFrom("127.0.0.2", *port);  // beyond the new 4 in all
  EXPECT_TRUE(ClosedWithin(b4, 10000));
  EXPECT_FALSE(ClosedWithin(b3, 0));
  for (int fd : {a2, a3, b1, b2, again, b3, b4}) close(fd);
}

}  // namespace
}  // namespace bytecomp
