// The one text-proto loader: syntax errors and problems found after parsing both read
// "file:line:column: ...", and the position of any field, nested or repeated, can be asked.
#include "bytecomp/common/text_proto.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "cluster_config.pb.h"
#include "strategy.pb.h"

namespace bytecomp {
namespace {

// protobuf places an unknown field just after its name.
TEST(TextProtoTest, SyntaxErrorsNameFileLineAndColumn) {
  proto::Strategy s;
  absl::Status st =
      ParseTextProto("tensors {\n  name_pattern: \"w\"\n  codek: 1\n}\n", "strategy.pbtxt", &s);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(absl::StartsWith(st.message(), "strategy.pbtxt:3:8: ")) << st.message();
  EXPECT_TRUE(absl::StrContains(st.message(), "codek")) << st.message();
}

TEST(TextProtoTest, PositionsOfNestedAndRepeatedFields) {
  proto::Strategy s;
  TextProtoTree tree;
  ASSERT_TRUE(
      ParseTextProto("tensors { name_pattern: \"a\" }\n"
                     "tensors {\n  name_pattern: \"b\"\n  push_codec { name: \"topk\" }\n}\n",
                     "s.pbtxt", &s, &tree)
          .ok());
  const TextPosition second = PositionOf(&tree, s, "tensors", 1);
  EXPECT_EQ(second.line, 1);
  EXPECT_EQ(second.column, 0);
  const TextProtoTree* entry = NestedTree(&tree, s, "tensors", 1);
  ASSERT_NE(entry, nullptr);
  const TextProtoTree* codec = NestedTree(entry, s.tensors(1), "push_codec", -1);
  ASSERT_NE(codec, nullptr);
  const TextPosition name = PositionOf(codec, s.tensors(1).push_codec(), "name", -1);
  EXPECT_EQ(Located("s.pbtxt", name), "s.pbtxt:4:16: ");
  // An absent field falls back to the given place; a wrong-arity question gives no place.
  EXPECT_EQ(PositionOf(entry, s.tensors(1), "pull_codec", -1, second).line, 1);
  EXPECT_EQ(PositionOf(&tree, s, "tensors", -1).line, -1);
  EXPECT_EQ(Located("s.pbtxt", TextPosition{}), "s.pbtxt: ");
}

TEST(TextProtoTest, ProblemsAreReportedTogetherEachWithItsPlace) {
  TextProtoProblems problems("c.pbtxt");
  EXPECT_TRUE(problems.empty());
  EXPECT_TRUE(problems.ToStatus().ok());
  problems.Add(TextPosition{2, 4}, "num_workers", "must be > 0");
  problems.Add(TextPosition{}, "tensors[1].name_pattern", "empty");
  const absl::Status st = problems.ToStatus();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "c.pbtxt:3:5: num_workers: must be > 0\nc.pbtxt:1:1: tensors[1].name_pattern: empty");
}

TEST(TextProtoTest, FilesThatCannotBeReadSayWhatTheyWere) {
  EXPECT_EQ(ReadTextFile("/nonexistent/c.pbtxt", "config file").status().message(),
            "cannot open config file '/nonexistent/c.pbtxt'");
  const std::string path = ::testing::TempDir() + "/text_proto_test.pbtxt";
  std::ofstream(path) << "num_workers: 3\n";
  proto::ClusterConfig c;
  ASSERT_TRUE(ParseTextProtoFile(path, &c).ok());
  EXPECT_EQ(c.num_workers(), 3);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace bytecomp
