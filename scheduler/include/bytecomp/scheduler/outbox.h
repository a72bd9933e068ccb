// What a scheduler protocol answers with: control messages to nodes, in the order they are
// to be sent, refusals for the scheduler's log of bad messages, and at most one end of the
// job. Protocols append to an Outbox and never touch a socket; the scheduler's loop sends
// what they appended (scheduler.cc, Deliver), so each protocol is tested without one.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "control.pb.h"

namespace bytecomp {

struct OutgoingControl {
  std::string to;  // the recipient's routing id (its DEALER's identity)
  proto::ControlMessage message;
};

class Outbox {
 public:
  void Send(const std::string& to, proto::ControlMessage message);
  // Error{text} to `to`.
  void SendError(const std::string& to, const std::string& text);
  // Error{reply} to `to`, and `log_line` for the scheduler's counted log of bad messages
  // (it logs the first ones, then every 1000th, so a peer stuck in a loop cannot flood it).
  void Refuse(const std::string& to, const std::string& reply, std::string log_line);

  // The job ends: Shutdown{reason} to each of `told` (in that order), and Scheduler::Run
  // returns `status`. Only the first end counts; later calls add nothing, so the first
  // reason to stop is the one every node and the exit status report.
  void EndJob(absl::Status status, const std::string& reason,
              const std::vector<std::string>& told);

  const std::vector<OutgoingControl>& messages() const { return messages_; }
  const std::vector<std::string>& refusals() const { return refusals_; }
  // Set once EndJob was called.
  const std::optional<absl::Status>& job_end() const { return job_end_; }

 private:
  std::vector<OutgoingControl> messages_;
  std::vector<std::string> refusals_;
  std::optional<absl::Status> job_end_;
};

}  // namespace bytecomp
