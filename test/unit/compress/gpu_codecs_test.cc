// Which codecs and memories have GPU kernels (gpu_codecs.h): what the worker places on a
// device, with or without CUDA in the build.
#include "bytecomp/compress/gpu_codecs.h"

#include "bytecomp/compress/registry.h"
#include "gtest/gtest.h"

namespace bytecomp::compress {
namespace {

TEST(GpuCodecsTest, EveryGpuCodecIsACpuCodec) {
  const std::vector<std::string> names = GpuCodecNames();
  EXPECT_EQ(names.size(), 21u);  // every codec but "none"
  for (const std::string& name : names) {
    EXPECT_TRUE(HasGpuCodec(name));
    EXPECT_NE(CodecRegistry::Global().Find(name), nullptr) << name;
  }
  EXPECT_TRUE(HasGpuCodec("powersgd"));
  EXPECT_TRUE(HasGpuCodec("artopk"));
  EXPECT_FALSE(HasGpuCodec("none"));
}

TEST(GpuCodecsTest, FusableMemories) {
  for (const std::string& name : GpuCodecNames()) {
    EXPECT_TRUE(GpuMemorySupported(name, "none")) << name;
    EXPECT_TRUE(GpuMemorySupported(name, "")) << name;
    EXPECT_EQ(GpuMemorySupported(name, "residual"),
              name != "signum" && name != "dgc" && name != "powersgd")
        << name;
    EXPECT_EQ(GpuMemorySupported(name, "efsignsgd"), name == "efsignsgd") << name;
    EXPECT_EQ(GpuMemorySupported(name, "dgc_momentum"), name == "dgc") << name;
    EXPECT_EQ(GpuMemorySupported(name, "powersgd"), name == "powersgd") << name;
  }
  EXPECT_TRUE(GpuMemorySupported("powersgd", "none"));
  EXPECT_TRUE(GpuMemorySupported("artopk", "none"));
  EXPECT_FALSE(GpuMemorySupported("topk", "nosuchmemory"));
  // The memories in the memory registry's order, the codecs in the codec registry's.
  EXPECT_EQ(
      GpuMemoriesText(),
      "residual: fp16, bf16, topk, randomk, threshold, adaq, blocksparse, artopk, qsgd, terngrad, "
      "natural, u8bit, dithering, sketch, inceptionn, signsgd, efsignsgd, onebit; "
      "dgc_momentum: dgc; efsignsgd: efsignsgd; powersgd: powersgd");
}

}  // namespace
}  // namespace bytecomp::compress
