#include "bytecomp/scheduler/outbox.h"

#include <utility>

namespace bytecomp {

void Outbox::Send(const std::string& to, proto::ControlMessage message) {
  messages_.push_back(OutgoingControl{to, std::move(message)});
}

void Outbox::SendError(const std::string& to, const std::string& text) {
  proto::ControlMessage message;
  message.mutable_error()->set_message(text);
  Send(to, std::move(message));
}

void Outbox::Refuse(const std::string& to, const std::string& reply, std::string log_line) {
  SendError(to, reply);
  refusals_.push_back(std::move(log_line));
}

void Outbox::EndJob(absl::Status status, const std::string& reason,
                    const std::vector<std::string>& told) {
  if (job_end_.has_value()) return;
  job_end_ = std::move(status);
  proto::ControlMessage shutdown;
  shutdown.mutable_shutdown()->set_reason(reason);
  for (const std::string& id : told) Send(id, shutdown);
}

}  // namespace bytecomp
