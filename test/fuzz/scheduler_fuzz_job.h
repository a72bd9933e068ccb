// The job scheduler_control_fuzzer plays, shared with the seed generator: the input's events
// and the identities of the nodes it registers.
#pragma once

#include <cstdint>
#include <string>

#include "control.pb.h"

namespace bytecomp::fuzz {

// After the u8 job shape (scheduler_control_fuzzer.cc), events until the input ends, each a
// u8 kind:
enum class SchedulerEvent : uint8_t {
  kMessage,  // u8 sender (a node of the job, modulo its size + 1: the last is a stranger),
             // then one frame of input bytes: what that node's DEALER sent
  kTime,     // u16: the clock advances that many ms times 16; the timeouts are checked
  kReload,   // SIGHUP: the strategy file is read again
  kStop,     // SIGTERM
  kCount,
};

// The routing id of worker or server `rank` ("w0", "s1"), as registered before the events
// (job shape bits 5-6: none, all, all but the last worker).
std::string NodeIdentity(proto::Role role, int rank);
// The token of worker or server `rank` (16 bytes fixed by role and rank). A message the
// fuzzer lets a node send carries its node's token when the input's message has none, and the
// token of node (byte % nodes) when it has one byte: any connection may act as any node.
std::string NodeTokenBytes(proto::Role role, int rank);
// The Register a node of the job sends, with its token (servers on tcp://127.0.0.1:7000 +
// rank; workers on machine "m<rank / 2>" when `hierarchical`).
proto::ControlMessage RegisterMessage(proto::Role role, int rank, bool hierarchical);

}  // namespace bytecomp::fuzz
