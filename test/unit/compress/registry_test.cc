#include "bytecomp/compress/registry.h"

#include "absl/strings/match.h"
#include "bytecomp/compress/params.h"
#include "gtest/gtest.h"

namespace bytecomp::compress {
namespace {

TEST(RegistryTest, UnknownNameListsEveryValidName) {
  auto codec = CreateCodec("tpok");
  ASSERT_FALSE(codec.ok());
  EXPECT_EQ(codec.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(codec.status().message());
  EXPECT_TRUE(absl::StrContains(message, "unknown codec 'tpok'")) << message;
  for (const auto& name : CodecRegistry::Global().Names()) {
    EXPECT_TRUE(absl::StrContains(message, name)) << message << " lacks " << name;
  }
}

TEST(RegistryTest, BasicCodecsAreRegistered) {
  for (const char* name : {"none", "fp16", "bf16"}) {
    auto codec = CreateCodec(name);
    ASSERT_TRUE(codec.ok()) << name << ": " << codec.status();
    EXPECT_EQ((*codec)->name(), name);
  }
}

TEST(RegistryTest, UnknownParameterListsValidOnes) {
  auto codec = CreateCodec("fp16", {{"ratio", "0.1"}});
  ASSERT_FALSE(codec.ok());
  EXPECT_TRUE(absl::StrContains(codec.status().message(), "unknown parameter 'ratio'"))
      << codec.status();
  EXPECT_TRUE(absl::StrContains(codec.status().message(), "no parameters")) << codec.status();
}

std::vector<CodecParamSpec> TestSpecs() {
  return {
      {.name = "ratio",
       .type = CodecParamSpec::Type::kDouble,
       .default_value = "0.3",
       .help = "fraction kept",
       .min_value = 0,
       .max_value = 1,
       .min_exclusive = true},
      {.name = "levels",
       .type = CodecParamSpec::Type::kInt,
       .default_value = "4",
       .help = "",
       .min_value = 1},
      {.name = "scale", .type = CodecParamSpec::Type::kBool, .default_value = "false", .help = ""},
      {.name = "mode",
       .type = CodecParamSpec::Type::kString,
       .default_value = "linear",
       .help = "",
       .choices = {"linear", "natural"}},
  };
}

TEST(ParamsTest, DefaultsAreFilledAndValuesRead) {
  auto filled = ValidateParams("codec 'x'", TestSpecs(), {{"levels", "9"}});
  ASSERT_TRUE(filled.ok()) << filled.status();
  ParamReader r(*filled);
  EXPECT_DOUBLE_EQ(r.Double("ratio"), 0.3);
  EXPECT_EQ(r.Int("levels"), 9);
  EXPECT_FALSE(r.Bool("scale"));
  EXPECT_EQ(r.String("mode"), "linear");
  EXPECT_TRUE(r.ok()) << r.status();
  r.Double("undeclared");
  EXPECT_FALSE(r.ok());
}

TEST(ParamsTest, WrongTypeAndOutOfRangeNameTheParameterAndListAll) {
  struct Case {
    CodecParams given;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{{"ratio", "abc"}}, "parameter 'ratio' = 'abc' is not a finite number"},
      {{{"ratio", "nan"}}, "is not a finite number"},
      {{{"ratio", "0"}}, "out of range (must be in (0, 1])"},
      {{{"ratio", "1.5"}}, "out of range"},
      {{{"levels", "2.5"}}, "'levels' = '2.5' is not an integer"},
      {{{"levels", "0"}}, "must be at least 1"},
      {{{"scale", "maybe"}}, "is not a bool"},
      {{{"mode", "cubic"}}, "is not one of linear|natural"},
      {{{"bogus", "1"}}, "unknown parameter 'bogus'"},
  };
  for (const auto& c : cases) {
    auto filled = ValidateParams("codec 'x'", TestSpecs(), c.given);
    ASSERT_FALSE(filled.ok()) << c.expect;
    const std::string message(filled.status().message());
    EXPECT_TRUE(absl::StrContains(message, c.expect)) << message;
    // Every valid parameter is listed with its type and default.
    EXPECT_TRUE(absl::StrContains(message, "ratio (double, default 0.3, in (0, 1])")) << message;
    EXPECT_TRUE(absl::StrContains(message, "levels (int, default 4, at least 1)")) << message;
    EXPECT_TRUE(absl::StrContains(message, "mode (string, default linear, one of linear|natural)"))
        << message;
  }
}

TEST(RegistryTest, RegisterRejectsDuplicatesAndBadDefaults) {
  CodecRegistry registry;
  auto factory = [](const CodecParams&) -> absl::StatusOr<std::unique_ptr<Codec>> {
    return CreateCodec("none");
  };
  ASSERT_TRUE(
      registry.Register({.name = "a", .summary = "", .params = {}, .factory = factory}).ok());
  EXPECT_EQ(
      registry.Register({.name = "a", .summary = "", .params = {}, .factory = factory}).code(),
      absl::StatusCode::kAlreadyExists);
  auto specs = TestSpecs();
  specs[0].default_value = "2";  // outside its own range
  EXPECT_FALSE(
      registry.Register({.name = "b", .summary = "", .params = specs, .factory = factory}).ok());
  EXPECT_EQ(registry.Names(), std::vector<std::string>{"a"});
  EXPECT_EQ(registry.Find("b"), nullptr);
}

}  // namespace
}  // namespace bytecomp::compress
