// Writes the seed corpora of the fuzz targets (corpus/<target>/seed-*) from valid encodings:
// payloads encoded by every registered codec, well-formed requests and control messages, the
// repository's config files. Deterministic: the same build writes the same files.
//
//   make_fuzz_seeds <corpus dir>      (test/fuzz/README.md: when to run it)
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/codec_util.h"
#include "codec_choice.h"
#include "fuzz_input.h"
#include "seed_support.h"
#include "scheduler_fuzz_job.h"
#include "server_fuzz_job.h"

namespace bytecomp::fuzz {

// Parameters at their defaults, and (codecs with parameters) each at its first other value.
std::vector<std::vector<uint8_t>> ParamChoices(const std::string& codec) {
  std::vector<std::vector<uint8_t>> choices = {{}};
  const compress::CodecSpec* spec = compress::CodecRegistry::Global().Find(codec);
  if (spec != nullptr && !spec->params.empty()) {
    choices.push_back(std::vector<uint8_t>(spec->params.size(), 1));
  }
  return choices;
}

void WriteCodecSeeds(SeedWriter& seeds) {
  for (const std::string& name : compress::CodecRegistry::Global().Names()) {
    const std::vector<std::vector<uint8_t>> choices = ParamChoices(name);
    for (size_t c = 0; c < choices.size(); ++c) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{33}, size_t{700}}) {
        if (c > 0 && n != 700) continue;
        const ChosenCodec chosen = Chosen(name, choices[c]);
        std::unique_ptr<compress::Codec> codec = MakeCodec(chosen);
        const compress::CodecContext ctx{.key = 1, .round = 2, .node = 0, .seed = 3};
        const std::vector<uint8_t> payload = EncodeSeed(*codec, SeedValues(n, 1), ctx);
        FuzzInputWriter w;
        WriteCodecChoice(w, name, choices[c]);
        WriteContext(w, ctx);
        w.U16(static_cast<uint16_t>(n)).U8(0).Rest(payload);
        seeds.Write("codec", absl::StrCat(name, "-p", c, "-n", n), w.bytes());
      }
    }
  }
}

void WriteAggregatorSeeds(SeedWriter& seeds) {
  for (const std::string& name : compress::CodecRegistry::Global().Names()) {
    for (size_t n : {size_t{1}, size_t{100}, size_t{500}}) {
      const int workers = n == 1 ? 1 : (n == 100 ? 3 : 2);
      const int rounds = n == 100 ? 2 : 1;
      const compress::CodecContext base{.key = 5, .round = 1, .node = 0, .seed = 9};
      FuzzInputWriter w;
      WriteCodecChoice(w, name);
      WriteContext(w, base);
      w.U16(static_cast<uint16_t>(n)).U8(static_cast<uint8_t>(workers - 1));
      w.U8(static_cast<uint8_t>(rounds - 1));
      const ChosenCodec chosen = Chosen(name, {});
      for (int r = 0; r < rounds; ++r) {
        for (int k = 0; k < workers; ++k) {
          compress::CodecContext ctx = base;
          ctx.round += static_cast<uint64_t>(r);
          ctx.node = static_cast<uint32_t>(k);
          std::unique_ptr<compress::Codec> codec = MakeCodec(chosen);
          const std::vector<float> values = SeedValues(n, 10 * r + k);
          std::vector<uint8_t> payload;
          if (compress::TwoRoundCodec* two = compress::AsTwoRound(*codec)) {
            payload.resize(two->FirstRoundBytes(n));
            absl::StatusOr<size_t> bytes = two->EncodeFirst(values, ctx, absl::MakeSpan(payload));
            if (!bytes.ok()) std::exit(1);
            payload.resize(*bytes);
          } else {
            payload = EncodeSeed(*codec, values, ctx);
          }
          w.U8(0).Bytes(payload);
        }
      }
      seeds.Write("aggregator", absl::StrCat(name, "-n", n), w.bytes());
    }
  }
}

// A two-worker job: the standard tensors declared, one strategy (every codec in turn, and raw),
// each worker pushing and pulling two keys for two rounds.
void WriteServerSeeds(SeedWriter& seeds) {
  std::vector<std::string> codecs = compress::CodecRegistry::Global().Names();
  codecs.push_back("");  // raw: no strategy
  for (size_t i = 0; i < codecs.size(); ++i) {
    const std::string& name = codecs[i];
    FuzzInputWriter w;
    w.U8(1 | 8);  // 2 workers, 1 server, 2 shards
    for (size_t t = 0; t < kTensors.size(); ++t) {
      w.U8(static_cast<uint8_t>(ServerEvent::kDeclare)).U8(static_cast<uint8_t>(t));
    }
    const bool two_round = name == "powersgd";
    if (!name.empty()) {
      w.U8(static_cast<uint8_t>(ServerEvent::kStrategy)).Bool(true);
      WriteCodecChoice(w, name);
      w.Bool(i % 2 == 1);  // two-way for every other codec, pulled as fp16
      WriteCodecChoice(w, "fp16");
      w.U8(0);
    }
    for (uint8_t round = 0; round < 2; ++round) {
      for (uint8_t worker = 0; worker < 2; ++worker) {
        for (uint8_t tensor = 0; tensor < 2; ++tensor) {
          RequestChoice push;
          push.op = proto::OP_PUSH;
          push.tensor = tensor;
          push.round = round;
          push.sender = worker;
          push.version = name.empty() ? 0 : 1;
          push.stage = two_round ? round + 1 : 0;
          push.request_id = static_cast<uint8_t>(10 * round + worker);
          w.U8(static_cast<uint8_t>(ServerEvent::kRequest));
          WriteRequestChoice(w, push);
        }
      }
      for (uint8_t worker = 0; worker < 2; ++worker) {
        RequestChoice pull;
        pull.op = proto::OP_PULL;
        pull.round = round;
        pull.sender = worker;
        pull.version = name.empty() ? 0 : 1;
        pull.stage = two_round ? round + 1 : 0;
        pull.payload_mode = 0;
        w.U8(static_cast<uint8_t>(ServerEvent::kRequest));
        WriteRequestChoice(w, pull);
      }
    }
    seeds.Write("server_request", name.empty() ? "raw" : name, w.bytes());
  }
}

// Scheduler seeds: each a script of messages from the job's nodes.
class SchedulerScript {
 public:
  // shape as scheduler_control_fuzzer.cc reads it.
  SchedulerScript(int workers, int servers, bool hierarchical, bool auto_plan, int registered)
      : workers_(workers) {
    w_.U8(static_cast<uint8_t>((workers - 1) | (servers - 1) << 2 | hierarchical << 3 |
                               auto_plan << 4 | registered << 5));
  }
  // sender: worker ranks first, then server ranks.
  SchedulerScript& From(int sender, const proto::ControlMessage& m) {
    w_.U8(static_cast<uint8_t>(SchedulerEvent::kMessage)).U8(static_cast<uint8_t>(sender));
    w_.String(m.SerializeAsString());
    return *this;
  }
  SchedulerScript& FromWorkers(const proto::ControlMessage& m) {
    for (int r = 0; r < workers_; ++r) From(r, m);
    return *this;
  }
  SchedulerScript& Event(SchedulerEvent e) {
    w_.U8(static_cast<uint8_t>(e));
    return *this;
  }
  SchedulerScript& Wait(uint16_t ms16) {
    w_.U8(static_cast<uint8_t>(SchedulerEvent::kTime)).U16(ms16);
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return w_.bytes(); }

 private:
  int workers_;
  FuzzInputWriter w_;
};

proto::ControlMessage Barrier(const std::string& group, uint64_t sequence) {
  proto::ControlMessage m;
  m.mutable_barrier_request()->set_group(group);
  m.mutable_barrier_request()->set_sequence(sequence);
  return m;
}

proto::ControlMessage Declare(const std::string& name, int64_t elements, int dtype) {
  proto::ControlMessage m;
  m.mutable_declare_tensor()->set_name(name);
  m.mutable_declare_tensor()->set_element_count(elements);
  m.mutable_declare_tensor()->set_dtype(dtype);
  return m;
}

proto::ControlMessage Heartbeat() {
  proto::ControlMessage m;
  m.mutable_heartbeat()->set_sequence(1);
  return m;
}

proto::ControlMessage WorkerDone() {
  proto::ControlMessage m;
  m.mutable_worker_done();
  return m;
}

proto::ControlMessage LinkReport(int servers) {
  proto::ControlMessage m;
  proto::LinkProbeReport* r = m.mutable_link_probe_report();
  for (int s = 0; s < servers; ++s) {
    proto::LinkProbe* p = r->add_links();
    p->set_server(s);
    p->set_latency_us(80);
    p->set_up_gbps(9.5);
    p->set_down_gbps(9.1);
    p->set_probe_bytes(1 << 20);
    p->set_latency_samples(16);
    p->set_transfer_samples(3);
  }
  r->set_elapsed_ms(40);
  return m;
}

proto::ControlMessage Profile() {
  proto::ControlMessage m;
  proto::ModelProfile* p = m.mutable_profile_report()->mutable_profile();
  p->set_model("fuzz");
  p->set_source("measured");
  p->set_forward_us(3000);
  p->set_measured_round_us(9000);
  const int64_t sizes[] = {1000, 2000000, 300000, 64};
  for (int i = 0; i < 4; ++i) {
    proto::TensorProfile* t = p->add_tensors();
    t->set_name(absl::StrCat("layer", i));
    t->set_elements(sizes[i]);
    t->set_ready_gap_us(500.0 * (i + 1));
  }
  return m;
}

proto::ControlMessage PrepareReply(uint64_t version, uint64_t round) {
  proto::ControlMessage m;
  m.mutable_strategy_prepare_reply()->set_version(version);
  m.mutable_strategy_prepare_reply()->set_highest_started_round(round);
  return m;
}

proto::ControlMessage LocalComm(const std::string& kind, size_t id_bytes) {
  proto::ControlMessage m;
  m.mutable_local_communicator()->set_kind(kind);
  m.mutable_local_communicator()->set_id(std::string(id_bytes, 'i'));
  return m;
}

void WriteSchedulerSeeds(SeedWriter& seeds) {
  {  // a flat job from registration to the end
    SchedulerScript s(2, 1, false, false, 0);
    s.From(2, RegisterMessage(proto::ROLE_SERVER, 0, false));
    s.From(0, RegisterMessage(proto::ROLE_WORKER, -1, false));
    s.From(1, RegisterMessage(proto::ROLE_WORKER, 1, false));
    s.From(3, RegisterMessage(proto::ROLE_WORKER, 0, false));  // a stranger, job full
    s.FromWorkers(LinkReport(1)).FromWorkers(Barrier("workers", 1)).From(2, Barrier("all", 1));
    s.FromWorkers(Barrier("all", 1)).FromWorkers(Declare("grad.a", 1000, 0));
    s.From(0, Declare("grad.b", 4096, 1)).From(1, Declare("grad.b", 4095, 1));
    s.FromWorkers(Heartbeat()).Wait(100).FromWorkers(WorkerDone());
    seeds.Write("scheduler_control", "flat-job", s.bytes());
  }
  {  // hierarchical: two machines of two workers, relays and barriers
    SchedulerScript s(4, 2, true, false, 1);
    s.From(0, LocalComm("host", 21)).From(2, LocalComm("host", 21));
    s.From(0, LocalComm("nccl", 128)).From(1, LocalComm("host", 21));
    s.FromWorkers(Barrier("all", 7)).From(4, Barrier("all", 7)).From(5, Barrier("all", 7));
    s.FromWorkers(Declare("w", 1 << 20, 2)).Wait(5000);
    seeds.Write("scheduler_control", "hierarchical", s.bytes());
  }
  {  // --strategy=auto: profiles, the plan, the two-phase switch
    SchedulerScript s(2, 1, false, true, 1);
    s.FromWorkers(LinkReport(1)).FromWorkers(Profile()).FromWorkers(PrepareReply(2, 3));
    seeds.Write("scheduler_control", "auto-strategy", s.bytes());
  }
  {  // SIGHUP reload, a shutdown from a node
    SchedulerScript s(3, 2, false, false, 1);
    s.Event(SchedulerEvent::kReload).FromWorkers(PrepareReply(2, 5));
    proto::ControlMessage shutdown;
    shutdown.mutable_shutdown()->set_reason("training diverged");
    s.From(1, shutdown);
    seeds.Write("scheduler_control", "reload-shutdown", s.bytes());
  }
  {  // a worker goes silent; the last worker never registers
    SchedulerScript s(3, 1, false, false, 2);
    s.From(0, Heartbeat()).Wait(1000).Wait(3000);
    seeds.Write("scheduler_control", "late-and-silent", s.bytes());
  }
}

}  // namespace bytecomp::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_seeds <corpus dir>\n");
    return 2;
  }
  bytecomp::fuzz::SeedWriter seeds(argv[1]);
  bytecomp::fuzz::WriteCodecSeeds(seeds);
  bytecomp::fuzz::WriteAggregatorSeeds(seeds);
  bytecomp::fuzz::WriteServerSeeds(seeds);
  bytecomp::fuzz::WriteSchedulerSeeds(seeds);
  std::printf("wrote %d seeds under %s\n", seeds.written(), argv[1]);
  return 0;
}
