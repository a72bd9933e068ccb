#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "bytecomp/compress.h"

namespace bytecomp::compress {
namespace {

// After a save and a load into a fresh memory, both memories compensate alike.
TEST(MemoryStateTest, SaveLoadRoundTripsEveryStatefulMemory) {
  for (const char* name : {"residual", "dgc_momentum", "efsignsgd", "powersgd"}) {
    auto a = CreateMemory(name);
    ASSERT_TRUE(a.ok()) << name << a.status();
    const size_t n = 1000;
    std::vector<float> x(n), comp(n), dec(n, 0.0f);
    for (size_t i = 0; i < n; ++i) x[i] = std::sin(static_cast<float>(i));
    CodecContext ctx;
    ctx.learning_rate = 0.1f;
    ASSERT_TRUE((*a)->Compensate(x, ctx, absl::MakeSpan(comp)).ok()) << name;
    for (size_t i = 0; i < n; i += 3) dec[i] = comp[i];  // "sent" a third of it
    ASSERT_TRUE((*a)->Update(comp, dec, ctx).ok()) << name;
    const std::string saved = SaveMemoryState(**a);
    auto b = CreateMemory(name);
    ASSERT_TRUE(LoadMemoryState(**b, saved).ok()) << name;
    std::vector<float> ca(n), cb(n);
    ASSERT_TRUE((*a)->Compensate(x, ctx, absl::MakeSpan(ca)).ok());
    ASSERT_TRUE((*b)->Compensate(x, ctx, absl::MakeSpan(cb)).ok());
    EXPECT_EQ(ca, cb) << name;
    EXPECT_EQ(SaveMemoryState(**b), saved) << name;
  }
}

TEST(MemoryStateTest, MalformedStateIsAClearErrorAndChangesNothing) {
  auto m = CreateMemory("residual");
  ASSERT_TRUE(m.ok());
  const std::string empty = SaveMemoryState(**m);
  EXPECT_FALSE(LoadMemoryState(**m, "").ok());
  EXPECT_FALSE(LoadMemoryState(**m, empty + "x").ok());  // trailing bytes
  std::string wrong_count = empty;
  wrong_count[0] = 2;
  absl::Status s = LoadMemoryState(**m, wrong_count);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("residual"), std::string::npos) << s;
  std::string nan_state = empty;
  uint64_t one = 1;
  nan_state.replace(4, 8, std::string(reinterpret_cast<const char*>(&one), 8));
  const float nan = std::nanf("");
  nan_state.append(reinterpret_cast<const char*>(&nan), 4);
  EXPECT_FALSE(LoadMemoryState(**m, nan_state).ok());
  EXPECT_EQ(SaveMemoryState(**m), empty);
}

}  // namespace
}  // namespace bytecomp::compress
