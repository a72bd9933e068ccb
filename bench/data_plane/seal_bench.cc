// bytecomp-seal-bench: what sealing a data frame costs on one core, against memcpy and against
// the cipher ZeroMQ's CURVE seals every byte with (XSalsa20-Poly1305, libsodium's
// crypto_secretbox), all measured in one run. Prints a table: the median GB/s of each way over
// --reps runs (the payload's bytes per second) and its ratio to memcpy.
//
//   bytecomp-seal-bench [--bytes=4194304] [--reps=15] [--min_ms=100]
#include <sodium.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bytecomp/common/frame_seal.h"
#include "bytecomp/common/stats.h"

ABSL_FLAG(int64_t, bytes, int64_t{4} << 20, "payload bytes per frame");
ABSL_FLAG(int, reps, 15, "timed runs per way (the median is shown)");
ABSL_FLAG(int, min_ms, 100, "each run repeats its way for at least this long");

namespace {

using bytecomp::DataProtection;
using bytecomp::FrameOpener;
using bytecomp::FrameSealer;
using bytecomp::kSealOverheadBytes;
using bytecomp::kSealPrefixBytes;
using bytecomp::SealKey;

using Clock = std::chrono::steady_clock;

// GB/s of `n` bytes per call, one run: calls `op` until min_ms have passed.
double Run(const std::function<void()>& op, size_t n, int min_ms) {
  const auto start = Clock::now();
  const auto until = start + std::chrono::milliseconds(min_ms);
  int64_t calls = 0;
  auto now = start;
  do {
    op();
    ++calls;
    now = Clock::now();
  } while (now < until);
  const double seconds = std::chrono::duration<double>(now - start).count();
  return static_cast<double>(n) * static_cast<double>(calls) / seconds / 1e9;
}

struct Way {
  std::string name;
  std::function<void()> op;
  std::vector<double> gbps;
};

void Die(const std::string& what) {
  std::fprintf(stderr, "bytecomp-seal-bench: %s\n", what.c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const size_t n = static_cast<size_t>(absl::GetFlag(FLAGS_bytes));
  const int reps = absl::GetFlag(FLAGS_reps);
  const int min_ms = absl::GetFlag(FLAGS_min_ms);
  if (sodium_init() < 0) Die("sodium_init failed");

  std::vector<uint8_t> payload(n), copy(n), frame(n + kSealOverheadBytes),
      box(n + crypto_secretbox_MACBYTES);
  for (size_t i = 0; i < n; ++i) payload[i] = static_cast<uint8_t>(i * 131 + 7);

  absl::StatusOr<bytecomp::DataKey> key = bytecomp::NewDataKey(1);
  if (!key.ok()) Die(key.status().ToString());
  SealKey encrypt_key(DataProtection::kEncrypt, *key, 1);
  SealKey auth_key(DataProtection::kAuthenticate, *key, 2);
  std::unique_ptr<FrameSealer> encrypt = *FrameSealer::Create(&encrypt_key);
  std::unique_ptr<FrameSealer> authenticate = *FrameSealer::Create(&auth_key);
  // The open rows seal a frame and open it (each frame has a new counter, so the opener's
  // replay window accepts it): their GB/s is of both passes together, as a round trip costs.
  const std::string ad = "connection 1, request header";

  unsigned char sodium_key[crypto_secretbox_KEYBYTES], nonce[crypto_secretbox_NONCEBYTES] = {};
  randombytes_buf(sodium_key, sizeof(sodium_key));

  FrameOpener encrypt_opener(DataProtection::kEncrypt), auth_opener(DataProtection::kAuthenticate);
  if (!encrypt_opener.AddKey(*key, 1).ok() || !auth_opener.AddKey(*key, 2).ok())
    Die("AddKey failed");

  auto check = [](const absl::Status& s) {
    if (!s.ok()) Die(s.ToString());
  };
  std::vector<Way> ways = {
      {"memcpy (the reference)", [&] { std::memcpy(copy.data(), payload.data(), n); }, {}},
      {"aes-256-gcm seal into the send buffer",
       [&] { check(encrypt->Seal(payload, ad, absl::MakeSpan(frame))); },
       {}},
      {"aes-256-gcm seal in place",
       [&] { check(encrypt->SealInPlace(absl::MakeSpan(frame), ad)); },
       {}},
      {"aes-256-gcm seal in place + open in place",
       [&] {
         check(encrypt->SealInPlace(absl::MakeSpan(frame), ad));
         check(encrypt_opener.OpenInPlace(absl::MakeSpan(frame), ad).status());
       },
       {}},
      {"gmac (authenticate) seal in place",
       [&] { check(authenticate->SealInPlace(absl::MakeSpan(frame), ad)); },
       {}},
      {"gmac (authenticate) seal + open in place",
       [&] {
         check(authenticate->SealInPlace(absl::MakeSpan(frame), ad));
         check(auth_opener.OpenInPlace(absl::MakeSpan(frame), ad).status());
       },
       {}},
      {"xsalsa20-poly1305 seal (CURVE's cipher)",
       [&] {
         sodium_increment(nonce, sizeof(nonce));
         crypto_secretbox_easy(box.data(), payload.data(), n, nonce, sodium_key);
       },
       {}},
      {"xsalsa20-poly1305 seal + open",
       [&] {
         sodium_increment(nonce, sizeof(nonce));
         crypto_secretbox_easy(box.data(), payload.data(), n, nonce, sodium_key);
         if (crypto_secretbox_open_easy(copy.data(), box.data(), box.size(), nonce, sodium_key) !=
             0) {
           Die("crypto_secretbox_open_easy refused its own box");
         }
       },
       {}},
  };
  std::fprintf(stderr,
               "bytecomp-seal-bench: %zu-byte payloads, %d runs of >= %d ms per way, "
               "interleaved\n",
               n, reps, min_ms);
  for (int r = 0; r < reps; ++r) {
    for (Way& w : ways) w.gbps.push_back(Run(w.op, n, min_ms));
    std::fprintf(stderr, "  run %d/%d\n", r + 1, reps);
  }
  const double memcpy_gbps = bytecomp::Median(ways[0].gbps);
  const double curve_gbps = bytecomp::Median(ways[6].gbps);
  std::printf("%-44s %9s %9s %9s %10s\n", "way (one core)", "GB/s", "min", "max", "x memcpy");
  for (const Way& w : ways) {
    const double med = bytecomp::Median(w.gbps);
    std::printf("%-44s %9.2f %9.2f %9.2f %10.2f\n", w.name.c_str(), med,
                *std::min_element(w.gbps.begin(), w.gbps.end()),
                *std::max_element(w.gbps.begin(), w.gbps.end()), med / memcpy_gbps);
  }
  std::printf("aes-256-gcm seal into the send buffer / CURVE's cipher: %.2fx\n",
              bytecomp::Median(ways[1].gbps) / curve_gbps);
  return 0;
}
