// The job server_request_fuzzer plays, shared with the seed generator: the standard tensors
// the scheduler declares, the strategies it announces, and valid payloads for a request.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "codec_choice.h"
#include "control.pb.h"
#include "data.pb.h"
#include "strategy.pb.h"

namespace bytecomp::fuzz {

struct StandardTensorSpec {
  int64_t elements;
  int64_t partition_elements;
  proto::DType dtype;
};
// Tensor i is named "t<i+1>" with id i + 1; partitions go round-robin over the servers.
inline constexpr std::array<StandardTensorSpec, 4> kTensors = {{
    {1000, 1000, proto::DTYPE_FLOAT32},
    {3000, 1024, proto::DTYPE_FLOAT16},
    {10, 64, proto::DTYPE_BFLOAT16},
    {5000, 2048, proto::DTYPE_FLOAT32},
}};
inline constexpr uint64_t kStrategySeed = 7;

proto::DeclareReply StandardTensor(size_t index, int num_servers);
// Version `version` from round `first_round`: every tensor ("t*", forced) pushed with `push`,
// and pulled with `pull` when not null (two-way).
proto::Strategy StrategyFor(uint64_t version, uint64_t first_round, const ChosenCodec& push,
                            const ChosenCodec* pull);
// The events of an input after its u8 job shape (server_request_fuzzer.cc).
enum class ServerEvent : uint8_t { kRequest, kRaw, kDeclare, kStrategy, kFail, kTime, kCount };

// A kRequest event: every field of the request as the input chooses it, read in this order
// whatever the values (so that the seed generator can write them).
struct RequestChoice {
  uint8_t op = 0;              // DataOp, modulo 9 (7 and 8 are not ops)
  uint8_t tensor = 0;          // a declared tensor, modulo (declared + 1); the last: random_key
  uint8_t partition = 0;       // modulo (partitions + 1)
  bool declared_count = true;  // the partition's element count, else `count`
  uint16_t count = 0;
  bool declared_dtype = true;  // the tensor's dtype, else `dtype`
  uint8_t dtype = 0;
  uint64_t random_key = 0;
  uint8_t round = 0;  // modulo 4
  bool iteration_is_round = true;
  uint8_t iteration = 0;
  uint8_t sender = 0;      // as int8: -128 .. 127
  uint8_t version = 0;     // modulo (strategies + 2): 0 raw, beyond the last unknown
  uint8_t codec_mode = 0;  // modulo 3: the version's codec, "", `codec_text`
  std::string codec_text;
  uint8_t stage = 0;  // modulo 3
  uint8_t abort = 1;  // 0 modulo 8: the push carries an error
  uint8_t request_id = 0;
  uint16_t probe_reply_bytes = 0;
  uint8_t probe_turn = 0;  // modulo 8
  uint16_t probe_turn_ms = 0;
  uint8_t payload_mode = 2;  // modulo 3: none, `payload`, a valid encoding
  std::string payload;
  uint16_t flip_at = 0;  // not 0: the valid encoding's byte flip_at % size ^= flip
  uint8_t flip = 0;
  uint8_t payload_bytes_mode = 1;  // 0 modulo 16: payload_bytes says `payload_bytes`
  uint16_t payload_bytes = 0;
};
RequestChoice ReadRequestChoice(FuzzInput& in);
void WriteRequestChoice(FuzzInputWriter& out, const RequestChoice& choice);

// A payload the validator and the key store accept for the header's key, sender, iteration
// and stage: n raw values of its dtype, or (codec not null) n values encoded with it.
std::vector<uint8_t> ValidPayload(const ChosenCodec* codec, const proto::DataHeader& header,
                                  size_t n);

}  // namespace bytecomp::fuzz
