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
#include "seed_writers.h"

namespace bytecomp::fuzz {

std::vector<float> SeedValues(size_t n, uint64_t salt) {
  compress::Rng rng(salt * 7919 + n);
  std::vector<float> v(n);
  for (float& x : v) {
    // Roughly normal, some exact zeros, a few large: what gradients look like.
    const double u = rng.UniformDouble() + rng.UniformDouble() + rng.UniformDouble() - 1.5;
    x = rng.Below(10) == 0 ? 0.0f : static_cast<float>(u * (rng.Below(50) == 0 ? 100.0 : 1.0));
  }
  return v;
}

std::vector<uint8_t> EncodeSeed(compress::Codec& codec, const std::vector<float>& values,
                                const compress::CodecContext& ctx) {
  std::vector<uint8_t> out(codec.MaxEncodedBytes(values.size()));
  absl::StatusOr<size_t> bytes = codec.Encode(values, ctx, absl::MakeSpan(out));
  if (!bytes.ok()) {
    std::fprintf(stderr, "seed: codec '%s' could not encode %zu values: %s\n",
                 std::string(codec.name()).c_str(), values.size(),
                 bytes.status().ToString().c_str());
    std::exit(1);
  }
  out.resize(*bytes);
  return out;
}

std::vector<std::vector<uint8_t>> ParamChoices(const std::string& codec) {
  std::vector<std::vector<uint8_t>> choices = {{}};
  const compress::CodecSpec* spec = compress::CodecRegistry::Global().Find(codec);
  if (spec != nullptr && !spec->params.empty()) {
    choices.push_back(std::vector<uint8_t>(spec->params.size(), 1));
  }
  return choices;
}

ChosenCodec Chosen(const std::string& codec, const std::vector<uint8_t>& choices) {
  FuzzInputWriter w;
  WriteCodecChoice(w, codec, choices);
  FuzzInput in(w.bytes().data(), w.bytes().size());
  return ReadCodecChoice(in);
}

void SeedWriter::Write(const std::string& target, const std::string& name,
                       const std::vector<uint8_t>& bytes) {
  const std::filesystem::path dir = root_ / target;
  std::filesystem::create_directories(dir);
  std::ofstream out(dir / ("seed-" + name), std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", (dir / name).c_str());
    std::exit(1);
  }
  ++written_;
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

}  // namespace bytecomp::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_seeds <corpus dir>\n");
    return 2;
  }
  bytecomp::fuzz::SeedWriter seeds(argv[1]);
  bytecomp::fuzz::WriteCodecSeeds(seeds);
  bytecomp::fuzz::WriteAggregatorSeeds(seeds);
  std::printf("wrote %d seeds under %s\n", seeds.written(), argv[1]);
  return 0;
}
