#include "scheduler_fuzz_job.h"

#include "absl/strings/str_cat.h"

namespace bytecomp::fuzz {

std::string NodeIdentity(proto::Role role, int rank) {
  return absl::StrCat(role == proto::ROLE_WORKER ? "w" : "s", rank);
}

std::string NodeTokenBytes(proto::Role role, int rank) {
  std::string token = absl::StrCat("token-", role == proto::ROLE_WORKER ? "w" : "s", rank);
  token.resize(16, '.');
  return token;
}

proto::ControlMessage RegisterMessage(proto::Role role, int rank, bool hierarchical) {
  proto::ControlMessage m;
  proto::Register* r = m.mutable_register_();
  r->set_role(role);
  r->set_requested_rank(rank);
  r->set_hostname("host");
  r->set_pid(100 + rank);
  if (role == proto::ROLE_SERVER)
    r->set_data_address(absl::StrCat("tcp://127.0.0.1:", 7000 + rank));
  if (role == proto::ROLE_WORKER && hierarchical) r->set_machine(absl::StrCat("m", rank / 2));
  r->set_token(NodeTokenBytes(role, rank < 0 ? 0 : rank));
  return m;
}

}  // namespace bytecomp::fuzz
