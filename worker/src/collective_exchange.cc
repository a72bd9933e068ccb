#include "collective_exchange.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bytecomp/common/dtype.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/compress/format/half_format.h"
#include "gloo/allgather.h"
#include "gloo/allgatherv.h"
#include "gloo/allreduce.h"
#include "gloo/broadcast.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"

namespace bytecomp::worker {

// A batch's line, as the leader broadcasts it.
struct CollectiveExchange::Entry {
  uint64_t key = 0;
  uint64_t round = 0;
  uint32_t stage = 0;
  uint32_t scheme = 0;
  uint64_t elements = 0;   // allreduce: the values' count (every worker's must match)
  uint32_t wire = 0;       // allreduce: the DType they travel in
  uint32_t on_device = 0;  // 1: device values (DeviceSummer), on every worker
};

namespace {

constexpr uint32_t kMagic = 0x42434331;  // "BCC1"
constexpr uint32_t kStop = 0xFFFFFFFFu;
constexpr uint32_t kMaxBatch = 1u << 16;
// gloo matches messages by tag; each step of a batch has its own.
enum Tag : uint32_t {
  kHeaderTag = 1,
  kEntriesTag,
  kAllreduceTag,
  kSizesTag,
  kGatherTag,
  kDeviceTag,  // DeviceSummer's broadcasts (a communicator's id)
};

struct Header {
  uint32_t magic = kMagic;
  uint32_t count = 0;  // entries; kStop: the leader stopped
};
// A batch goes in one broadcast of its header and its first entries; a longer one's other
// entries follow in a second.
constexpr size_t kInlineEntries = 50;

template <typename T>
void Broadcast(gloo::Context* context, T* data, size_t count, uint32_t tag,
               std::chrono::milliseconds timeout) {
  gloo::BroadcastOptions opts(std::shared_ptr<gloo::Context>(context, [](gloo::Context*) {}));
  opts.setOutput(data, count);
  opts.setRoot(0);
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::broadcast(opts);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CollectiveExchange>> CollectiveExchange::Connect(
    gloo::rendezvous::Store& store, const std::string& host, Options options) {
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    context->setTimeout(options.timeout);
    context->connectFullMesh(store, device);
    return std::make_unique<CollectiveExchange>(std::move(context), options);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("worker ", options.rank, " of ", options.size,
                                               " could not join the collectives' mesh on '", host,
                                               "': ", e.what()));
  }
}

CollectiveExchange::CollectiveExchange(std::shared_ptr<gloo::Context> context, Options options)
    : context_(std::move(context)), options_(options) {
  thread_ = std::thread([this] { Run(); });
}

CollectiveExchange::~CollectiveExchange() { Stop(); }

void CollectiveExchange::Submit(CollectiveItem item) {
  absl::Status failed;
  {
    absl::MutexLock lock(&mu_);
    const Id id{item.key, item.round, item.stage};
    if (!failed_.ok() || stop_) {
      failed = failed_.ok() ? absl::CancelledError("the collectives stopped (engine shutdown)")
                            : failed_;
    } else if (ready_.count(id) > 0) {
      failed = absl::InternalError(absl::StrCat("round ", item.round, " of '", item.name,
                                                "' was given to the collectives twice"));
    } else {
      ready_.emplace(id, std::move(item));
      ready_order_.push_back(id);
      changed_.SignalAll();
      return;
    }
  }
  item.done(failed);
}

void CollectiveExchange::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    changed_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
  Fail(absl::CancelledError("the collectives stopped (engine shutdown)"));
}

CollectiveExchange::Counts CollectiveExchange::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

void CollectiveExchange::Fail(const absl::Status& reason) {
  std::map<Id, CollectiveItem> left;
  {
    absl::MutexLock lock(&mu_);
    if (failed_.ok()) failed_ = reason;
    changed_.SignalAll();
    left.swap(ready_);
    ready_order_.clear();
  }
  for (auto& [id, item] : left) item.done(reason);
}

std::vector<CollectiveExchange::Entry> CollectiveExchange::NextBatch(bool* stop) {
  absl::MutexLock lock(&mu_);
  // (A CondVar loop, not Await: the condition is read here, after the wait, where ThreadSanitizer
  // sees the lock taken; absl evaluates an Await's condition inside its own, uninstrumented code.)
  const absl::Time deadline = absl::Now() + absl::FromChrono(options_.keepalive);
  while (!stop_ && ready_order_.empty()) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) break;
  }
  std::vector<Entry> batch;
  if (stop_ && ready_order_.empty()) {
    *stop = true;
    return batch;
  }
  size_t bytes = 0;
  for (const Id& id : ready_order_) {
    const CollectiveItem& item = ready_.at(id);
    const size_t item_bytes = item.scheme == proto::SCHEME_ALLREDUCE
                                  ? Length(item) * DTypeSize(item.wire)
                                  : item.payload.size();
    if (!batch.empty() &&
        (bytes + item_bytes > options_.max_fused_bytes || batch.size() >= kMaxBatch)) {
      break;
    }
    bytes += item_bytes;
    batch.push_back(Entry{item.key, item.round, item.stage, static_cast<uint32_t>(item.scheme),
                          item.scheme == proto::SCHEME_ALLREDUCE ? Length(item) : 0,
                          static_cast<uint32_t>(item.wire), item.device.has_value() ? 1u : 0u});
  }
  return batch;
}

absl::StatusOr<std::vector<CollectiveItem>> CollectiveExchange::TakeItems(
    const std::vector<Entry>& batch) {
  std::vector<CollectiveItem> items;
  items.reserve(batch.size());
  // On an error the items taken so far get it too (outside the lock: done may call back).
  struct FailTaken {
    std::vector<CollectiveItem>* items;
    absl::Status status;
    ~FailTaken() {
      if (status.ok()) return;
      for (CollectiveItem& item : *items) item.done(status);
    }
  };
  std::vector<CollectiveItem> taken_on_error;
  FailTaken fail_taken{&taken_on_error, absl::OkStatus()};
  auto failing = [&](absl::Status status) {
    taken_on_error = std::move(items);
    fail_taken.status = status;
    return status;
  };
  const absl::Time deadline = absl::Now() + absl::FromChrono(options_.timeout);
  absl::MutexLock lock(&mu_);  // released before fail_taken runs (declared after it)
  for (const Entry& e : batch) {
    const Id id{e.key, e.round, e.stage};
    bool timed_out = false;
    while (ready_.count(id) == 0 && failed_.ok() && !timed_out) {
      timed_out = changed_.WaitWithDeadline(&mu_, deadline);
    }
    if (ready_.count(id) == 0 && failed_.ok()) {
      return failing(absl::DeadlineExceededError(
          absl::StrCat("worker 0 summed round ", e.round, " of key ", e.key >> 32, ":",
                       e.key & 0xFFFFFFFFu, " stage ", e.stage, ", which worker ", options_.rank,
                       " did not give within ", options_.timeout.count(),
                       " ms (every worker must push each collective tensor every "
                       "round)")));
    }
    if (!failed_.ok()) return failing(failed_);
    auto it = ready_.find(id);
    CollectiveItem item = std::move(it->second);
    ready_.erase(it);
    for (auto o = ready_order_.begin(); o != ready_order_.end(); ++o) {
      if (*o == id) {
        ready_order_.erase(o);
        break;
      }
    }
    const uint32_t on_device = item.device.has_value() ? 1 : 0;
    if (static_cast<uint32_t>(item.scheme) != e.scheme || on_device != e.on_device ||
        (item.scheme == proto::SCHEME_ALLREDUCE &&
         (Length(item) != e.elements || static_cast<uint32_t>(item.wire) != e.wire))) {
      auto where = [](uint32_t device) { return device ? " in device memory" : " in host memory"; };
      const std::string why = absl::StrCat(
          "round ", e.round, " of '", item.name, "': worker 0 has scheme ",
          proto::Scheme_Name(static_cast<proto::Scheme>(e.scheme)), " with ", e.elements,
          " values in ", DTypeName(static_cast<proto::DType>(e.wire)), where(e.on_device),
          ", worker ", options_.rank, " ", proto::Scheme_Name(item.scheme), " with ", Length(item),
          " in ", DTypeName(item.wire), where(on_device));
      items.push_back(std::move(item));
      return failing(absl::InternalError(why));
    }
    items.push_back(std::move(item));
  }
  return items;
}

absl::Status CollectiveExchange::RunBatch(std::vector<CollectiveItem> items) {
  absl::Status status;
  std::vector<absl::StatusOr<CollectiveResult>> results(items.size(),
                                                        absl::InternalError("not run"));
  try {
    status = SumAndGather(items, results);
  } catch (const std::exception& e) {
    status = absl::UnavailableError(
        absl::StrCat("the collectives failed (a worker left, or gloo timed out): ", e.what()));
  }
  // Borrowed values not yet read (a batch that failed early) are released too.
  for (CollectiveItem& item : items) {
    if (item.released) std::exchange(item.released, nullptr)();
  }
  for (size_t i = 0; i < items.size(); ++i) {
    items[i].done(status.ok() ? std::move(results[i]) : absl::StatusOr<CollectiveResult>(status));
  }
  return status;
}

namespace {

// gloo's reduce functions: c = a + b (c is a or b, or neither), n elements.
void SumFloat32(void* c, const void* a, const void* b, size_t n) {
  float* out = static_cast<float*>(c);
  const float* other = static_cast<const float*>(c == a ? b : a);
  if (c != a && c != b) std::memcpy(out, a, n * sizeof(float));
  AddFloat32(out, other, n);
}

// 16-bit values widened, added and rounded back, a block at a time.
template <proto::DType kType>
void Sum16(void* c, const void* a, const void* b, size_t n) {
  constexpr size_t kBlock = 2048;
  float wa[kBlock];
  float wb[kBlock];
  for (size_t at = 0; at < n; at += kBlock) {
    const size_t k = std::min(kBlock, n - at);
    ToFloat32(kType, static_cast<const uint16_t*>(a) + at, wa, k);
    ToFloat32(kType, static_cast<const uint16_t*>(b) + at, wb, k);
    AddFloat32(wa, wb, k);
    FromFloat32(kType, wa, static_cast<uint16_t*>(c) + at, k);
  }
}

// Whether no fp16 value is Inf or NaN (the largest magnitude's bits below the format's bound).
bool HalfsFinite(const uint16_t* h, size_t n) {
  uint16_t largest = 0;
  for (size_t i = 0; i < n; ++i) largest = std::max<uint16_t>(largest, h[i] & 0x7fffu);
  return largest < compress::half::kHalfNonFinite;
}

}  // namespace

int CollectiveExchange::Allreduce(std::vector<CollectiveItem>& items,
                                  const std::vector<size_t>& reduced, proto::DType wire,
                                  std::vector<absl::StatusOr<CollectiveResult>>& results) {
  // The items' values, then one flag per item: the workers that aborted it.
  size_t total = 0;
  std::vector<size_t> lengths;
  for (size_t i : reduced) {
    lengths.push_back(Length(items[i]));
    total += lengths.back();
  }
  const size_t elements = total + reduced.size();
  // fp32 is summed in the result's own buffer; 16-bit types in `narrow`, widened after.
  // (new[] without (): not zeroed, every element is written below.)
  std::shared_ptr<float[]> sums(new float[elements]);
  std::unique_ptr<uint16_t[]> narrow(wire == proto::DTYPE_FLOAT32 ? nullptr
                                                                  : new uint16_t[elements]);
  auto put = [&](const float* src, size_t at, size_t n) {
    if (n == 0) return;  // an empty item's values may have no data()
    if (wire == proto::DTYPE_FLOAT32) {
      std::memcpy(sums.get() + at, src, n * sizeof(float));
    } else {
      FromFloat32(wire, src, narrow.get() + at, n);
    }
  };
  size_t at = 0;
  for (size_t i : reduced) {
    CollectiveItem& item = items[i];
    const size_t n = Length(item);
    put(item.values.empty() ? item.source.data() : item.values.data(), at, n);
    at += n;
    item.values = {};
    item.source = {};
    if (item.released) std::exchange(item.released, nullptr)();
  }
  for (size_t i : reduced) {
    const float flag = items[i].aborted ? 1.0f : 0.0f;
    put(&flag, at++, 1);
  }
  const int w = options_.size;
  auto options = [&](proto::DType type) {
    gloo::AllreduceOptions opts(context_);
    opts.setTag(kAllreduceTag);
    opts.setTimeout(options_.timeout);
    if (elements * DTypeSize(type) < options_.bcube_below_bytes && w > 2 && (w & (w - 1)) == 0) {
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
    }
    return opts;
  };
  auto sum_fp32 = [&] {
    gloo::AllreduceOptions opts = options(proto::DTYPE_FLOAT32);
    opts.setOutput(sums.get(), elements);
    opts.setReduceFunction(&SumFloat32);
    gloo::allreduce(opts);
  };
  int collectives = 1;
  if (wire == proto::DTYPE_FLOAT32) {
    sum_fp32();
  } else {
    // An fp16 sum past 65504 is inf where every value was finite (DDP's fp16 hook divides by
    // W first and loses precision on small values instead). Such a batch is summed again in
    // fp32 from a copy of its values: every worker sees the same inf, so all of them do.
    // bf16 has fp32's range.
    const bool fp16 = wire == proto::DTYPE_FLOAT16;
    if (fp16) fp16_values_.assign(narrow.get(), narrow.get() + elements);  // kept: no new pages
    gloo::AllreduceOptions opts = options(wire);
    opts.setOutput(narrow.get(), elements);
    opts.setReduceFunction(wire == proto::DTYPE_FLOAT16 ? &Sum16<proto::DTYPE_FLOAT16>
                                                        : &Sum16<proto::DTYPE_BFLOAT16>);
    gloo::allreduce(opts);
    if (fp16 && !HalfsFinite(narrow.get(), elements)) {
      ToFloat32(wire, fp16_values_.data(), sums.get(), elements);
      sum_fp32();
      ++collectives;
    } else {
      ToFloat32(wire, narrow.get(), sums.get(), elements);
    }
  }
  at = 0;
  for (size_t j = 0; j < reduced.size(); ++j) {
    const size_t i = reduced[j];
    const float aborted = sums[total + j];
    const size_t length = lengths[j];
    if (aborted > 0) {
      results[i] =
          absl::AbortedError(absl::StrCat(static_cast<int>(aborted),
                                          " worker(s) could not encode this round; it fails on "
                                          "every worker"));
    } else {
      CollectiveResult r;
      r.sums = sums;
      r.offset = at;
      r.count = length;
      results[i] = std::move(r);
    }
    at += length;
  }
  return collectives;
}

absl::Status CollectiveExchange::SumAndGather(
    std::vector<CollectiveItem>& items, std::vector<absl::StatusOr<CollectiveResult>>& results) {
  const auto timeout = options_.timeout;
  std::map<proto::DType, std::vector<size_t>> reduced;  // by wire type
  std::vector<size_t> gathered;
  std::vector<size_t> on_device;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].device.has_value()) {
      on_device.push_back(i);
    } else if (items[i].scheme == proto::SCHEME_ALLREDUCE) {
      reduced[items[i].wire].push_back(i);
    } else {
      gathered.push_back(i);
    }
  }
  int64_t collectives = 0;
  int64_t fp16_overflows = 0;
  if (!on_device.empty()) {
    // A device sum that failed on one worker may have left the others' undone: the
    // collectives end, as after a gloo error.
    if (absl::Status s = SumOnDevice(items, on_device, results); !s.ok()) return s;
    ++collectives;
  }
  for (const auto& [wire, indices] : reduced) {
    const int run = Allreduce(items, indices, wire, results);
    collectives += run;
    fp16_overflows += run - 1;
  }
  if (!gathered.empty()) {
    const size_t k = gathered.size();
    const size_t w = static_cast<size_t>(options_.size);
    std::vector<int64_t> mine(k);
    for (size_t j = 0; j < k; ++j) {
      const CollectiveItem& item = items[gathered[j]];
      mine[j] = item.aborted ? -1 : static_cast<int64_t>(item.payload.size());
      if (item.aborted) items[gathered[j]].payload.clear();
    }
    std::vector<int64_t> sizes(k * w);
    {
      gloo::AllgatherOptions opts(context_);
      opts.setInput(mine.data(), k);
      opts.setOutput(sizes.data(), k * w);
      opts.setTag(kSizesTag);
      opts.setTimeout(timeout);
      gloo::allgather(opts);
    }
    // -1: that worker aborted the item (it sends nothing for it).
    std::vector<size_t> per_rank(w, 0);
    std::vector<int> aborted(k, 0);
    for (size_t r = 0; r < w; ++r) {
      for (size_t j = 0; j < k; ++j) {
        if (sizes[r * k + j] < 0) {
          ++aborted[j];
          sizes[r * k + j] = 0;
        }
        per_rank[r] += static_cast<size_t>(sizes[r * k + j]);
      }
    }
    std::vector<uint8_t> input;
    input.reserve(per_rank[static_cast<size_t>(options_.rank)]);
    for (size_t j = 0; j < k; ++j) {
      const std::vector<uint8_t>& p = items[gathered[j]].payload;
      input.insert(input.end(), p.begin(), p.end());
    }
    auto all = std::make_shared<std::vector<uint8_t>>(
        std::accumulate(per_rank.begin(), per_rank.end(), size_t{0}));
    {
      gloo::AllgathervOptions opts(context_);
      opts.setInput(input.data(), input.size());
      opts.setOutput(all->data(), per_rank);
      opts.setTag(kGatherTag);
      opts.setTimeout(timeout);
      gloo::allgatherv(opts);
    }
    collectives += 2;
    size_t base = 0;
    std::vector<std::vector<absl::Span<const uint8_t>>> views(
        k, std::vector<absl::Span<const uint8_t>>(w));
    for (size_t r = 0; r < w; ++r) {
      size_t at = base;
      for (size_t j = 0; j < k; ++j) {
        const size_t n = static_cast<size_t>(sizes[r * k + j]);
        views[j][r] = absl::MakeConstSpan(all->data() + at, n);
        at += n;
      }
      base += per_rank[r];
    }
    for (size_t j = 0; j < k; ++j) {
      if (aborted[j] > 0) {
        results[gathered[j]] = absl::AbortedError(absl::StrCat(
            aborted[j], " worker(s) could not encode this round; it fails on every worker"));
        continue;
      }
      CollectiveResult r;
      r.gathered = all;
      r.payloads = std::move(views[j]);
      results[gathered[j]] = std::move(r);
    }
  }
  {
    absl::MutexLock lock(&mu_);
    ++counts_.batches;
    counts_.items += static_cast<int64_t>(items.size());
    counts_.collectives += collectives;
    counts_.fp16_overflows += fp16_overflows;
    counts_.device_items += static_cast<int64_t>(on_device.size());
  }
  return absl::OkStatus();
}

absl::Status CollectiveExchange::SumOnDevice(
    std::vector<CollectiveItem>& items, const std::vector<size_t>& summed,
    std::vector<absl::StatusOr<CollectiveResult>>& results) {
  absl::Status status;
  if (options_.device_summer == nullptr) {
    status = absl::FailedPreconditionError(
        absl::StrCat("'", items[summed[0]].name, "' came as device values, but worker ",
                     options_.rank, " sums none in device memory (an engine built without NCCL)"));
  } else {
    // Every worker took the batch before any waits in NCCL, which has no timeout: one that
    // refused it (TakeItems) has left, and this allreduce throws after options_.timeout.
    float present = 1.0f;
    gloo::AllreduceOptions agree(context_);
    agree.setTag(kDeviceTag);
    agree.setTimeout(options_.timeout);
    agree.setOutput(&present, 1);
    agree.setReduceFunction(&SumFloat32);
    gloo::allreduce(agree);
    std::vector<DeviceValues> values;
    for (size_t i : summed) values.push_back(*items[i].device);
    gloo::Context* context = context_.get();
    status = options_.device_summer->SumInPlace(values, [&](std::string* bytes) {
      Broadcast(context, reinterpret_cast<uint8_t*>(bytes->data()), bytes->size(), kDeviceTag,
                options_.timeout);
    });
  }
  if (!status.ok()) return status;
  for (size_t i : summed) {
    CollectiveResult r;
    r.count = items[i].device->count;
    r.in_place = true;
    results[i] = std::move(r);
  }
  return absl::OkStatus();
}

void CollectiveExchange::Run() {
  gloo::Context* context = context_.get();
  const bool leader = options_.rank == 0;
  while (true) {
    std::vector<Entry> batch;
    try {
      // The header and the first entries in one broadcast.
      struct Schedule {
        Header header;
        Entry entries[kInlineEntries];
      } schedule;
      Header& header = schedule.header;
      if (leader) {
        bool stop = false;
        batch = NextBatch(&stop);
        header.count = stop ? kStop : static_cast<uint32_t>(batch.size());
        if (!batch.empty()) {  // (a keepalive's batch has no data() to copy from)
          std::memcpy(schedule.entries, batch.data(),
                      std::min(batch.size(), kInlineEntries) * sizeof(Entry));
        }
      }
      // A follower waits for the leader's next batch, which comes within keepalive.
      Broadcast(context, reinterpret_cast<uint8_t*>(&schedule), sizeof(schedule), kHeaderTag,
                leader ? options_.timeout : options_.leader_silence);
      if (header.magic != kMagic || (header.count > kMaxBatch && header.count != kStop)) {
        throw std::runtime_error(absl::StrCat("a batch header with magic ", header.magic, " and ",
                                              header.count, " entries"));
      }
      if (header.count == kStop) {
        Fail(absl::CancelledError("worker 0 stopped the collectives (its engine shut down)"));
        return;
      }
      if (!leader) {
        absl::MutexLock lock(&mu_);
        if (stop_) return;  // Stop() fails what is left
      }
      if (header.count == 0) continue;
      if (!leader) {
        batch.resize(header.count);
        std::memcpy(batch.data(), schedule.entries,
                    std::min(batch.size(), kInlineEntries) * sizeof(Entry));
      }
      if (batch.size() > kInlineEntries) {
        Broadcast(context, batch.data() + kInlineEntries, batch.size() - kInlineEntries,
                  kEntriesTag, options_.timeout);
      }
      absl::StatusOr<std::vector<CollectiveItem>> items = TakeItems(batch);
      if (!items.ok()) {
        Fail(items.status());
        return;
      }
      if (absl::Status s = RunBatch(*std::move(items)); !s.ok()) {
        Fail(s);
        return;
      }
    } catch (const std::exception& e) {
      bool stopping = false;
      bool waiting = false;
      {
        absl::MutexLock lock(&mu_);
        stopping = stop_;
        waiting = !ready_.empty();
      }
      // A worker that leaves at the job's end (its engine shut down first) is no error unless
      // something here still waits for the collectives.
      if (waiting && !stopping) {
        BC_LOG_ERROR("collectives failed on worker ", options_.rank, ": ", e.what());
      } else if (!stopping) {
        BC_LOG_INFO("the collectives ended on worker ", options_.rank,
                    " (a worker left): ", e.what());
      }
      Fail(
          absl::UnavailableError(absl::StrCat("the collectives failed (a worker left, or gloo "
                                              "timed out): ",
                                              e.what())));
      return;
    }
  }
}

}  // namespace bytecomp::worker
