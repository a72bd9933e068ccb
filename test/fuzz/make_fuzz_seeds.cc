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
  std::printf("wrote %d seeds under %s\n", seeds.written(), argv[1]);
  return 0;
}
