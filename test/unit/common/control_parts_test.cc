// Control messages in parts (control_parts.h): a large report goes in parts and comes back
// whole; parts out of order, of another message, of the wrong size or beyond the bound are
// refused naming what is wrong, and the assembly then holds nothing.
#include "bytecomp/common/control_parts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/socket_limits.h"
#include "google/protobuf/util/message_differencer.h"

namespace bytecomp {
namespace {

using ::testing::HasSubstr;

// A profile report naming `tensors` tensors of 200-byte names.
proto::ControlMessage ProfileOf(int tensors) {
  proto::ControlMessage m;
  proto::ModelProfile* profile = m.mutable_profile_report()->mutable_profile();
  profile->set_model("test");
  for (int t = 0; t < tensors; ++t) {
    proto::TensorProfile* p = profile->add_tensors();
    p->set_name(absl::StrCat(std::string(192, 'n'), t));
  }
  return m;
}

// `bytes` cut into parts as a node cuts a message; what the last part's Add returned.
absl::StatusOr<std::optional<proto::ControlMessage>> AddInParts(ControlAssembly& assembly,
                                                                const std::string& bytes) {
  const int64_t total = static_cast<int64_t>(bytes.size());
  const int64_t count = (total + kControlPartBytes - 1) / kControlPartBytes;
  absl::StatusOr<std::optional<proto::ControlMessage>> got;
  for (int64_t i = 0; i < count; ++i) {
    proto::ControlPart part;
    part.set_message_id(9);
    part.set_index(static_cast<uint32_t>(i));
    part.set_count(static_cast<uint32_t>(count));
    part.set_total_bytes(total);
    part.set_data(bytes.substr(i * kControlPartBytes, kControlPartBytes));
    got = assembly.Add(part);
  }
  return got;
}

TEST(ControlPartsTest, ASmallMessageGoesWholeALargeOneInPartsUnderTheFrameLimit) {
  const proto::ControlMessage small = ProfileOf(10);
  std::vector<proto::ControlMessage> one = SplitControlMessage(small, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_TRUE(one[0].has_profile_report());

  const proto::ControlMessage large = ProfileOf(10000);  // about 2 MB
  std::vector<proto::ControlMessage> parts = SplitControlMessage(large, 7);
  ASSERT_GE(parts.size(), 7u);
  ControlAssembly assembly(int64_t{64} << 20);
  for (size_t i = 0; i < parts.size(); ++i) {
    proto::ControlMessage framed = parts[i];
    framed.set_token(std::string(16, 't'));
    EXPECT_LT(framed.ByteSizeLong(), static_cast<size_t>(kMaxControlFrameBytes) / 2);
    absl::StatusOr<std::optional<proto::ControlMessage>> got = assembly.Add(parts[i].part());
    ASSERT_TRUE(got.ok()) << got.status();
    if (i + 1 < parts.size()) {
      EXPECT_FALSE(got->has_value());
      EXPECT_GT(assembly.held_bytes(), 0);
    } else {
      ASSERT_TRUE(got->has_value());
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(**got, large));
    }
  }
  EXPECT_EQ(assembly.held_bytes(), 0);
}

TEST(ControlPartsTest, PartsThatDoNotFitAreRefusedAndDropTheMessage) {
  const std::vector<proto::ControlMessage> parts = SplitControlMessage(ProfileOf(3000), 3);
  ASSERT_GE(parts.size(), 3u);
  auto error = [](const absl::StatusOr<std::optional<proto::ControlMessage>>& got) {
    return got.ok() ? std::string("accepted") : std::string(got.status().message());
  };
  {  // a part without its part 0
    ControlAssembly assembly(int64_t{64} << 20);
    EXPECT_THAT(error(assembly.Add(parts[1].part())), HasSubstr("without its part 0"));
  }
  {  // a part skipped, then one of another message
    ControlAssembly assembly(int64_t{64} << 20);
    ASSERT_TRUE(assembly.Add(parts[0].part()).ok());
    EXPECT_THAT(error(assembly.Add(parts[2].part())), HasSubstr("does not follow part 0"));
    EXPECT_EQ(assembly.held_bytes(), 0);
    ASSERT_TRUE(assembly.Add(parts[0].part()).ok());
    proto::ControlPart other = parts[1].part();
    other.set_message_id(4);
    EXPECT_THAT(error(assembly.Add(other)), HasSubstr("of message 4"));
  }
  {  // a message above the bound, announced by its part 0: refused before anything is held
    ControlAssembly assembly(int64_t{100} << 10);
    EXPECT_THAT(error(assembly.Add(parts[0].part())), HasSubstr("at most 102400 are taken"));
    EXPECT_EQ(assembly.held_bytes(), 0);
  }
  {  // sizes that do not add up
    ControlAssembly assembly(int64_t{64} << 20);
    proto::ControlPart lying = parts[0].part();
    lying.set_count(1000);
    EXPECT_THAT(error(assembly.Add(lying)), HasSubstr("does not come in 1000 parts"));
    proto::ControlPart short_part = parts[0].part();
    short_part.mutable_data()->resize(10);
    EXPECT_THAT(error(assembly.Add(short_part)), HasSubstr("holds 10 bytes"));
    proto::ControlPart single = parts[0].part();
    single.set_count(1);
    EXPECT_THAT(error(assembly.Add(single)), HasSubstr("at least 2"));
  }
  {  // parts whose bytes are not a ControlMessage, or hold a Register
    proto::ControlMessage reg;
    reg.mutable_register_()->set_hostname(std::string(300 << 10, 'h'));
    ControlAssembly assembly(int64_t{64} << 20);
    EXPECT_THAT(error(AddInParts(assembly, reg.SerializeAsString())),
                HasSubstr("holds a Register"));
    EXPECT_THAT(error(AddInParts(assembly, std::string(300 << 10, '\xff'))),
                HasSubstr("is not a ControlMessage"));
    EXPECT_EQ(assembly.held_bytes(), 0);
  }
}

}  // namespace
}  // namespace bytecomp
