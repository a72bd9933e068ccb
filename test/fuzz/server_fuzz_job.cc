#include "server_fuzz_job.h"

#include <string>

#include "bytecomp/common/dtype.h"
#include "bytecomp/common/partition.h"
#include "bytecomp/compress/codec_util.h"
#include "seed_support.h"

namespace bytecomp::fuzz {

proto::DeclareReply StandardTensor(size_t index, int num_servers) {
  const StandardTensorSpec& spec = kTensors[index];
  proto::DeclareReply d;
  d.set_name("t" + std::to_string(index + 1));
  d.set_ok(true);
  d.set_tensor_id(static_cast<uint32_t>(index + 1));
  d.set_element_count(spec.elements);
  d.set_partition_elements(spec.partition_elements);
  d.set_dtype(spec.dtype);
  for (int64_t p = 0; p < NumPartitions(spec.elements, spec.partition_elements); ++p) {
    d.add_partition_server(static_cast<int32_t>(p % num_servers));
  }
  return d;
}

proto::Strategy StrategyFor(uint64_t version, uint64_t first_round, const ChosenCodec& push,
                            const ChosenCodec* pull) {
  proto::Strategy s;
  s.set_version(version);
  s.set_first_round(first_round);
  s.set_seed(kStrategySeed);
  proto::TensorStrategy* t = s.add_tensors();
  t->set_name_pattern("t*");
  t->set_force(true);
  t->mutable_push_codec()->set_name(push.spec->name);
  for (const auto& [k, v] : push.params) (*t->mutable_push_codec()->mutable_params())[k] = v;
  if (pull != nullptr) {
    t->mutable_pull_codec()->set_name(pull->spec->name);
    for (const auto& [k, v] : pull->params) (*t->mutable_pull_codec()->mutable_params())[k] = v;
  }
  return s;
}

RequestChoice ReadRequestChoice(FuzzInput& in) {
  RequestChoice c;
  c.op = in.U8();
  c.tensor = in.U8();
  c.partition = in.U8();
  c.declared_count = in.Bool();
  c.count = in.U16();
  c.declared_dtype = in.Bool();
  c.dtype = in.U8();
  c.random_key = in.U64();
  c.round = in.U8();
  c.iteration_is_round = in.Bool();
  c.iteration = in.U8();
  c.sender = in.U8();
  c.version = in.U8();
  c.codec_mode = in.U8();
  c.codec_text = in.String(32);
  c.stage = in.U8();
  c.abort = in.U8();
  c.request_id = in.U8();
  c.probe_reply_bytes = in.U16();
  c.probe_turn = in.U8();
  c.probe_turn_ms = in.U16();
  c.payload_mode = in.U8();
  c.payload = in.String();
  c.flip_at = in.U16();
  c.flip = in.U8();
  c.payload_bytes_mode = in.U8();
  c.payload_bytes = in.U16();
  return c;
}

void WriteRequestChoice(FuzzInputWriter& out, const RequestChoice& c) {
  out.U8(c.op).U8(c.tensor).U8(c.partition).Bool(c.declared_count).U16(c.count);
  out.Bool(c.declared_dtype).U8(c.dtype).U64(c.random_key).U8(c.round);
  out.Bool(c.iteration_is_round).U8(c.iteration).U8(c.sender).U8(c.version).U8(c.codec_mode);
  out.String(c.codec_text).U8(c.stage).U8(c.abort).U8(c.request_id).U16(c.probe_reply_bytes);
  out.U8(c.probe_turn).U16(c.probe_turn_ms).U8(c.payload_mode).String(c.payload);
  out.U16(c.flip_at).U8(c.flip).U8(c.payload_bytes_mode).U16(c.payload_bytes);
}

std::vector<uint8_t> ValidPayload(const ChosenCodec* codec, const proto::DataHeader& h, size_t n) {
  const std::vector<float> values = SeedValues(n, static_cast<uint64_t>(h.sender()) + 1);
  if (codec == nullptr) {
    const size_t width = DTypeSize(h.dtype());
    std::vector<uint8_t> raw(n * width);
    if (!raw.empty()) FromFloat32(h.dtype(), values.data(), raw.data(), n);
    return raw;
  }
  std::unique_ptr<compress::Codec> c = MakeCodec(*codec);
  const compress::CodecContext ctx{.key = h.key(),
                                   .round = h.iteration(),
                                   .node = static_cast<uint32_t>(h.sender()),
                                   .seed = kStrategySeed};
  compress::TwoRoundCodec* two = compress::AsTwoRound(*c);
  if (two != nullptr && h.stage() != 0) {
    const size_t floats = h.stage() == 1 ? two->FirstRoundFloats(n) : two->SecondRoundFloats(n);
    std::vector<uint8_t> out(4 + 4 * floats);
    compress::PutU32(out.data(), h.stage());
    for (size_t i = 0; i < floats; ++i) {
      compress::PutF32(out.data() + 4 + 4 * i, n > 0 ? values[i % n] : 0.0f);
    }
    return out;
  }
  std::vector<uint8_t> out(c->MaxEncodedBytes(n));
  absl::StatusOr<size_t> bytes = c->Encode(values, ctx, absl::MakeSpan(out));
  out.resize(bytes.ok() ? *bytes : 0);
  return out;
}

}  // namespace bytecomp::fuzz
