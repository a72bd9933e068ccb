// Collectives among the workers (Strategy scheme allreduce and allgather), run by gloo over
// its full mesh of TCP connections (ClusterConfig.collectives; worker/README.md,
// "Collectives").
//
// gloo's collectives must be called in the same order on every worker, but gradients become
// ready in orders that differ between workers. Worker 0 leads: its exchange thread takes the
// items that are ready on it (in their ready order, up to max_fused_bytes) and broadcasts their
// list, the batch; every worker then waits until each listed item is ready on it too and runs
// the batch: all its allreduce items fused into one gloo allreduce of one buffer (Cupcake's
// fusion: a round carries many small tensors), its allgather items in one allgather of their
// sizes and one allgatherv of their payloads. An idle leader sends an empty batch every
// keepalive_ms, so that the others can tell an idle job from a lost leader.
//
// A batch that cannot run (an item missing on a worker for `timeout`, an item that differs
// from the leader's, a gloo error or a peer gone) fails every item, then and later, with the
// reason: the workers' sums can no longer agree.
//
// No ZeroMQ socket: the protocol is testable with gloo's own in-process store.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "data.pb.h"
#include "strategy.pb.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}  // namespace rendezvous
}  // namespace gloo

namespace bytecomp::worker {

// What a collective gives back for one item.
struct CollectiveResult {
  // Allreduce: the fused sum; the item's values are count floats from offset.
  std::shared_ptr<const float[]> sums;
  size_t offset = 0;
  size_t count = 0;
  // Allgather: every worker's payload, by rank (views into `gathered`).
  std::shared_ptr<const std::vector<uint8_t>> gathered;
  std::vector<absl::Span<const uint8_t>> payloads;

  // Device values (CollectiveItem::device): the sum (or mean) is in the item's own memory.
  bool in_place = false;

  absl::Span<const float> sum() const { return absl::MakeConstSpan(sums.get() + offset, count); }
};

// An allreduce contribution in device memory (an uncompressed device tensor's partition),
// summed in place by the exchange's DeviceSummer.
struct DeviceValues {
  void* data = nullptr;
  size_t count = 0;
  proto::DType dtype = proto::DTYPE_FLOAT32;
  int device = 0;
  void* stream = nullptr;  // the tensor's stream (cudaStream_t): the sum queues behind its writes
  bool average = false;    // the mean over the workers rather than the sum
};

// Sums device memory in place among the workers: NCCL across machines
// (nccl_device_summer.cc). Called on the exchange's thread with a batch's device items, in the
// batch's order, which every worker shares; returns once the sums are done or failed (every
// worker then fails the batch alike).
class DeviceSummer {
 public:
  // Fills `bytes` (its size the same on every worker) with worker 0's, over the exchange's
  // own mesh: what a communicator's set-up needs (NCCL's unique id).
  using BroadcastFromLeader = std::function<void(std::string* bytes)>;
  virtual ~DeviceSummer() = default;
  virtual absl::Status SumInPlace(const std::vector<DeviceValues>& items,
                                  const BroadcastFromLeader& broadcast) = 0;
};

// One partition's contribution to a round of a collective.
struct CollectiveItem {
  // Which round of which partition (and stage: two-round codecs), the same on every worker.
  uint64_t key = 0;
  uint64_t round = 0;
  uint32_t stage = 0;
  proto::Scheme scheme = proto::SCHEME_ALLREDUCE;
  std::string name;  // the tensor, for errors
  // Allreduce: this worker's values, owned (values) or borrowed (source: the caller's memory,
  // read when the batch runs, after which `released` is called).
  std::vector<float> values;
  absl::Span<const float> source;
  absl::AnyInvocable<void()> released;
  // The element type the values travel and are summed in (fp16 and bf16 halve the bytes: the
  // sum is rounded to it at every step of the ring, as DDP's fp16 hook's allreduce is).
  proto::DType wire = proto::DTYPE_FLOAT32;
  std::vector<uint8_t> payload;  // allgather: this worker's payload
  // Allreduce of device memory (instead of values or source): summed in place by the
  // DeviceSummer, its result `in_place`. Every worker must give the item as device values.
  std::optional<DeviceValues> device;
  // This worker could not encode it (values or payload are placeholders): the round fails on
  // every worker, as a PS round with an aborted push does.
  bool aborted = false;
  // Called once, on the exchange's thread (or the submitter's, when the exchange has failed).
  absl::AnyInvocable<void(absl::StatusOr<CollectiveResult>)> done;
};

class CollectiveExchange {
 public:
  struct Options {
    int rank = 0;
    int size = 1;
    // How long a worker waits for an item the leader listed, and a gloo operation may take.
    std::chrono::milliseconds timeout{30000};
    // A batch's bytes (values and payloads), except that a batch always takes one item.
    size_t max_fused_bytes = size_t{16} << 20;
    std::chrono::milliseconds keepalive{100};
    // How long a worker waits for the leader's next batch (an idle leader sends an empty one
    // every keepalive) before it takes the leader for lost and ends the collectives; also what
    // a worker's Stop waits at most when the leader is gone.
    std::chrono::milliseconds leader_silence{10000};
    // Fused allreduces of at most this many bytes run gloo's bcube (log2(W) steps each way, for
    // a power-of-two W) instead of its ring (W - 1 steps each way): fewer latencies where
    // latency is most of the time.
    size_t bcube_below_bytes = 256 * 1024;
    // Sums the items given as device values; null: such items fail, naming why.
    std::shared_ptr<DeviceSummer> device_summer;
  };

  // Counts for tests and the benchmark (fusion: fewer collective calls than items).
  struct Counts {
    int64_t batches = 0;         // non-empty batches run
    int64_t items = 0;           // items summed or gathered
    int64_t collectives = 0;     // gloo allreduce and allgatherv calls for them
    int64_t fp16_overflows = 0;  // fp16 batches whose sum overflowed, summed again in fp32
    int64_t device_items = 0;    // items summed in device memory (DeviceSummer)
  };

  // Joins gloo's full mesh over TCP on `host` through `store` (every worker of the job calls
  // it), and starts the exchange's thread.
  static absl::StatusOr<std::unique_ptr<CollectiveExchange>> Connect(gloo::rendezvous::Store& store,
                                                                     const std::string& host,
                                                                     Options options);
  CollectiveExchange(std::shared_ptr<gloo::Context> context, Options options);
  ~CollectiveExchange();
  CollectiveExchange(const CollectiveExchange&) = delete;
  CollectiveExchange& operator=(const CollectiveExchange&) = delete;

  void Submit(CollectiveItem item) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the thread (the leader tells the others); items not run fail.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  Counts counts() const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether items may be given as device values.
  bool sums_device_memory() const { return options_.device_summer != nullptr; }

  // The values an allreduce item gives.
  static size_t Length(const CollectiveItem& item) {
    if (item.device.has_value()) return item.device->count;
    return item.values.empty() ? item.source.size() : item.values.size();
  }

 private:
  using Id = std::tuple<uint64_t, uint64_t, uint32_t>;  // key, round, stage
  struct Entry;                                         // a batch's line (collective_exchange.cc)

  void Run();
  // Leader: the next batch from the items ready here (empty: a keepalive; stop: the end).
  std::vector<Entry> NextBatch(bool* stop) ABSL_LOCKS_EXCLUDED(mu_);
  // Every worker: the batch's items, in its order, once each is ready here.
  absl::StatusOr<std::vector<CollectiveItem>> TakeItems(const std::vector<Entry>& batch)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the batch; on failure every item gets the error.
  absl::Status RunBatch(std::vector<CollectiveItem> items);
  // The batch's collectives (gloo throws its errors); each item's done called on success.
  absl::Status SumAndGather(std::vector<CollectiveItem>& items,
                            std::vector<absl::StatusOr<CollectiveResult>>& results);
  // The allreduce items `reduced` of one wire type, fused into one gloo allreduce; returns
  // the gloo allreduces run: 2 when an fp16 sum overflowed and the batch was summed again in
  // fp32.
  int Allreduce(std::vector<CollectiveItem>& items, const std::vector<size_t>& reduced,
                proto::DType wire, std::vector<absl::StatusOr<CollectiveResult>>& results);
  // The device items `summed`, through options_.device_summer; an error ends the collectives.
  absl::Status SumOnDevice(std::vector<CollectiveItem>& items, const std::vector<size_t>& summed,
                           std::vector<absl::StatusOr<CollectiveResult>>& results);
  void Fail(const absl::Status& reason) ABSL_LOCKS_EXCLUDED(mu_);

  const std::shared_ptr<gloo::Context> context_;
  const Options options_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // an item came, or Stop
  std::map<Id, CollectiveItem> ready_ ABSL_GUARDED_BY(mu_);
  // The exchange thread's copy of an fp16 batch's values, for a sum that overflows (Allreduce),
  // kept from batch to batch so that its pages stay mapped.
  std::vector<uint16_t> fp16_values_;
  std::deque<Id> ready_order_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
  Counts counts_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace bytecomp::worker
