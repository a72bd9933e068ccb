// Writes the seed corpora of the fuzz targets (corpus/<target>/seed-*) from valid encodings:
// payloads encoded by every registered codec, well-formed requests and control messages, the
// repository's config files. Deterministic: the same build writes the same files.
//
//   make_fuzz_seeds <corpus dir> <dictionary dir>    (test/fuzz/README.md: when to run it)
//
// It also writes the dictionaries (<target>.dict): field names and tags from the schemas,
// codec, memory and parameter names from the registries.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/registry.h"
#include "bytecomp/planner/inputs.h"
#include "cluster_config.pb.h"
#include "codec_choice.h"
#include "fuzz_input.h"
#include "google/protobuf/descriptor.h"
#include "planner.pb.h"
#include "scheduler_fuzz_job.h"
#include "sealed_frame_job.h"
#include "seed_support.h"
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

// Default parameters over 1, 100 and 500 elements; and (codecs with parameters) each at its
// first other value over 500 elements: for blocksparse one-element blocks at a tiny threshold,
// so that the workers carry different blocks and the server's union of them interleaves.
void WriteAggregatorSeeds(SeedWriter& seeds) {
  for (const std::string& name : compress::CodecRegistry::Global().Names()) {
    const std::vector<std::vector<uint8_t>> choices = ParamChoices(name);
    for (size_t c = 0; c < choices.size(); ++c) {
      for (size_t n : {size_t{1}, size_t{100}, size_t{500}}) {
        if (c > 0 && n != 500) continue;
        const int workers = n == 1 ? 1 : (n == 100 ? 3 : 2);
        const int rounds = n == 100 ? 2 : 1;
        const compress::CodecContext base{.key = 5, .round = 1, .node = 0, .seed = 9};
        FuzzInputWriter w;
        WriteCodecChoice(w, name, choices[c]);
        WriteContext(w, base);
        w.U16(static_cast<uint16_t>(n)).U8(static_cast<uint8_t>(workers - 1));
        w.U8(static_cast<uint8_t>(rounds - 1));
        const ChosenCodec chosen = Chosen(name, choices[c]);
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
        seeds.Write("aggregator",
                    c == 0 ? absl::StrCat(name, "-n", n) : absl::StrCat(name, "-p", c, "-n", n),
                    w.bytes());
      }
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
    const compress::CodecFacts* facts = compress::CodecFactsOf(name);
    const bool two_round = facts != nullptr && facts->two_round;
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

// A worker's measurements of one adaptive-ratio window (the fuzz job's strategy adapts "*").
proto::ControlMessage Ratio(const std::string& tensor, uint64_t version, uint64_t window,
                            double kept_energy) {
  proto::ControlMessage m;
  proto::RatioReport* r = m.mutable_ratio_report();
  r->set_tensor(tensor);
  r->set_strategy_version(version);
  r->set_window(window);
  r->set_rounds(2);
  r->set_comm_us(4000);
  r->set_round_us(5000);
  r->set_kept_energy(kept_energy);
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
  {  // adaptive ratio: after SIGHUP loads the adapting strategy, windows that raise the ratio
    SchedulerScript s(2, 1, false, false, 1);
    s.Event(SchedulerEvent::kReload).FromWorkers(PrepareReply(2, 1));
    s.FromWorkers(Ratio("grad.a", 2, 1, 0.01)).FromWorkers(PrepareReply(3, 4));
    s.From(0, Ratio("grad.a", 3, 3, 0.9)).From(2, Ratio("grad.a", 3, 3, 0.9));
    seeds.Write("scheduler_control", "adaptive-ratio", s.bytes());
  }
  {  // a restarted scheduler: every node rejoins with what it knows, the job goes on
    SchedulerScript s(2, 1, false, false, 0);
    proto::DeclareReply a;
    a.set_name("grad.a");
    a.set_ok(true);
    a.set_element_count(1000);
    a.set_dtype(0);
    a.set_partition_elements(1 << 20);  // the default 4 MiB partitions of fp32
    a.add_partition_server(0);
    auto rejoin = [&](int sender, proto::Role role, int rank, bool declared, uint64_t prepared) {
      proto::ControlMessage m = RegisterMessage(role, rank, false);
      m.mutable_register_()->set_rejoining(true);
      s.From(sender, m);
      proto::ControlMessage reported;
      proto::Rejoin* r = reported.mutable_rejoin_report();
      if (declared) *r->add_declarations() = a;
      r->mutable_strategy()->set_version(1);
      r->set_prepared_version(prepared);
      r->add_released()->set_group("all");
      r->mutable_released(0)->set_sequence(1);
      s.From(sender, reported);
    };
    rejoin(2, proto::ROLE_SERVER, 0, true, 0);
    rejoin(0, proto::ROLE_WORKER, 0, true, 2);
    rejoin(1, proto::ROLE_WORKER, 1, false, 0);
    s.From(1, Declare("grad.a", 1000, 0)).From(1, Barrier("all", 1));
    s.FromWorkers(Declare("grad.b", 4096, 1)).FromWorkers(WorkerDone());
    seeds.Write("scheduler_control", "restart-takeover", s.bytes());
  }
  {  // a worker goes silent; the last worker never registers
    SchedulerScript s(3, 1, false, false, 2);
    s.From(0, Heartbeat()).Wait(1000).Wait(3000);
    seeds.Write("scheduler_control", "late-and-silent", s.bytes());
  }
}

// A strategy per codec with every parameter at its default, per memory, and one with several
// entries, globs, two-way compression and placements.
void WriteStrategySeeds(SeedWriter& seeds) {
  auto text = [](const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); };
  for (const std::string& name : compress::CodecRegistry::Global().Names()) {
    std::string params;
    for (const compress::CodecParamSpec& p : compress::CodecRegistry::Global().Find(name)->params) {
      absl::StrAppend(&params, " params { key: \"", p.name, "\" value: \"", p.default_value,
                      "\" }");
    }
    seeds.Write("strategy_text", name,
                text(absl::StrCat("version: 1\nseed: 42\ntensors {\n  name_pattern: \"*\"\n",
                                  "  push_codec { name: \"", name, "\"", params, " }\n",
                                  "  force: true\n}\n")));
  }
  for (const std::string& memory : compress::MemoryRegistry::Global().Names()) {
    std::string params;
    for (const compress::CodecParamSpec& p :
         compress::MemoryRegistry::Global().Find(memory)->params) {
      absl::StrAppend(&params, " memory_params { key: \"", p.name, "\" value: \"", p.default_value,
                      "\" }");
    }
    seeds.Write("strategy_text", "memory-" + memory,
                text(absl::StrCat("tensors { name_pattern: \"layer*\" push_codec { name: \"topk\" ",
                                  "memory: \"", memory, "\"", params, " } }\n")));
  }
  seeds.Write("strategy_text", "several-entries", text(R"(version: 3
first_round: 100
min_compress_bytes: 1024
seed: 7
tensors {
  name_pattern: "embedding?.weight"
  push_codec { name: "randomk" params { key: "ratio" value: "0.01" } }
  pull_codec { name: "fp16" }
  compress_on: PLACEMENT_CPU_POOL
  decompress_on: PLACEMENT_INLINE
  partition_bytes: 1048576
  priority_offset: -2
}
tensors {
  name_pattern: "*bias"
  push_codec { name: "none" }
}
tensors {
  name_pattern: "*"
  push_codec { name: "dgc" params { key: "ratio" value: "0.001" } memory: "dgc_momentum" }
  pull_codec { name: "signsgd" }
  compress_on: PLACEMENT_GPU
  hierarchical: true
  force: true
}
)"));
}

std::vector<uint8_t> FileSeed(uint8_t schema, const std::string& relative) {
  std::ifstream in(std::string(BYTECOMP_SOURCE_DIR) + "/" + relative, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "seed: cannot read %s\n", relative.c_str());
    std::exit(1);
  }
  std::vector<uint8_t> bytes = {schema};
  bytes.insert(bytes.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return bytes;
}

// The repository's own config files, each behind its schema byte (config_text_fuzzer.cc).
void WriteConfigSeeds(SeedWriter& seeds) {
  seeds.Write("config_text", "cluster", FileSeed(0, "deploy/examples/cluster.pbtxt"));
  for (const char* c : {"4x1gpu-1g", "4x8gpu-25g", "8x1gpu-10g"}) {
    seeds.Write("config_text", absl::StrCat("description-", c),
                FileSeed(1, absl::StrCat("scheduler/planner/clusters/", c, ".pbtxt")));
  }
  seeds.Write("config_text", "costs-nominal", FileSeed(2, "scheduler/planner/costs/nominal.pbtxt"));
  seeds.Write("config_text", "profile-resnet50",
              FileSeed(3, "scheduler/planner/profiles/resnet50.pbtxt"));
  const std::string options =
      "\x04codecs: \"topk\"\ncodecs: \"fp16\"\nmin_compress_bytes: 4096\n"
      "partition_bytes: 1048576\ndisable_gpu: true\n"
      "max_joint_offload_choices: 8\nmin_relative_gain: 0.01\n";
  seeds.Write("config_text", "options", std::vector<uint8_t>(options.begin(), options.end()));
}

// --- Dictionaries: words the targets' inputs are made of, from the schemas and registries,
// so that a new field or codec is in them after the next run of this generator.

void AddFieldNames(const google::protobuf::Descriptor* d, std::set<std::string>& words,
                   std::set<const google::protobuf::Descriptor*>& seen) {
  if (!seen.insert(d).second) return;
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    words.insert(f->name() + ":");
    if (f->enum_type() != nullptr) {
      for (int v = 0; v < f->enum_type()->value_count(); ++v)
        words.insert(f->enum_type()->value(v)->name());
    }
    if (f->message_type() != nullptr) AddFieldNames(f->message_type(), words, seen);
  }
}

std::set<std::string> FieldNames(std::initializer_list<const google::protobuf::Descriptor*> roots) {
  std::set<std::string> words;
  std::set<const google::protobuf::Descriptor*> seen;
  for (const google::protobuf::Descriptor* d : roots) AddFieldNames(d, words, seen);
  return words;
}

// Codec and memory names and their parameter names, quoted as in a strategy file or not.
std::set<std::string> CodecWords(bool quoted) {
  std::set<std::string> words;
  auto add = [&](const std::string& w) { words.insert(quoted ? "\"" + w + "\"" : w); };
  for (const std::string& name : compress::CodecRegistry::Global().Names()) {
    add(name);
    for (const compress::CodecParamSpec& p : compress::CodecRegistry::Global().Find(name)->params) {
      add(p.name);
      for (const std::string& c : p.choices) add(c);
    }
  }
  for (const std::string& name : compress::MemoryRegistry::Global().Names()) {
    add(name);
    for (const compress::CodecParamSpec& p : compress::MemoryRegistry::Global().Find(name)->params)
      add(p.name);
  }
  return words;
}

// The tag bytes of every field of the messages, as binary protobuf starts a field.
std::set<std::string> FieldTags(std::initializer_list<const google::protobuf::Descriptor*> roots) {
  std::set<std::string> words;
  std::set<const google::protobuf::Descriptor*> seen;
  std::vector<const google::protobuf::Descriptor*> todo(roots);
  while (!todo.empty()) {
    const google::protobuf::Descriptor* d = todo.back();
    todo.pop_back();
    if (!seen.insert(d).second) continue;
    for (int i = 0; i < d->field_count(); ++i) {
      const google::protobuf::FieldDescriptor* f = d->field(i);
      using FD = google::protobuf::FieldDescriptor;
      const bool length_delimited = f->type() == FD::TYPE_STRING || f->type() == FD::TYPE_BYTES ||
                                    f->type() == FD::TYPE_MESSAGE || f->is_packed();
      const bool fixed64 = f->type() == FD::TYPE_DOUBLE;
      const uint32_t tag = (static_cast<uint32_t>(f->number()) << 3) | (length_delimited ? 2
                                                                        : fixed64        ? 1
                                                                                         : 0);
      std::string bytes;
      for (uint32_t v = tag;; v >>= 7) {
        bytes.push_back(static_cast<char>((v & 0x7f) | (v >= 0x80 ? 0x80 : 0)));
        if (v < 0x80) break;
      }
      words.insert(bytes);
      if (f->message_type() != nullptr) todo.push_back(f->message_type());
    }
  }
  return words;
}

void WriteDict(const std::filesystem::path& path, const std::set<std::string>& words) {
  std::ofstream out(path);
  out << "# Written by make_fuzz_seeds (test/fuzz/README.md); do not edit.\n";
  int i = 0;
  for (const std::string& w : words) {
    std::string escaped;
    for (unsigned char c : w) {
      if (c == '"' || c == '\\') {
        escaped += '\\';
        escaped += static_cast<char>(c);
      } else if (c >= 0x20 && c < 0x7f) {
        escaped += static_cast<char>(c);
      } else {
        absl::StrAppend(&escaped, "\\x", absl::Hex(c, absl::kZeroPad2));
      }
    }
    out << "w" << i++ << "=\"" << escaped << "\"\n";
  }
}

void WriteDictionaries(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  std::set<std::string> strategy = FieldNames({proto::Strategy::descriptor()});
  for (const std::string& w : CodecWords(true)) strategy.insert(w);
  WriteDict(dir / "strategy_text.dict", strategy);
  WriteDict(dir / "config_text.dict",
            FieldNames({proto::ClusterConfig::descriptor(), proto::ClusterDescription::descriptor(),
                        proto::CostTable::descriptor(), proto::ModelProfile::descriptor(),
                        proto::PlannerOptions::descriptor()}));
  WriteDict(dir / "codec.dict", CodecWords(false));
  WriteDict(dir / "aggregator.dict", CodecWords(false));
  std::set<std::string> control = FieldTags({proto::ControlMessage::descriptor()});
  for (const char* w : {"workers", "servers", "all", "host", "nccl", "tcp://127.0.0.1:7000"}) {
    control.insert(w);
  }
  WriteDict(dir / "scheduler_control.dict", control);
  std::set<std::string> server =
      FieldTags({proto::DataHeader::descriptor(), proto::DeclareReply::descriptor(),
                 proto::Strategy::descriptor()});
  for (const std::string& w : CodecWords(false)) server.insert(w);
  WriteDict(dir / "server_request.dict", server);
}

// Frames sealed under the target's keys, each mode, empty to multi-block payloads.
void WriteSealedFrameSeeds(SeedWriter& seeds) {
  for (const uint8_t mode : {0, 1}) {
    const DataProtection protection = SealedFrameProtection(mode);
    for (const uint32_t key_id : {1u, 2u}) {
      SealKey key(protection, SealedFrameKey(key_id), SealedFrameSender(key_id));
      std::unique_ptr<FrameSealer> sealer = *FrameSealer::Create(&key);
      for (const size_t n : {size_t{0}, size_t{1}, size_t{100}, size_t{4096}}) {
        const std::vector<float> values = SeedValues(n / 4 + 1, n);
        const std::vector<uint8_t> payload(reinterpret_cast<const uint8_t*>(values.data()),
                                           reinterpret_cast<const uint8_t*>(values.data()) + n);
        std::vector<uint8_t> frame(n + kSealOverheadBytes);
        if (!sealer->Seal(payload, "conn", absl::MakeSpan(frame)).ok()) {
          std::fprintf(stderr, "sealing a seed failed\n");
          std::exit(1);
        }
        FuzzInputWriter w;
        w.U8(mode).String("conn").U8(static_cast<uint8_t>(n)).Rest(frame);
        seeds.Write("sealed_frame",
                    absl::StrCat(DataProtectionName(protection), "-key", key_id, "-n", n),
                    w.bytes());
      }
    }
  }
}

}  // namespace bytecomp::fuzz

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_fuzz_seeds <corpus dir> <dictionary dir>\n");
    return 2;
  }
  bytecomp::fuzz::SeedWriter seeds(argv[1]);
  bytecomp::fuzz::WriteCodecSeeds(seeds);
  bytecomp::fuzz::WriteAggregatorSeeds(seeds);
  bytecomp::fuzz::WriteServerSeeds(seeds);
  bytecomp::fuzz::WriteSchedulerSeeds(seeds);
  bytecomp::fuzz::WriteStrategySeeds(seeds);
  bytecomp::fuzz::WriteConfigSeeds(seeds);
  bytecomp::fuzz::WriteSealedFrameSeeds(seeds);
  bytecomp::fuzz::WriteDictionaries(argv[2]);
  std::printf("wrote %d seeds under %s\n", seeds.written(), argv[1]);
  return 0;
}
