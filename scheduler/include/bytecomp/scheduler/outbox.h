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

// A message the scheduler refused: who sent it and the line for the log.
struct Refusal {
  std::string from;  // the sender's routing id
  std::string log_line;
};

class Outbox {
 public:
  void Send(const std::string& to, proto::ControlMessage message);
  // Every refusal of what a peer sent goes through here: the reply (an Error{reply}, or the
  // message given) to `to`, and `log_line` for the scheduler's refusal log, which counts every
  // one and logs them with a per-peer rate limit (common/refusal_log.h), so that a peer can
  // neither flood the log nor write lines of its choosing into it. Text a peer sent must be
  // cut short in `log_line` (Printable).
  void Refuse(const std::string& to, const std::string& reply, std::string log_line);
  void Refuse(const std::string& to, proto::ControlMessage reply, std::string log_line);
  // A refusal without a reply (a node's Error message is logged, never answered).
  void RefuseSilently(const std::string& from, std::string log_line);

  // The job ends: Shutdown{reason, job_done = status.ok()} to each of `told` (in that order),
  // and Scheduler::Run returns `status`. Only the first end counts; later calls add nothing,
  // so the first reason to stop is the one every node and the exit status report.
  void EndJob(absl::Status status, const std::string& reason, const std::vector<std::string>& told);

  const std::vector<OutgoingControl>& messages() const { return messages_; }
  const std::vector<Refusal>& refusals() const { return refusals_; }
  // Set once EndJob was called.
  const std::optional<absl::Status>& job_end() const { return job_end_; }

 private:
  std::vector<OutgoingControl> messages_;
  std::vector<Refusal> refusals_;
  std::optional<absl::Status> job_end_;
};

}  // namespace bytecomp
