#include "bytecomp/common/transport.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bytecomp/common/net.h"

namespace bytecomp {

zmq::message_t ProtoFrame(const google::protobuf::Message& message) {
  zmq::message_t frame(message.ByteSizeLong());
  message.SerializeToArray(frame.data(), static_cast<int>(frame.size()));
  return frame;
}

absl::Status ParseFrame(const zmq::message_t& frame, google::protobuf::Message* out) {
  if (!out->ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed ", out->GetTypeName(), " frame (", frame.size(), " bytes)"));
  }
  return absl::OkStatus();
}

absl::Status SendFrames(zmq::socket_t& socket, std::vector<zmq::message_t>& frames,
                        bool dont_wait) {
  try {
    for (size_t i = 0; i < frames.size(); ++i) {
      zmq::send_flags flags = zmq::send_flags::none;
      if (i + 1 < frames.size()) flags = flags | zmq::send_flags::sndmore;
      if (dont_wait) flags = flags | zmq::send_flags::dontwait;
      if (!socket.send(frames[i], flags)) {
        return absl::ResourceExhaustedError("send would block");
      }
    }
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("zmq send: ", e.what()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<zmq::message_t>> RecvFrames(
    zmq::socket_t& socket, std::optional<std::chrono::milliseconds> timeout) {
  std::vector<zmq::message_t> frames;
  try {
    if (timeout.has_value()) {
      zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, *timeout) == 0) return frames;
    }
    do {
      zmq::message_t frame;
      if (!socket.recv(frame, zmq::recv_flags::none)) break;
      frames.push_back(std::move(frame));
    } while (frames.back().more());
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("zmq recv: ", e.what()));
  }
  return frames;
}

void ConfigureSocket(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::linger, 0);
  // Bounded queues (ZeroMQ's default, 1000 messages each way) until LimitSocket
  // (socket_limits.h) sets the socket's own: an unbounded queue lets a peer that never reads
  // grow the process without end.
  socket.set(zmq::sockopt::sndhwm, 1000);
  socket.set(zmq::sockopt::rcvhwm, 1000);
  socket.set(zmq::sockopt::tcp_keepalive, 1);
  socket.set(zmq::sockopt::sndbuf, 4 << 20);
  socket.set(zmq::sockopt::rcvbuf, 4 << 20);
}

absl::StatusOr<int> BindTcp(zmq::socket_t& socket, const std::string& host, int port) {
  const std::string endpoint =
      port == 0 ? absl::StrCat("tcp://", host, ":*") : TcpEndpoint(host, port);
  try {
    socket.bind(endpoint);
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("cannot bind ", endpoint, ": ", e.what()));
  }
  const std::string bound = socket.get(zmq::sockopt::last_endpoint);
  absl::StatusOr<HostPort> hp = ParseHostPort(bound);
  if (!hp.ok()) return hp.status();
  return hp->port;
}

std::string FrameToString(const zmq::message_t& frame) {
  return std::string(static_cast<const char*>(frame.data()), frame.size());
}

int64_t MonotonicUs() {
  using namespace std::chrono;
  return duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count();
}

int64_t MonotonicMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace bytecomp
