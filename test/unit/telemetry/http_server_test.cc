// HttpServer: read-only pages, 404/405/400, loopback by default, and limits that a hostile
// client cannot get past (a never-ending header is cut off; many idle connections only delay
// other clients by the request timeout; hundreds of them cost bounded memory).
#include "bytecomp/telemetry/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace bytecomp::telemetry {
namespace {

// A connection to the server on loopback; `nonblocking`: returned while it is being made.
int Connect(int port, bool nonblocking = false) {
  int fd = socket(AF_INET, SOCK_STREAM | (nonblocking ? SOCK_NONBLOCK : 0), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 &&
      !(nonblocking && errno == EINPROGRESS)) {
    close(fd);
    return -1;
  }
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Sends `request` and reads the whole answer (the server closes: no keep-alive).
std::string Exchange(int port, const std::string& request) {
  int fd = Connect(port);
  if (fd < 0) return "connect failed";
  (void)!write(fd, request.data(), request.size());
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

std::unique_ptr<HttpServer> Start(HttpOptions options = {}) {
  std::map<std::string, HttpServer::Page> pages;
  pages["/metrics"] = [] { return HttpResponse{200, "text/plain", "x_total 1\n"}; };
  pages["/"] = [] { return HttpResponse{200, "text/html", "<p>hi</p>"}; };
  auto server = HttpServer::Start(options, std::move(pages));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

TEST(HttpServerTest, ServesItsPagesOnLoopback) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->url(), "http://127.0.0.1:" + std::to_string(server->port()));
  const std::string metrics = Exchange(server->port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(metrics.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << metrics;
  EXPECT_NE(metrics.find("\r\n\r\nx_total 1\n"), std::string::npos) << metrics;
  const std::string head = Exchange(server->port(), "HEAD / HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Length: 9\r\n"), std::string::npos) << head;
  EXPECT_EQ(head.find("<p>hi</p>"), std::string::npos) << head;  // no body for HEAD
}

TEST(HttpServerTest, UnknownPathsOtherMethodsAndMalformedRequestsAreRefused) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  EXPECT_EQ(Exchange(port, "GET /metrics/../etc HTTP/1.1\r\n\r\n").substr(0, 12), "HTTP/1.1 404");
  EXPECT_EQ(Exchange(port, "GET /nope HTTP/1.1\r\n\r\n").substr(0, 12), "HTTP/1.1 404");
  EXPECT_EQ(Exchange(port, "POST /metrics HTTP/1.1\r\nContent-Length: 1\r\n\r\nx").substr(0, 12),
            "HTTP/1.1 405");
  EXPECT_EQ(Exchange(port, "DELETE / HTTP/1.1\r\n\r\n").substr(0, 12), "HTTP/1.1 405");
  const std::string garbage = Exchange(port, "NONSENSE\r\n\r\n");
  EXPECT_NE(garbage.find(" 400 "), std::string::npos) << garbage;
  const std::string broken = Exchange(port, "GET / HTTP/1.1\r\nno colon here\r\n\r\n");
  EXPECT_NE(broken.find(" 400 "), std::string::npos) << broken;
}

TEST(HttpServerTest, ANeverEndingHeaderIsCutOffAndOthersAreStillServed) {
  HttpOptions options;
  options.request_timeout_ms = 1000;
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  std::atomic<bool> stop{false};
  std::atomic<int> cut_off{0};
  std::vector<std::thread> hostile;
  for (int c = 0; c < 6; ++c) {  // more than the server's threads
    hostile.emplace_back([&] {
      int fd = Connect(port);
      if (fd < 0) return;
      std::string start = "GET /metrics HTTP/1.1\r\nX-Endless: ";
      (void)!write(fd, start.data(), start.size());
      const std::string chunk(256, 'a');
      while (!stop.load()) {
        if (write(fd, chunk.data(), chunk.size()) < 0) {
          ++cut_off;  // the server closed the connection
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      close(fd);
    });
  }
  // A well-behaved client gets its answer within a few request timeouts.
  const auto start = std::chrono::steady_clock::now();
  const std::string ok = Exchange(port, "GET /metrics HTTP/1.1\r\n\r\n");
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(ok.rfind("HTTP/1.1 200", 0), 0u) << ok;
  EXPECT_LT(waited, 8.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  stop = true;
  for (auto& t : hostile) t.join();
  EXPECT_GT(cut_off.load(), 0);  // max_request_bytes (8 KiB) or the timeout ended them
}

// This process's resident memory in KiB (/proc/self/status VmRSS).
long ResidentKib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

TEST(HttpServerTest, HundredsOfHostileClientsCostBoundedMemoryAndLeaveNoTrace) {
  HttpOptions options;
  options.request_timeout_ms = 500;
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  ASSERT_EQ(Exchange(port, "GET /metrics HTTP/1.1\r\n\r\n").substr(0, 12), "HTTP/1.1 200");
  const long before = ResidentKib();
  ASSERT_GT(before, 0);
  // 300 clients, far more than the threads, the queue and the backlog: every other one sends a
  // 32 KiB header (4x max_request_bytes), the rest a header start and then nothing. Unbounded
  // buffering would hold ~5 MiB of their bytes.
  std::vector<int> fds;
  const std::string huge = "GET /metrics HTTP/1.1\r\nX-Huge: " + std::string(32 << 10, 'a');
  const std::string idle = "GET /metrics HTTP/1.1\r\nX-Idle: a";
  for (int c = 0; c < 300; ++c) {
    const int fd = Connect(port, /*nonblocking=*/true);
    ASSERT_GE(fd, 0) << "client " << c;
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (size_t c = 0; c < fds.size(); ++c) {
    const std::string& data = c % 2 == 0 ? huge : idle;
    (void)!send(fds[c], data.data(), data.size(), MSG_NOSIGNAL);
  }
  long peak = before;
  for (int i = 0; i < 20; ++i) {  // 2 s: the server works through what it accepted
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    peak = std::max(peak, ResidentKib());
  }
  EXPECT_LT(peak - before, 2048) << "resident memory grew from " << before << " KiB to " << peak;
  for (int fd : fds) close(fd);
  // Once they are gone, a well-behaved client is answered at once.
  const auto start = std::chrono::steady_clock::now();
  const std::string ok = Exchange(port, "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200", 0), 0u) << ok;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 3.0);
}

TEST(HttpServerTest, AnAddressInUseIsAnErrorNamingIt) {
  auto first = Start();
  ASSERT_NE(first, nullptr);
  const std::string address = "127.0.0.1:" + std::to_string(first->port());
  auto second = HttpServer::Start(HttpOptions{address}, {});
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(address), std::string::npos);
}

TEST(HttpServerTest, ABarePortMeansLoopback) {
  setenv("BYTECOMP_TEST_HTTP", "9123", 1);
  EXPECT_EQ(HttpAddress("", "BYTECOMP_TEST_HTTP"), "127.0.0.1:9123");
  EXPECT_EQ(HttpAddress("0.0.0.0:80", "BYTECOMP_TEST_HTTP"), "0.0.0.0:80");
  unsetenv("BYTECOMP_TEST_HTTP");
  EXPECT_EQ(HttpAddress("", "BYTECOMP_TEST_HTTP"), "");
}

}  // namespace
}  // namespace bytecomp::telemetry
