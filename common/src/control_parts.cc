#include "bytecomp/common/control_parts.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace bytecomp {

std::vector<proto::ControlMessage> SplitControlMessage(const proto::ControlMessage& message,
                                                       uint64_t message_id) {
  std::vector<proto::ControlMessage> out;
  if (static_cast<int64_t>(message.ByteSizeLong()) <= kControlPartBytes) {
    out.push_back(message);
    return out;
  }
  const std::string bytes = message.SerializeAsString();
  const int64_t total = static_cast<int64_t>(bytes.size());
  const int64_t count = (total + kControlPartBytes - 1) / kControlPartBytes;
  out.reserve(count);
  for (int64_t i = 0; i < count; ++i) {
    proto::ControlMessage m;
    proto::ControlPart* part = m.mutable_part();
    part->set_message_id(message_id);
    part->set_index(static_cast<uint32_t>(i));
    part->set_count(static_cast<uint32_t>(count));
    part->set_total_bytes(total);
    const int64_t begin = i * kControlPartBytes;
    part->set_data(bytes.substr(begin, std::min(kControlPartBytes, total - begin)));
    out.push_back(std::move(m));
  }
  return out;
}

absl::Status ControlAssembly::Check(const proto::ControlPart& part) const {
  if (part.index() == 0) {
    if (part.count() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("a message in ", part.count(), " parts: a split message has at least 2"));
    }
    if (part.total_bytes() <= 0 || part.total_bytes() > max_bytes_) {
      return absl::InvalidArgumentError(
          absl::StrCat("a message of ", part.total_bytes(), " bytes in parts; at most ", max_bytes_,
                       " are taken (MaxControlReportBytes of the job's config)"));
    }
    if (part.total_bytes() > int64_t{part.count()} * kControlPartBytes ||
        part.total_bytes() <= int64_t{part.count() - 1} * kControlPartBytes) {
      return absl::InvalidArgumentError(absl::StrCat("a message of ", part.total_bytes(),
                                                     " bytes does not come in ", part.count(),
                                                     " parts of ", kControlPartBytes, " bytes"));
    }
  } else if (!joining_) {
    return absl::InvalidArgumentError(
        absl::StrCat("part ", part.index(), " of message ", part.message_id(),
                     " without its part 0 (the node reconnected in between, or it skipped it)"));
  } else if (part.message_id() != message_id_ || part.index() != next_index_ ||
             part.count() != count_ || part.total_bytes() != total_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("part ", part.index(), " of ", part.count(), " of message ", part.message_id(),
                     " (", part.total_bytes(), " bytes) does not follow part ", next_index_ - 1,
                     " of ", count_, " of message ", message_id_, " (", total_bytes_, " bytes)"));
  }
  const int64_t begin = int64_t{part.index()} * kControlPartBytes;
  const int64_t expected = std::min(kControlPartBytes, part.total_bytes() - begin);
  if (static_cast<int64_t>(part.data().size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat("part ", part.index(), " of ", part.count(),
                                                   " holds ", part.data().size(), " bytes, not ",
                                                   expected));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<proto::ControlMessage>> ControlAssembly::Add(
    const proto::ControlPart& part) {
  if (absl::Status s = Check(part); !s.ok()) {
    joining_ = false;
    std::string().swap(data_);
    return s;
  }
  if (part.index() == 0) {
    joining_ = true;
    message_id_ = part.message_id();
    count_ = part.count();
    total_bytes_ = part.total_bytes();
    data_.clear();  // grows with the parts that come, not with what part 0 announces
  }
  data_.append(part.data());
  next_index_ = part.index() + 1;
  if (next_index_ < count_) return std::optional<proto::ControlMessage>();
  joining_ = false;
  proto::ControlMessage whole;
  const bool parsed = whole.ParseFromString(data_);
  std::string().swap(data_);
  if (!parsed) {
    return absl::InvalidArgumentError(absl::StrCat("message ", message_id_, " (", total_bytes_,
                                                   " bytes in ", count_,
                                                   " parts) is not a ControlMessage"));
  }
  if (whole.has_part() || whole.has_register_()) {
    return absl::InvalidArgumentError(absl::StrCat("message ", message_id_, " in parts holds a ",
                                                   whole.has_part() ? "part" : "Register",
                                                   ", which travels in one frame"));
  }
  return std::optional<proto::ControlMessage>(std::move(whole));
}

}  // namespace bytecomp
