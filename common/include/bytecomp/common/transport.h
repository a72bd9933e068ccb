// ZeroMQ framing shared by every process: protobuf frames, zero-copy payloads, polling.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "zmq.hpp"

namespace bytecomp {

// Serialises `message` into one ZeroMQ frame.
zmq::message_t ProtoFrame(const google::protobuf::Message& message);
// Parses a frame; the error names the expected type and the frame size.
absl::Status ParseFrame(const zmq::message_t& frame, google::protobuf::Message* out);

// Sends frames as one multipart message. Returns an error instead of throwing.
absl::Status SendFrames(zmq::socket_t& socket, std::vector<zmq::message_t>& frames,
                        bool dont_wait = false);
// Receives every frame of one multipart message, waiting at most `timeout` (nullopt: forever).
// Returns std::nullopt-like empty vector on timeout.
absl::StatusOr<std::vector<zmq::message_t>> RecvFrames(
    zmq::socket_t& socket, std::optional<std::chrono::milliseconds> timeout = std::nullopt);

// Socket options used everywhere: no linger on close, ZeroMQ's default queue bounds (a socket
// that faces a peer then gets its own limits, socket_limits.h), and TCP keepalive.
void ConfigureSocket(zmq::socket_t& socket);
// Binds to tcp://host:port (port 0: ephemeral) and returns the bound endpoint's port.
absl::StatusOr<int> BindTcp(zmq::socket_t& socket, const std::string& host, int port);

std::string FrameToString(const zmq::message_t& frame);

// Milliseconds on a monotonic clock.
int64_t MonotonicMs();
int64_t MonotonicUs();

}  // namespace bytecomp
