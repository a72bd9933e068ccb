#include "seed_support.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "bytecomp/compress/codec_util.h"

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
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", (dir / name).c_str());
    std::exit(1);
  }
  ++written_;
}

}  // namespace bytecomp::fuzz
