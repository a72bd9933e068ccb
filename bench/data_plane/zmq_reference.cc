// bytecomp-zmq-reference: raw ZeroMQ throughput between two processes on loopback, the
// reference the data-plane benchmark is measured against. A forked child receives (PULL) and
// the parent sends (PUSH) --messages messages of --message_bytes; repeated --repeats times.
// With --key_file both ends speak CURVE with that cluster key (what encryption costs one stream).
// Prints one JSON line: {"bench":"zmq-reference","message_bytes":..,"median_gbytes_per_s":..,
// "keyed":true|false}.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bytecomp/common.h"

ABSL_FLAG(int64_t, message_bytes, 4 << 20, "bytes per message");
ABSL_FLAG(int, messages, 256, "messages per repeat");
ABSL_FLAG(int, repeats, 5, "repeats (the median is reported)");
ABSL_FLAG(std::string, key_file, "", "cluster key file: CURVE on both ends (default: plain TCP)");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int64_t size = absl::GetFlag(FLAGS_message_bytes);
  const int messages = absl::GetFlag(FLAGS_messages);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  std::optional<bytecomp::ClusterKey> key;
  if (const std::string path = absl::GetFlag(FLAGS_key_file); !path.empty()) {
    absl::StatusOr<bytecomp::LoadedClusterKey> loaded = bytecomp::ReadClusterKeyFile(path);
    if (!loaded.ok()) {
      std::fprintf(stderr, "bytecomp-zmq-reference: %s\n",
                   std::string(loaded.status().message()).c_str());
      return 2;
    }
    key = loaded->key;
  }
  int pipe_fd[2];
  if (pipe(pipe_fd) != 0) return 2;
  // The receiver binds an ephemeral port and tells the parent through the pipe.
  const pid_t child = fork();
  if (child == 0) {
    zmq::context_t ctx(1);
    bytecomp::SocketSecurity security(ctx, key, /*allow_insecure=*/false);
    zmq::socket_t pull(ctx, zmq::socket_type::pull);
    bytecomp::ConfigureSocket(pull);
    if (!security.SecureListening(pull).ok()) _exit(2);
    absl::StatusOr<int> port = bytecomp::BindTcp(pull, "127.0.0.1", 0);
    int p = port.ok() ? *port : -1;
    (void)!write(pipe_fd[1], &p, sizeof(p));
    for (int64_t i = 0; i < static_cast<int64_t>(messages) * repeats; ++i) {
      zmq::message_t m;
      if (!pull.recv(m)) break;
    }
    _exit(0);
  }
  int port = -1;
  (void)!read(pipe_fd[0], &port, sizeof(port));
  if (port < 0) return 2;
  zmq::context_t ctx(1);
  bytecomp::SocketSecurity security(ctx, key, /*allow_insecure=*/false);
  zmq::socket_t push(ctx, zmq::socket_type::push);
  bytecomp::ConfigureSocket(push);
  security.SecureConnecting(push);
  push.set(zmq::sockopt::sndhwm, 4);  // the sender may not run far ahead of the receiver
  push.connect(bytecomp::TcpEndpoint("127.0.0.1", port));
  std::vector<char> buffer(size, 1);
  std::vector<double> rates;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < messages; ++i) {
      // Zero-copy from the sender's buffer, as the worker engine sends.
      zmq::message_t m(
          buffer.data(), buffer.size(), [](void*, void*) {}, nullptr);
      push.send(m, zmq::send_flags::none);
    }
    // The HWM of 4 bounds what is still queued; count the time to hand the last one over.
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rates.push_back(static_cast<double>(size) * messages / s / 1e9);
  }
  int status = 0;
  waitpid(child, &status, 0);
  std::sort(rates.begin(), rates.end());
  std::printf(
      "{\"bench\":\"zmq-reference\",\"message_bytes\":%lld,\"messages\":%d,"
      "\"median_gbytes_per_s\":%.3f,\"min\":%.3f,\"max\":%.3f,\"keyed\":%s}\n",
      static_cast<long long>(size), messages, rates[rates.size() / 2], rates.front(), rates.back(),
      key.has_value() ? "true" : "false");
  return 0;
}
