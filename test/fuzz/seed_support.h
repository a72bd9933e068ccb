// What the seed generator (make_fuzz_seeds.cc) and the targets that build valid inputs share.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "bytecomp/compress.h"
#include "codec_choice.h"

namespace bytecomp::fuzz {

class SeedWriter {
 public:
  explicit SeedWriter(std::filesystem::path root) : root_(std::move(root)) {}
  // Writes <root>/<target>/seed-<name>.
  void Write(const std::string& target, const std::string& name, const std::vector<uint8_t>& bytes);
  int written() const { return written_; }

 private:
  std::filesystem::path root_;
  int written_ = 0;
};

// n gradient-like values, the same for the same (n, salt).
std::vector<float> SeedValues(size_t n, uint64_t salt);
// `values` encoded by `codec`; exits on failure (the seed set would be incomplete).
std::vector<uint8_t> EncodeSeed(compress::Codec& codec, const std::vector<float>& values,
                                const compress::CodecContext& ctx);
// The codec as ReadCodecChoice reads it from WriteCodecChoice(name, choices).
ChosenCodec Chosen(const std::string& codec, const std::vector<uint8_t>& choices);

}  // namespace bytecomp::fuzz
