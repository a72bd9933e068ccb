#include "bytecomp/scheduler/outbox.h"

#include <utility>

namespace bytecomp {

void Outbox::Send(const std::string& to, proto::ControlMessage message) {
  messages_.push_back(OutgoingControl{to, std::move(message)});
}

void Outbox::Refuse(const std::string& to, const std::string& reply, std::string log_line) {
  proto::ControlMessage message;
  message.mutable_error()->set_message(reply);
  Refuse(to, std::move(message), std::move(log_line));
}

void Outbox::Refuse(const std::string& to, proto::ControlMessage reply, std::string log_line) {
  Send(to, std::move(reply));
  refusals_.push_back(Refusal{to, std::move(log_line)});
}

void Outbox::RefuseSilently(const std::string& from, std::string log_line) {
  refusals_.push_back(Refusal{from, std::move(log_line)});
}

void Outbox::EndJob(absl::Status status, const std::string& reason,
                    const std::vector<std::string>& told) {
  if (job_end_.has_value()) return;
  proto::ControlMessage shutdown;
  shutdown.mutable_shutdown()->set_reason(reason);
  shutdown.mutable_shutdown()->set_job_done(status.ok());
  job_end_ = std::move(status);
  for (const std::string& id : told) Send(id, shutdown);
}

}  // namespace bytecomp
