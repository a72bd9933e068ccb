// Fuzz target: a sealed data frame as a node opens it (FrameOpener::OpenInPlace, frame_seal.h),
// with the job's two data keys (sealed_frame_job.h says what the input holds). Checks the
// contract besides memory safety: a frame that opens gives a payload inside it and opens only
// once; a two-frame message of the input's bytes opens at most once; and the input's bytes,
// sealed as a payload, open to themselves and are refused once any byte of the sealed frame is
// changed.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bytecomp/common/sealed_messages.h"
#include "fuzz_input.h"
#include "sealed_frame_job.h"

namespace {

using bytecomp::DataProtection;
using bytecomp::FrameOpener;
using bytecomp::FrameSealer;
using bytecomp::SealKey;
using bytecomp::fuzz::SealedFrameKey;
using bytecomp::fuzz::SealedFrameSender;

void Fail(const char* what) {
  std::fprintf(stderr, "sealed_frame: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bytecomp::fuzz::FuzzInput in(data, size);
  const DataProtection protection = bytecomp::fuzz::SealedFrameProtection(in.U8());
  const std::string associated = in.String(256);
  const uint8_t flip = in.U8();
  const absl::Span<const uint8_t> rest = in.Rest();

  FrameOpener opener(protection);
  if (!opener.AddKey(SealedFrameKey(1), SealedFrameSender(1)).ok() ||
      !opener.AddKey(SealedFrameKey(2), SealedFrameSender(2)).ok()) {
    Fail("AddKey failed");
  }
  // The input as a frame.
  std::vector<uint8_t> frame(rest.begin(), rest.end());
  absl::StatusOr<absl::Span<uint8_t>> opened =
      opener.OpenInPlace(absl::MakeSpan(frame), associated);
  if (opened.ok()) {
    if (opened->data() < frame.data() ||
        opened->data() + opened->size() > frame.data() + frame.size()) {
      Fail("an opened payload lies outside its frame");
    }
    std::vector<uint8_t> again(rest.begin(), rest.end());
    if (opener.OpenInPlace(absl::MakeSpan(again), associated).ok()) Fail("a frame opened twice");
  }
  // The input as a two-frame message (cut where `flip` says), opened as a server opens a
  // request (MessageOpener, sealed_messages.h): it opens at most once, each payload inside
  // its frame's bounds.
  {
    const size_t cut = rest.empty() ? 0 : flip % rest.size();
    std::vector<zmq::message_t> message;
    message.emplace_back(rest.data(), cut);
    message.emplace_back(rest.data() + cut, rest.size() - cut);
    std::vector<zmq::message_t> copy;
    for (const zmq::message_t& f : message) copy.emplace_back(f.data(), f.size());
    bytecomp::MessageOpener messages(protection);
    if (!messages.keys().AddKey(SealedFrameKey(1), SealedFrameSender(1)).ok() ||
        !messages.keys().AddKey(SealedFrameKey(2), SealedFrameSender(2)).ok()) {
      Fail("AddKey failed");
    }
    const size_t sizes[2] = {cut, rest.size() - cut};
    if (messages.Open(message).ok()) {
      for (int i = 0; i < 2; ++i) {
        if (message[i].size() + bytecomp::kSealOverheadBytes != sizes[i]) {
          Fail("an opened message's payload is not its frame less the seal");
        }
      }
      if (messages.Open(copy).ok()) Fail("a message opened twice");
    }
  }
  // The input as a payload: sealed, it opens to itself; changed anywhere, it is refused.
  SealKey key(protection, SealedFrameKey(2), SealedFrameSender(2));
  absl::StatusOr<std::unique_ptr<FrameSealer>> sealer = FrameSealer::Create(&key);
  if (!sealer.ok()) Fail("FrameSealer::Create failed");
  std::vector<uint8_t> sealed(rest.size() + bytecomp::kSealOverheadBytes);
  if (!(*sealer)->Seal(rest, associated, absl::MakeSpan(sealed)).ok()) Fail("Seal failed");
  // An opener of its own: the input frame above may have taken this sender's first counter.
  FrameOpener fresh(protection);
  if (!fresh.AddKey(SealedFrameKey(2), SealedFrameSender(2)).ok()) Fail("AddKey failed");
  std::vector<uint8_t> changed = sealed;
  changed[flip % changed.size()] ^= static_cast<uint8_t>(1 + (flip >> 5));
  if (fresh.OpenInPlace(absl::MakeSpan(changed), associated).ok()) Fail("a changed frame opened");
  absl::StatusOr<absl::Span<uint8_t>> round_trip =
      fresh.OpenInPlace(absl::MakeSpan(sealed), associated);
  if (!round_trip.ok()) Fail("a sealed payload did not open");
  if (round_trip->size() != rest.size() ||
      (!rest.empty() && std::memcmp(round_trip->data(), rest.data(), rest.size()) != 0)) {
    Fail("a sealed payload opened to other bytes");
  }
  return 0;
}
