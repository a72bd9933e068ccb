// Fuzz target: everything a bytecomp-server receives, through the socket-free classes its
// threads run: the I/O thread's RequestDispatcher (request validation against the catalog,
// parking, link probes) and the key shards' KeyShard (KeyStore: rounds, aggregation, pulls),
// with the scheduler's declarations and strategies as commands.
//
// Input (fuzz_input.h): u8 job shape (workers, servers, shards, hierarchical pushers), then
// events until the input ends, each u8 kind:
//   request   a DataHeader built field by field from the input (keys of the declared tensors,
//             their codecs, valid encodings of them or bytes from the input), as ZeroMQ frames
//   raw       1 to 4 frames of input bytes (a header that may not parse)
//   declare   one of the standard tensors (kTensors), or a DeclareReply of input bytes (handed
//             on when they parse, as the control thread hands on what its scheduler client
//             parsed)
//   strategy  every tensor under a codec chosen as codec_choice.h reads it (and a pull codec),
//             or a Strategy of input bytes (when they parse)
//   fail      a node failed: held pulls fail
//   time      the clock advances (u16 ms), parked requests expire
// What the dispatcher hands a shard is handled by that shard at once, as the threads would.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bytecomp/common/config.h"
#include "bytecomp/common/node_token.h"
#include "bytecomp/common/partition.h"
#include "bytecomp/common/transport.h"
#include "bytecomp/server/key_shard.h"
#include "bytecomp/server/request_dispatcher.h"
#include "bytecomp/server/server_job.h"
#include "bytecomp/server/shard_messages.h"
#include "codec_choice.h"
#include "fuzz_input.h"
#include "server_fuzz_job.h"

namespace bytecomp::fuzz {
namespace {

struct Job {
  int workers = 1;
  int servers = 1;
  std::vector<int> pushers;
  std::unique_ptr<server::RequestDispatcher> dispatcher;
  std::vector<std::unique_ptr<server::KeyShard>> shards;
  std::vector<proto::DeclareReply> declared;
  std::vector<ChosenCodec> codecs;  // by strategy version - 1
  int64_t now_ms = 1000;
  bool stopped = false;
};

zmq::message_t Frame(absl::Span<const uint8_t> bytes) {
  return zmq::message_t(bytes.data(), bytes.size());
}

// Hands what the dispatcher routed to its shards, and checks the replies they send.
void Deliver(Job& job, server::DispatchOutbox& out) {
  for (auto& [shard, message] : out.to_shards) {
    if (shard >= job.shards.size()) {
      std::fprintf(stderr, "dispatcher routed to shard %zu of %zu\n", shard, job.shards.size());
      std::abort();
    }
    std::vector<server::OutgoingReply> replies;
    if (!job.shards[shard]->Handle(std::move(message), &replies)) job.stopped = true;
    for (const server::OutgoingReply& r : replies) {
      if (r.header.op() == proto::OP_PULL_REPLY &&
          r.header.payload_bytes() != static_cast<int64_t>(r.payload.size())) {
        std::fprintf(stderr, "pull reply says %lld bytes, carries %zu\n",
                     static_cast<long long>(r.header.payload_bytes()), r.payload.size());
        std::abort();
      }
    }
  }
  out.to_shards.clear();
  out.to_router.clear();
}

void Command(Job& job, const server::ServerCommand& command) {
  server::DispatchOutbox out;
  if (!job.dispatcher->HandleCommand(command, job.now_ms, &out)) job.stopped = true;
  Deliver(job, out);
}

// A declaration or strategy of input bytes, as the control thread hands it on: only once it
// parsed (the scheduler client parses every message before the server sees it).
template <typename Proto, typename Wrapped>
void CommandOfBytes(Job& job, const std::string& bytes) {
  auto parsed = std::make_shared<Proto>();
  if (parsed->ParseFromString(bytes)) Command(job, Wrapped{std::move(parsed)});
}

void Request(Job& job, std::vector<zmq::message_t> frames) {
  server::DispatchOutbox out;
  job.dispatcher->HandleRequest(std::move(frames), job.now_ms, &out);
  Deliver(job, out);
}

// Worker w's token in the fuzzed job (fixed, so that inputs replay the same).
NodeToken FuzzWorkerToken(int w) { return NodeToken{static_cast<uint64_t>(w) + 1, 0x5eed}; }

// A request as a worker (or a hostile peer) would send it, field by field.
std::vector<zmq::message_t> BuiltRequest(const Job& job, const RequestChoice& c) {
  proto::DataHeader h;
  h.set_op(static_cast<proto::DataOp>(c.op % 9));
  const size_t t = c.tensor % (job.declared.size() + 1);
  int64_t n = c.count;
  if (t < job.declared.size()) {
    const proto::DeclareReply& d = job.declared[t];
    const uint32_t partition = c.partition % (d.partition_server_size() + 1);
    h.set_key(MakeKey(d.tensor_id(), partition));
    const int64_t offset = int64_t{partition} * d.partition_elements();
    if (c.declared_count) {
      n = std::max<int64_t>(0, std::min(d.partition_elements(), d.element_count() - offset));
    }
    h.set_dtype(static_cast<proto::DType>(c.declared_dtype ? d.dtype() : c.dtype));
  } else {
    h.set_key(c.random_key);
    h.set_dtype(static_cast<proto::DType>(c.dtype % 4));
  }
  h.set_element_count(n);
  h.set_round(c.round % 4);
  h.set_iteration(c.iteration_is_round ? h.round() : c.iteration);
  h.set_sender(static_cast<int8_t>(c.sender));
  // The sender's token, as a worker sends it; every 16th request id goes without (a peer that
  // is not the worker), so both the refusal and everything behind the check are reached.
  if (c.request_id % 16 != 15) SetHeaderToken(FuzzWorkerToken(h.sender()), &h);
  const uint64_t version = c.version % (job.codecs.size() + 2);
  h.set_strategy_version(version);
  const ChosenCodec* codec =
      version >= 1 && version <= job.codecs.size() ? &job.codecs[version - 1] : nullptr;
  switch (c.codec_mode % 3) {
    case 0:
      h.set_codec(codec != nullptr ? codec->spec->name : "");
      break;
    case 1:
      h.set_codec("");
      break;
    default:
      h.set_codec(c.codec_text);
      break;
  }
  h.set_stage(c.stage % 3);
  if (c.abort % 8 == 0) h.set_error("worker gave up");
  h.set_request_id(c.request_id);
  if (h.op() == proto::OP_PROBE) {
    h.set_probe_reply_bytes(c.probe_reply_bytes);
    h.set_probe_turn(static_cast<proto::ProbeTurn>(c.probe_turn % 8));
    h.set_probe_turn_ms(c.probe_turn_ms);
  }
  std::vector<uint8_t> payload;
  if (c.payload_mode % 3 == 1) payload.assign(c.payload.begin(), c.payload.end());
  if (c.payload_mode % 3 == 2) {
    payload = ValidPayload(codec, h, static_cast<size_t>(std::min<int64_t>(n, 1 << 16)));
    if (c.flip_at != 0 && !payload.empty()) payload[c.flip_at % payload.size()] ^= c.flip;
  }
  h.set_payload_bytes(c.payload_bytes_mode % 16 == 0 ? c.payload_bytes
                                                     : static_cast<int64_t>(payload.size()));
  std::vector<zmq::message_t> frames;
  frames.emplace_back("worker", 6);
  frames.push_back(ProtoFrame(h));
  if (c.payload_mode % 3 != 0) frames.push_back(Frame(payload));
  return frames;
}

}  // namespace
}  // namespace bytecomp::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  bytecomp::fuzz::SilenceLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bytecomp;
  using namespace bytecomp::fuzz;
  FuzzInput in(data, size);
  Job job;
  const uint8_t shape = in.U8();
  job.workers = 1 + shape % 4;
  job.servers = 1 + (shape >> 2) % 2;
  const size_t num_shards = 1 + (shape >> 3) % 2;
  if ((shape >> 4) & 1) {
    for (int w = 0; w < job.workers; w += 2) job.pushers.push_back(w);  // local roots
  }
  server::ServerJob server_job;
  server_job.my_rank = 0;
  server_job.num_workers = job.workers;
  server_job.num_servers = job.servers;
  server_job.pushers = job.pushers;
  for (int w = 0; w < job.workers; ++w) server_job.worker_tokens.push_back(FuzzWorkerToken(w));
  server_job.config = WithClusterDefaults({});
  job.dispatcher = std::make_unique<server::RequestDispatcher>(server_job, num_shards);
  for (size_t s = 0; s < num_shards; ++s) {
    job.shards.push_back(std::make_unique<server::KeyShard>(static_cast<int>(s), server_job));
  }
  for (int events = 0; !in.empty() && !job.stopped && events < 256; ++events) {
    switch (static_cast<ServerEvent>(in.U8() % static_cast<uint8_t>(ServerEvent::kCount))) {
      case ServerEvent::kRequest:
        Request(job, BuiltRequest(job, ReadRequestChoice(in)));
        break;
      case ServerEvent::kRaw: {
        std::vector<zmq::message_t> frames;
        const int count = 1 + in.U8() % 4;
        for (int f = 0; f < count; ++f) frames.push_back(Frame(in.Bytes()));
        Request(job, std::move(frames));
        break;
      }
      case ServerEvent::kDeclare: {
        const size_t which = in.U8();
        if (which < kTensors.size()) {
          const proto::DeclareReply d = StandardTensor(which, job.servers);
          job.declared.push_back(d);
          Command(job, server::DeclareCommand{std::make_shared<proto::DeclareReply>(d)});
        } else {
          CommandOfBytes<proto::DeclareReply, server::DeclareCommand>(job, in.String());
        }
        break;
      }
      case ServerEvent::kStrategy: {
        if (in.Bool()) {
          const ChosenCodec push = ReadCodecChoice(in);
          const bool two_way = in.Bool();
          const ChosenCodec pull = ReadCodecChoice(in);
          job.codecs.push_back(push);
          const proto::Strategy s =
              StrategyFor(job.codecs.size(), in.U8(), push, two_way ? &pull : nullptr);
          Command(job, server::StrategyCommand{std::make_shared<proto::Strategy>(s)});
        } else {
          CommandOfBytes<proto::Strategy, server::StrategyCommand>(job, in.String());
        }
        break;
      }
      case ServerEvent::kFail:
        Command(job, server::FailCommand{"node failed"});
        break;
      case ServerEvent::kTime:
      case ServerEvent::kCount: {
        job.now_ms += in.U16();
        server::DispatchOutbox out;
        job.dispatcher->ExpireParked(job.now_ms, &out);
        Deliver(job, out);
      }
    }
  }
  return 0;
}
