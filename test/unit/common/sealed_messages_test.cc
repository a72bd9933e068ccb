// Whole data messages sealed (sealed_messages.h): they open to what was sent, and a frame moved,
// dropped, reordered, repeated or sealed under another key makes the message refused.
#include "bytecomp/common/sealed_messages.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace bytecomp {
namespace {

using ::testing::HasSubstr;

std::vector<zmq::message_t> Message(const std::vector<std::string>& parts) {
  std::vector<zmq::message_t> frames;
  for (const std::string& p : parts) frames.emplace_back(p.data(), p.size());
  return frames;
}

std::vector<std::string> Texts(const std::vector<zmq::message_t>& frames) {
  std::vector<std::string> out;
  for (const zmq::message_t& f : frames) out.push_back(f.to_string());
  return out;
}

zmq::message_t CopyOf(const zmq::message_t& frame) {
  return zmq::message_t(frame.data(), frame.size());
}

std::vector<zmq::message_t> Copy(const std::vector<zmq::message_t>& frames) {
  std::vector<zmq::message_t> out;
  for (const zmq::message_t& f : frames) out.emplace_back(f.data(), f.size());
  return out;
}

// One worker (key id 2) sealing to one server that holds its key.
struct Link {
  explicit Link(DataProtection protection = DataProtection::kEncrypt, uint32_t id = 2)
      : key(*NewDataKey(id)), seal_key(protection, key, id), opener(protection) {
    absl::StatusOr<std::unique_ptr<MessageSealer>> s = MessageSealer::Create(&seal_key);
    EXPECT_TRUE(s.ok()) << s.status();
    sealer = *std::move(s);
    EXPECT_TRUE(opener.keys().AddKey(key, id).ok());
  }
  std::vector<zmq::message_t> Sealed(const std::vector<std::string>& parts, size_t skip = 0) {
    std::vector<zmq::message_t> frames = Message(parts);
    EXPECT_TRUE(sealer->Seal(frames, skip).ok());
    return frames;
  }
  DataKey key;
  SealKey seal_key;
  std::unique_ptr<MessageSealer> sealer;
  MessageOpener opener;
};

TEST(SealedMessagesTest, MessagesOpenToWhatWasSentAndTheRoutingIdStaysAsItIs) {
  for (DataProtection protection : {DataProtection::kEncrypt, DataProtection::kAuthenticate}) {
    Link link(protection);
    const std::vector<std::string> parts = {"identity", "header bytes", std::string(100000, 'x')};
    std::vector<zmq::message_t> frames = link.Sealed(parts, /*skip=*/1);
    ASSERT_EQ(frames.size(), 3u);
    EXPECT_EQ(frames[0].to_string(), "identity");
    EXPECT_EQ(frames[1].size(), parts[1].size() + kSealOverheadBytes);
    EXPECT_EQ(frames[2].size(), parts[2].size() + kSealOverheadBytes);
    const bool hidden = frames[2].to_string().find(std::string(64, 'x')) == std::string::npos;
    EXPECT_EQ(hidden, protection == DataProtection::kEncrypt);
    absl::StatusOr<uint32_t> key = link.opener.Open(frames, 1);
    ASSERT_TRUE(key.ok()) << key.status();
    EXPECT_EQ(*key, 2u);
    EXPECT_EQ(Texts(frames), parts);
  }
}

TEST(SealedMessagesTest, AnUnsealedMessageIsRefusedNamingWhy) {
  Link link;
  std::vector<zmq::message_t> plain = Message({"id", "a DataHeader", "payload"});
  absl::StatusOr<uint32_t> opened = link.opener.Open(plain, 1);
  ASSERT_FALSE(opened.ok());
  EXPECT_THAT(std::string(opened.status().message()), HasSubstr("not a sealed message"));
  std::vector<zmq::message_t> empty = Message({"id"});
  EXPECT_FALSE(link.opener.Open(empty, 1).ok());
  std::vector<zmq::message_t> long_plain =
      Message({"id", std::string(200, 'h'), std::string(5000, 'p')});
  opened = link.opener.Open(long_plain, 1);
  ASSERT_FALSE(opened.ok());
  EXPECT_THAT(std::string(opened.status().message()),
              HasSubstr("not a sealed message: its first frame does not begin as a sealed"));
}

TEST(SealedMessagesTest, FramesCannotBeMovedDroppedReorderedOrRepeated) {
  Link link;
  const std::vector<zmq::message_t> a = link.Sealed({"header A", "payload A"});
  const std::vector<zmq::message_t> b = link.Sealed({"header B", "payload B"});
  {  // B's payload under A's header
    std::vector<zmq::message_t> spliced;
    spliced.push_back(CopyOf(a[0]));
    spliced.push_back(CopyOf(b[1]));
    EXPECT_FALSE(link.opener.Open(spliced).ok());
  }
  {  // A without its payload
    std::vector<zmq::message_t> cut_here;
    cut_here.push_back(CopyOf(a[0]));
    EXPECT_FALSE(link.opener.Open(cut_here).ok());
  }
  {  // B's frames swapped
    std::vector<zmq::message_t> swapped;
    swapped.push_back(CopyOf(b[1]));
    swapped.push_back(CopyOf(b[0]));
    EXPECT_FALSE(link.opener.Open(swapped).ok());
  }
  // A message left alone opens once, then never again.
  std::vector<zmq::message_t> again = link.Sealed({"header C", "payload C"});
  std::vector<zmq::message_t> replay = Copy(again);
  ASSERT_TRUE(link.opener.Open(again).ok());
  EXPECT_EQ(Texts(again), (std::vector<std::string>{"header C", "payload C"}));
  absl::StatusOr<uint32_t> replayed = link.opener.Open(replay);
  ASSERT_FALSE(replayed.ok());
  EXPECT_THAT(std::string(replayed.status().message()), HasSubstr("opened before"));
}

// A server opens a request's header on its I/O thread and the payload on a key shard's.
TEST(SealedMessagesTest, TheHeaderOpensFirstAndThePayloadOnAnotherThread) {
  Link link;
  MessageOpener shard(DataProtection::kEncrypt);
  ASSERT_TRUE(shard.keys().AddKey(link.key, 2).ok());
  const std::string big(10000, 'p');
  std::vector<zmq::message_t> request = link.Sealed({"id", "header", big}, 1);
  absl::StatusOr<uint32_t> key = link.opener.OpenFirst(request, 1);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(*key, 2u);
  EXPECT_EQ(request[1].to_string(), "header");
  EXPECT_EQ(request[2].size(), big.size() + kSealOverheadBytes) << "the payload stays sealed";
  zmq::message_t payload = CopyOf(request[2]);
  ASSERT_TRUE(shard.OpenFrame(request[2], 1, 2).ok());
  EXPECT_EQ(request[2].to_string(), big);
  EXPECT_THAT(std::string(shard.OpenFrame(payload, 1, 2).message()), HasSubstr("opened before"));

  // Another message's payload behind this header: refused before anything opens.
  std::vector<zmq::message_t> a = link.Sealed({"id", "header A", "payload A"}, 1);
  std::vector<zmq::message_t> b = link.Sealed({"id", "header B", "payload B"}, 1);
  std::vector<zmq::message_t> spliced;
  spliced.push_back(CopyOf(a[0]));
  spliced.push_back(CopyOf(a[1]));
  spliced.push_back(CopyOf(b[2]));
  absl::StatusOr<uint32_t> refused = link.opener.OpenFirst(spliced, 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("does not follow"));
  // The same with the payload's counter rewritten to follow: the I/O thread passes it, the
  // shard's tag check does not.
  zmq::message_t forged = CopyOf(b[2]);
  std::memcpy(static_cast<uint8_t*>(forged.data()) + 12,
              static_cast<const uint8_t*>(a[2].data()) + 12, 8);
  spliced[2] = std::move(forged);
  ASSERT_TRUE(link.opener.OpenFirst(spliced, 1).ok());
  EXPECT_FALSE(shard.OpenFrame(spliced[2], 1, 2).ok());
  // A payload opened as another index or count than it was sealed as does not open.
  EXPECT_FALSE(shard.OpenFrame(b[2], 1, 3).ok());
  zmq::message_t unsealed("plain", 5);
  EXPECT_THAT(std::string(shard.OpenFrame(unsealed, 1, 2).message()),
              HasSubstr("not a sealed frame"));
}

TEST(SealedMessagesTest, AnotherNodesKeyOrAnUnknownKeyIsRefused) {
  Link worker2(DataProtection::kEncrypt, 2);
  Link worker5(DataProtection::kEncrypt, 5);
  // Worker 5's message reaches worker 2's opener, which does not hold key 5.
  std::vector<zmq::message_t> from5 = worker5.Sealed({"h", "p"});
  EXPECT_FALSE(worker2.opener.Open(from5).ok());
  // A forger that draws its own key under id 2 gets nothing through.
  Link forger(DataProtection::kEncrypt, 2);
  std::vector<zmq::message_t> forged = forger.Sealed({"h", "p"});
  EXPECT_FALSE(worker2.opener.Open(forged).ok());
  // Frames sealed under two keys in one message are refused even where both keys are held.
  ASSERT_TRUE(worker2.opener.keys().AddKey(worker5.key, 5).ok());
  std::vector<zmq::message_t> mixed;
  mixed.push_back(CopyOf(worker2.Sealed({"h2", "p2"})[0]));
  mixed.push_back(CopyOf(worker5.Sealed({"h5", "p5"})[1]));
  absl::StatusOr<uint32_t> opened = worker2.opener.Open(mixed);
  ASSERT_FALSE(opened.ok());
  EXPECT_THAT(std::string(opened.status().message()), HasSubstr("another key"));
}

TEST(SealedMessagesTest, EncryptAndAuthenticateDoNotOpenEachOther) {
  const DataKey key = *NewDataKey(1);
  SealKey authenticate(DataProtection::kAuthenticate, key, 1);
  std::unique_ptr<MessageSealer> sealer = *MessageSealer::Create(&authenticate);
  MessageOpener encrypt_opener(DataProtection::kEncrypt);
  ASSERT_TRUE(encrypt_opener.keys().AddKey(key, 1).ok());
  std::vector<zmq::message_t> frames = Message({"h", "p"});
  ASSERT_TRUE(sealer->Seal(frames).ok());
  EXPECT_FALSE(encrypt_opener.Open(frames).ok());
}

TEST(SealedMessagesTest, DataKeysTravelAs32BytesAndBadOnesAreNamed) {
  const DataKey key = *NewDataKey(0);
  absl::StatusOr<DataKey> back = DataKeyFromBytes(DataKeyBytes(key), 7, "server 7");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->id, 7u);
  EXPECT_EQ(back->bytes, key.bytes);
  absl::StatusOr<DataKey> short_key = DataKeyFromBytes("abc", 1, "worker 1");
  ASSERT_FALSE(short_key.ok());
  EXPECT_THAT(std::string(short_key.status().message()),
              HasSubstr("worker 1's data key is 3 bytes, not 32"));
  EXPECT_THAT(std::string(DataKeyFromBytes(std::string(32, '\0'), 1, "w").status().message()),
              HasSubstr("all zero"));
}

TEST(SealedMessagesTest, OnlyKeyedJobsThatDoNotAskForCurveSeal) {
  proto::ClusterConfig config;
  EXPECT_FALSE(SealsDataFrames(config));  // no cluster key: nothing is encrypted
  config.set_key_file("/k");
  EXPECT_TRUE(SealsDataFrames(config));
  EXPECT_EQ(DataProtectionOf(config), DataProtection::kEncrypt);
  EXPECT_EQ(DataProtectionSetting(config), "encrypt");
  config.set_data_protection(proto::ClusterConfig::authenticate);
  EXPECT_EQ(DataProtectionOf(config), DataProtection::kAuthenticate);
  EXPECT_EQ(DataProtectionSetting(config), "authenticate");
  config.set_data_protection(proto::ClusterConfig::curve);
  EXPECT_FALSE(SealsDataFrames(config));
}

TEST(SealedMessagesTest, DataSealsPassMessagesThroughWhenOff) {
  DataSeals off;
  std::vector<zmq::message_t> frames = Message({"h", "p"});
  EXPECT_TRUE(off.Seal(frames).ok());
  EXPECT_TRUE(off.Open(frames).ok());
  EXPECT_EQ(Texts(frames), (std::vector<std::string>{"h", "p"}));
}

}  // namespace
}  // namespace bytecomp
