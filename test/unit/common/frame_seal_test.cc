// Sealed data frames (frame_seal.h): what opens, and what is refused with which reason.
#include "bytecomp/common/frame_seal.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

namespace bytecomp {
namespace {

using ::testing::HasSubstr;

std::vector<uint8_t> Payload(size_t n) {
  std::vector<uint8_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(i * 131 + 7);
  return p;
}

DataKey Key(uint32_t id) {
  absl::StatusOr<DataKey> key = NewDataKey(id);
  EXPECT_TRUE(key.ok()) << key.status();
  return *key;
}

// One sender and one receiver of a key.
struct Pair {
  Pair(DataProtection protection, const DataKey& key, uint32_t sender = 3)
      : seal_key(protection, key, sender), opener(protection) {
    absl::StatusOr<std::unique_ptr<FrameSealer>> s = FrameSealer::Create(&seal_key);
    EXPECT_TRUE(s.ok()) << s.status();
    sealer = std::move(*s);
    EXPECT_TRUE(opener.AddKey(key, sender).ok());
  }
  std::vector<uint8_t> Sealed(const std::vector<uint8_t>& payload, absl::string_view ad = "conn") {
    std::vector<uint8_t> out(payload.size() + kSealOverheadBytes);
    EXPECT_TRUE(sealer->Seal(payload, ad, absl::MakeSpan(out)).ok());
    return out;
  }
  SealKey seal_key;
  std::unique_ptr<FrameSealer> sealer;
  FrameOpener opener;
};

TEST(FrameSealTest, EncryptedFramesOpenToTheirPayloadAndHideIt) {
  const DataKey key = Key(1);
  Pair p(DataProtection::kEncrypt, key);
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{4099}, size_t{1} << 20}) {
    const std::vector<uint8_t> payload = Payload(n);
    std::vector<uint8_t> frame = p.Sealed(payload);
    ASSERT_EQ(frame.size(), n + kSealOverheadBytes);
    if (n >= 16) {
      EXPECT_NE(0, std::memcmp(frame.data() + kSealPrefixBytes, payload.data(), n))
          << "the payload went out in the clear";
    }
    absl::StatusOr<absl::Span<uint8_t>> opened =
        p.opener.OpenInPlace(absl::MakeSpan(frame), "conn");
    ASSERT_TRUE(opened.ok()) << opened.status();
    EXPECT_EQ(std::vector<uint8_t>(opened->begin(), opened->end()), payload) << n;
  }
  EXPECT_EQ(p.opener.opened(), 6u);
  EXPECT_EQ(p.seal_key.sealed(), 6u);
}

TEST(FrameSealTest, SealInPlaceMatchesTheCopyingSeal) {
  const DataKey key = Key(1);
  Pair p(DataProtection::kEncrypt, key);
  const std::vector<uint8_t> payload = Payload(10000);
  std::vector<uint8_t> frame(payload.size() + kSealOverheadBytes);
  std::memcpy(frame.data() + kSealPrefixBytes, payload.data(), payload.size());
  ASSERT_TRUE(p.sealer->SealInPlace(absl::MakeSpan(frame), "req").ok());
  absl::StatusOr<absl::Span<uint8_t>> opened = p.opener.OpenInPlace(absl::MakeSpan(frame), "req");
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(std::vector<uint8_t>(opened->begin(), opened->end()), payload);
  std::vector<uint8_t> small(kSealOverheadBytes - 1);
  EXPECT_THAT(p.sealer->SealInPlace(absl::MakeSpan(small), "").ToString(), HasSubstr("room"));
}

TEST(FrameSealTest, AuthenticatedFramesCarryThePayloadInTheClearAndStillRefuseChanges) {
  const DataKey key = Key(1);
  Pair p(DataProtection::kAuthenticate, key);
  const std::vector<uint8_t> payload = Payload(5000);
  std::vector<uint8_t> frame = p.Sealed(payload);
  EXPECT_EQ(0, std::memcmp(frame.data() + kSealPrefixBytes, payload.data(), payload.size()));
  std::vector<uint8_t> altered = frame;
  altered[kSealPrefixBytes + 100] ^= 1;
  EXPECT_THAT(p.opener.OpenInPlace(absl::MakeSpan(altered), "conn").status().ToString(),
              HasSubstr("failed authentication"));
  absl::StatusOr<absl::Span<uint8_t>> opened = p.opener.OpenInPlace(absl::MakeSpan(frame), "conn");
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(std::vector<uint8_t>(opened->begin(), opened->end()), payload);
}

TEST(FrameSealTest, AnyAlteredByteOrOtherAssociatedDataIsRefused) {
  const DataKey key = Key(1);
  Pair p(DataProtection::kEncrypt, key);
  const std::vector<uint8_t> frame = p.Sealed(Payload(64));
  // Every byte of the prefix, payload and tag: each change is refused (prefix changes by
  // their field's check or the tag, the rest by the tag).
  for (size_t i = 0; i < frame.size(); ++i) {
    std::vector<uint8_t> altered = frame;
    altered[i] ^= 0x40;
    EXPECT_FALSE(p.opener.OpenInPlace(absl::MakeSpan(altered), "conn").ok()) << "byte " << i;
  }
  std::vector<uint8_t> moved = frame;
  EXPECT_THAT(p.opener.OpenInPlace(absl::MakeSpan(moved), "another conn").status().ToString(),
              HasSubstr("bound to another connection"));
  std::vector<uint8_t> intact = frame;
  EXPECT_TRUE(p.opener.OpenInPlace(absl::MakeSpan(intact), "conn").ok())
      << "refused frames must not have moved the window";
}

TEST(FrameSealTest, AFrameOpensOnceAndReorderingWithinTheWindowIsAccepted) {
  const DataKey key = Key(1);
  Pair p(DataProtection::kEncrypt, key);
  std::vector<std::vector<uint8_t>> frames;
  for (int i = 0; i < 5; ++i) frames.push_back(p.Sealed(Payload(32)));
  for (int i : {4, 0, 2, 1, 3}) {
    std::vector<uint8_t> f = frames[i];
    EXPECT_TRUE(p.opener.OpenInPlace(absl::MakeSpan(f), "conn").ok()) << i;
  }
  std::vector<uint8_t> again = frames[2];
  EXPECT_THAT(p.opener.OpenInPlace(absl::MakeSpan(again), "conn").status().ToString(),
              HasSubstr("opened before: a replay"));
}

TEST(FrameSealTest, FramesOlderThanTheWindowAreRefused) {
  const DataKey key = Key(1);
  Pair p(DataProtection::kEncrypt, key);
  const std::vector<uint8_t> old = p.Sealed(Payload(8));
  for (uint64_t i = 0; i < kReplayWindow; ++i) {
    std::vector<uint8_t> f = p.Sealed(Payload(8));
    ASSERT_TRUE(p.opener.OpenInPlace(absl::MakeSpan(f), "conn").ok()) << i;
  }
  std::vector<uint8_t> f = old;
  EXPECT_THAT(p.opener.OpenInPlace(absl::MakeSpan(f), "conn").status().ToString(),
              HasSubstr("older than the last"));
}

TEST(FrameSealTest, AnotherKeyOrAnUnknownKeyIdOrTheOtherProtectionIsRefused) {
  const DataKey key = Key(1);
  Pair p(DataProtection::kEncrypt, key);
  // Sealed by someone whose key claims the same id: the tag does not match.
  DataKey forged = Key(1);
  SealKey forged_key(DataProtection::kEncrypt, forged, 3);
  std::unique_ptr<FrameSealer> forger = *FrameSealer::Create(&forged_key);
  std::vector<uint8_t> frame(100 + kSealOverheadBytes);
  ASSERT_TRUE(forger->Seal(Payload(100), "conn", absl::MakeSpan(frame)).ok());
  EXPECT_THAT(p.opener.OpenInPlace(absl::MakeSpan(frame), "conn").status().ToString(),
              HasSubstr("sealed under another key"));
  // A key id the opener does not hold.
  SealKey other_key(DataProtection::kEncrypt, Key(9), 3);
  std::unique_ptr<FrameSealer> other = *FrameSealer::Create(&other_key);
  ASSERT_TRUE(other->Seal(Payload(100), "conn", absl::MakeSpan(frame)).ok());
  EXPECT_THAT(p.opener.OpenInPlace(absl::MakeSpan(frame), "conn").status().ToString(),
              HasSubstr("data key 9, which this node does not hold (it holds 1)"));
  // A downgrade: an authenticated-only frame where the job encrypts.
  SealKey clear_key(DataProtection::kAuthenticate, key, 3);
  std::unique_ptr<FrameSealer> clear = *FrameSealer::Create(&clear_key);
  ASSERT_TRUE(clear->Seal(Payload(100), "conn", absl::MakeSpan(frame)).ok());
  EXPECT_THAT(p.opener.OpenInPlace(absl::MakeSpan(frame), "conn").status().ToString(),
              HasSubstr("protection authenticate where the job's data_protection is encrypt"));
}

TEST(FrameSealTest, MalformedFramesAreRefusedNamingWhatIsWrong) {
  const DataKey key = Key(1);
  Pair p(DataProtection::kEncrypt, key);
  std::vector<uint8_t> tiny(kSealOverheadBytes - 1, 0);
  EXPECT_THAT(p.opener.OpenInPlace(absl::MakeSpan(tiny), "").status().ToString(),
              HasSubstr("shorter than its 40-byte prefix and tag"));
  std::vector<uint8_t> frame = p.Sealed(Payload(10));
  std::vector<uint8_t> f = frame;
  f[0] = 0;
  EXPECT_THAT(p.opener.OpenInPlace(absl::MakeSpan(f), "conn").status().ToString(),
              HasSubstr("not a sealed frame"));
  f = frame;
  f[1] = 2;
  EXPECT_THAT(p.opener.OpenInPlace(absl::MakeSpan(f), "conn").status().ToString(),
              HasSubstr("version 2"));
  f = frame;
  f.push_back(0);
  EXPECT_THAT(p.opener.OpenInPlace(absl::MakeSpan(f), "conn").status().ToString(),
              HasSubstr("says it holds 10 payload bytes, but carries 11"));
  f = frame;
  std::memset(f.data() + 12, 0xff, 8);
  EXPECT_THAT(p.opener.OpenInPlace(absl::MakeSpan(f), "conn").status().ToString(),
              HasSubstr("last counter"));
  EXPECT_EQ(p.opener.refused(), 5u);
}

TEST(FrameSealTest, OnlyTheKeysSenderSealsUnderIt) {
  const DataKey key = Key(1);
  Pair p(DataProtection::kEncrypt, key, /*sender=*/3);
  // A holder of the key (a server it was given to) sealing as another sender is refused.
  SealKey other_sender(DataProtection::kEncrypt, key, 4);
  std::unique_ptr<FrameSealer> s = *FrameSealer::Create(&other_sender);
  std::vector<uint8_t> frame(8 + kSealOverheadBytes);
  ASSERT_TRUE(s->Seal(Payload(8), "c", absl::MakeSpan(frame)).ok());
  EXPECT_THAT(p.opener.OpenInPlace(absl::MakeSpan(frame), "c").status().ToString(),
              HasSubstr("from sender 4; only sender 3 seals under it"));
}

TEST(FrameSealTest, OpenIntoAnotherBufferLeavesTheFrameAndChecksTheSame) {
  const DataKey key = Key(1);
  Pair p(DataProtection::kEncrypt, key);
  const std::vector<uint8_t> payload = Payload(3000);
  const std::vector<uint8_t> frame = p.Sealed(payload);
  std::vector<uint8_t> out(payload.size());
  ASSERT_TRUE(p.opener.Open(frame, "conn", absl::MakeSpan(out)).ok());
  EXPECT_EQ(out, payload);
  EXPECT_THAT(p.opener.Open(frame, "conn", absl::MakeSpan(out)).ToString(), HasSubstr("a replay"));
  std::vector<uint8_t> wrong(payload.size() - 1);
  const std::vector<uint8_t> next = p.Sealed(payload);
  EXPECT_THAT(p.opener.Open(next, "conn", absl::MakeSpan(wrong)).ToString(),
              HasSubstr("into 2999"));
}

TEST(FrameSealTest, CountersTakenTogetherSealFramesOfOneMessage) {
  const DataKey key = Key(1);
  Pair p(DataProtection::kEncrypt, key);
  const uint64_t base = p.seal_key.TakeCounters(3);
  std::vector<std::vector<uint8_t>> frames;
  for (uint64_t i = 0; i < 3; ++i) {
    std::vector<uint8_t> f(10 + kSealOverheadBytes);
    ASSERT_TRUE(p.sealer->SealAt(base + i, Payload(10), "msg", absl::MakeSpan(f)).ok());
    EXPECT_EQ(SealedCounter(f), base + i);
    frames.push_back(f);
  }
  EXPECT_EQ(p.seal_key.TakeCounters(), base + 3);
  for (auto& f : frames) EXPECT_TRUE(p.opener.OpenInPlace(absl::MakeSpan(f), "msg").ok());
  EXPECT_EQ(SealedCounter(std::vector<uint8_t>(5)), std::nullopt);
}

TEST(FrameSealTest, DroppingAKeyRefusesItsFramesAndARotationOpensTheNew) {
  const DataKey old_key = Key(1), new_key = Key(2);
  Pair p(DataProtection::kEncrypt, old_key);
  std::vector<uint8_t> before = p.Sealed(Payload(20));
  ASSERT_TRUE(p.opener.AddKey(new_key, 3).ok());
  SealKey rotated(DataProtection::kEncrypt, new_key, 3);
  std::unique_ptr<FrameSealer> s = *FrameSealer::Create(&rotated);
  std::vector<uint8_t> after(20 + kSealOverheadBytes);
  ASSERT_TRUE(s->Seal(Payload(20), "conn", absl::MakeSpan(after)).ok());
  p.opener.DropKey(1);
  EXPECT_THAT(p.opener.OpenInPlace(absl::MakeSpan(before), "conn").status().ToString(),
              HasSubstr("does not hold (it holds 2)"));
  EXPECT_TRUE(p.opener.OpenInPlace(absl::MakeSpan(after), "conn").ok());
  // A replacement node's new key under the same id: its counters start again.
  DataKey replacement = Key(2);
  ASSERT_TRUE(p.opener.AddKey(replacement, 3).ok());
  SealKey fresh(DataProtection::kEncrypt, replacement, 3);
  std::unique_ptr<FrameSealer> r = *FrameSealer::Create(&fresh);
  std::vector<uint8_t> first(20 + kSealOverheadBytes);
  ASSERT_TRUE(r->Seal(Payload(20), "conn", absl::MakeSpan(first)).ok());
  EXPECT_TRUE(p.opener.OpenInPlace(absl::MakeSpan(first), "conn").ok());
}

TEST(FrameSealTest, ThreadsSealingUnderOneKeyNeverShareACounter) {
  const DataKey key = Key(1);
  SealKey sk(DataProtection::kEncrypt, key, 5);
  constexpr int kThreads = 4, kEach = 500;
  std::vector<std::vector<uint64_t>> counters(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::unique_ptr<FrameSealer> s = *FrameSealer::Create(&sk);
      std::vector<uint8_t> frame(16 + kSealOverheadBytes);
      for (int i = 0; i < kEach; ++i) {
        ASSERT_TRUE(s->Seal(Payload(16), "c", absl::MakeSpan(frame)).ok());
        counters[t].push_back(*SealedCounter(frame));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::set<uint64_t> all;
  for (const auto& v : counters) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), size_t{kThreads * kEach});
  EXPECT_EQ(*all.rbegin(), uint64_t{kThreads * kEach - 1});
}

}  // namespace
}  // namespace bytecomp
