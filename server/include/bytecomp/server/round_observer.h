// What a KeyStore (key_store.h) tells of its rounds to whoever watches them, and the server's
// telemetry as such a watcher: bytes in and out by codec and each round's time in the metrics,
// each round's summing (first push to the last one summed) in the timeline. A store without an
// observer pays a null check per push, pull reply and round.
#pragma once

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "bytecomp/telemetry/metrics.h"
#include "bytecomp/telemetry/timeline.h"

namespace bytecomp::server {

class RoundObserver {
 public:
  virtual ~RoundObserver() = default;
  // The first push of a round of `key` was accepted.
  virtual void RoundStarted(uint64_t key) = 0;
  // A push was accepted: `wire` payload bytes under the round's `codec` ("" raw) standing for
  // `raw` uncompressed bytes. (A push carrying an abort is not counted.)
  virtual void PushAccepted(absl::string_view codec, int64_t wire, int64_t raw) = 0;
  // Every pusher pushed `iteration` of `key`, summed under `codec`; its result has `bytes`.
  virtual void RoundSummed(uint64_t key, uint64_t iteration, absl::string_view codec,
                           int64_t bytes) = 0;
  // A pull was answered with a round's result: `wire` payload bytes under `codec` standing for
  // `raw` uncompressed bytes.
  virtual void PullAnswered(absl::string_view codec, int64_t wire, int64_t raw) = 0;
};

// The server's telemetry: either pointer may be null (that part off). One per key shard: it
// keeps each key's round start, for the shard's thread alone.
class RoundTelemetry : public RoundObserver {
 public:
  RoundTelemetry(telemetry::Timeline* timeline, telemetry::NodeMetrics* metrics)
      : timeline_(timeline), metrics_(metrics) {}

  void RoundStarted(uint64_t key) override;
  void PushAccepted(absl::string_view codec, int64_t wire, int64_t raw) override;
  void RoundSummed(uint64_t key, uint64_t iteration, absl::string_view codec,
                   int64_t bytes) override;
  void PullAnswered(absl::string_view codec, int64_t wire, int64_t raw) override;

 private:
  telemetry::Timeline* timeline_;
  telemetry::NodeMetrics* metrics_;
  absl::flat_hash_map<uint64_t, int64_t> first_push_us_;  // by key: its round's first push
};

}  // namespace bytecomp::server
