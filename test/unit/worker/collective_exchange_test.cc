// CollectiveExchange (worker/src/collective_exchange.h) with gloo for real: W ranks on threads,
// gloo's full mesh on loopback through its in-process HashStore. Items are given in different
// orders on different ranks (the leader's batch decides), sums must be exact, many small
// items fuse into few collectives, and a rank that aborts an item fails it everywhere. Device
// values go to a DeviceSummer (here a fake over host memory standing in for NCCL's).
#include "collective_exchange.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"

namespace bytecomp::worker {
namespace {

using Exchanges = std::vector<std::unique_ptr<CollectiveExchange>>;

Exchanges Connect(int size, std::chrono::milliseconds timeout = std::chrono::seconds(20),
                  std::function<std::shared_ptr<DeviceSummer>(int rank)> summer = nullptr) {
  gloo::rendezvous::HashStore store;
  Exchanges exchanges(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      CollectiveExchange::Options options;
      options.rank = r;
      options.size = size;
      options.timeout = timeout;
      if (summer) options.device_summer = summer(r);
      auto joined = CollectiveExchange::Connect(store, "127.0.0.1", options);
      ASSERT_TRUE(joined.ok()) << joined.status();
      exchanges[static_cast<size_t>(r)] = *std::move(joined);
    });
  }
  for (auto& t : threads) t.join();
  return exchanges;
}

// The value rank r gives for element i of tensor t: small integers, so fp32 sums are exact.
float Value(int r, int t, size_t i) { return static_cast<float>((r + 1) * (t + 1) + i % 7); }

struct Outcome {
  std::promise<absl::StatusOr<std::vector<float>>> promise;
};

// Submits tensor t's allreduce item on rank r; the future holds its sum.
std::future<absl::StatusOr<std::vector<float>>> SubmitSum(CollectiveExchange& ex, int r, int t,
                                                          size_t n, bool aborted = false) {
  auto outcome = std::make_shared<Outcome>();
  auto future = outcome->promise.get_future();
  CollectiveItem item;
  item.key = static_cast<uint64_t>(t) << 32;
  item.round = 0;
  item.scheme = proto::SCHEME_ALLREDUCE;
  item.name = "t" + std::to_string(t);
  item.values.resize(n);
  for (size_t i = 0; i < n; ++i) item.values[i] = Value(r, t, i);
  item.aborted = aborted;
  item.done = [outcome](absl::StatusOr<CollectiveResult> result) {
    if (!result.ok()) return outcome->promise.set_value(result.status());
    absl::Span<const float> s = result->sum();
    outcome->promise.set_value(std::vector<float>(s.begin(), s.end()));
  };
  ex.Submit(std::move(item));
  return future;
}

TEST(CollectiveExchangeTest, ManySmallTensorsInDifferentOrdersSumExactlyInFewCollectives) {
  constexpr int kWorkers = 3;
  constexpr int kTensors = 1000;
  Exchanges ex = Connect(kWorkers);
  std::vector<std::vector<std::future<absl::StatusOr<std::vector<float>>>>> sums(kWorkers);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorkers; ++r) {
    threads.emplace_back([&, r] {
      std::vector<int> order(kTensors);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), std::mt19937(r));  // each rank its own order
      sums[r].resize(kTensors);
      for (int t : order) sums[r][t] = SubmitSum(*ex[r], r, t, 1 + t % 50);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kWorkers; ++r) {
    for (int t = 0; t < kTensors; ++t) {
      absl::StatusOr<std::vector<float>> got = sums[r][t].get();
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->size(), static_cast<size_t>(1 + t % 50));
      for (size_t i = 0; i < got->size(); ++i) {
        float want = 0;
        for (int q = 0; q < kWorkers; ++q) want += Value(q, t, i);
        ASSERT_EQ((*got)[i], want) << "rank " << r << " tensor " << t << " element " << i;
      }
    }
  }
  const CollectiveExchange::Counts counts = ex[0]->counts();
  EXPECT_EQ(counts.items, kTensors);
  // Fusion: one allreduce carries every item ready when the batch is cut.
  EXPECT_LT(counts.collectives, kTensors / 5) << counts.batches << " batches";
  for (auto& e : ex) e->Stop();
}

TEST(CollectiveExchangeTest, WireTypesAndBorrowedValuesSumExactlyOnRingAndBcube) {
  constexpr int kWorkers = 4;  // a power of two: small batches run bcube, large ones the ring
  Exchanges ex = Connect(kWorkers);
  const std::vector<size_t> sizes = {5, 300, 200000};  // 200000 fp32: past bcube_below_bytes
  const std::vector<proto::DType> wires = {proto::DTYPE_FLOAT32, proto::DTYPE_FLOAT16,
                                           proto::DTYPE_BFLOAT16};
  std::vector<std::vector<float>> borrowed(kWorkers);
  std::vector<std::future<absl::StatusOr<std::vector<float>>>> got;
  std::atomic<int> released{0};
  for (int r = 0; r < kWorkers; ++r) {
    int t = 0;
    for (size_t n : sizes) {
      for (proto::DType wire : wires) {
        auto outcome = std::make_shared<Outcome>();
        got.push_back(outcome->promise.get_future());
        CollectiveItem item;
        item.key = static_cast<uint64_t>(t) << 32;
        item.scheme = proto::SCHEME_ALLREDUCE;
        item.name = "w" + std::to_string(t);
        item.wire = wire;
        std::vector<float> values(n);
        for (size_t i = 0; i < n; ++i) values[i] = Value(r, t, i);
        if (wire == proto::DTYPE_FLOAT32 && n == sizes.back()) {
          borrowed[r] = std::move(values);
          item.source = borrowed[r];
          item.released = [&released] { ++released; };
        } else {
          item.values = std::move(values);
        }
        item.done = [outcome](absl::StatusOr<CollectiveResult> result) {
          if (!result.ok()) return outcome->promise.set_value(result.status());
          absl::Span<const float> s = result->sum();
          outcome->promise.set_value(std::vector<float>(s.begin(), s.end()));
        };
        ex[r]->Submit(std::move(item));
        ++t;
      }
    }
  }
  for (int r = 0; r < kWorkers; ++r) {
    int t = 0;
    for (size_t n : sizes) {
      for (size_t w = 0; w < wires.size(); ++w, ++t) {
        absl::StatusOr<std::vector<float>> sum = got[r * 9 + t].get();
        ASSERT_TRUE(sum.ok()) << sum.status();
        ASSERT_EQ(sum->size(), n);
        for (size_t i = 0; i < n; ++i) {
          float want = 0;
          for (int q = 0; q < kWorkers; ++q) want += Value(q, t, i);
          ASSERT_EQ((*sum)[i], want) << "tensor " << t << " element " << i;
        }
      }
    }
  }
  EXPECT_EQ(released.load(), kWorkers);  // each borrowed tensor was read, then let go
  for (auto& e : ex) e->Stop();
}

// fp16 values whose sum passes fp16's largest (65504) are summed again in fp32, on every rank:
// the sums are exact, not inf. A batch that stays in range takes one allreduce.
TEST(CollectiveExchangeTest, AnFp16SumThatOverflowsIsSummedAgainInFp32) {
  constexpr int kWorkers = 2;
  Exchanges ex = Connect(kWorkers);
  auto submit = [&](int r, int t, float value, size_t n) {
    auto outcome = std::make_shared<Outcome>();
    auto future = outcome->promise.get_future();
    CollectiveItem item;
    item.key = static_cast<uint64_t>(t) << 32;
    item.scheme = proto::SCHEME_ALLREDUCE;
    item.name = "h" + std::to_string(t);
    item.wire = proto::DTYPE_FLOAT16;
    item.values.assign(n, value);
    item.values[0] = -value;  // a negative sum past -65504 too
    item.done = [outcome](absl::StatusOr<CollectiveResult> result) {
      if (!result.ok()) return outcome->promise.set_value(result.status());
      absl::Span<const float> s = result->sum();
      outcome->promise.set_value(std::vector<float>(s.begin(), s.end()));
    };
    ex[r]->Submit(std::move(item));
    return future;
  };
  // 40000 is an fp16 value (a multiple of 32 there); two of them are 80000.
  for (const auto& [t, value] : std::vector<std::pair<int, float>>{{0, 40000.0f}, {1, 30000.0f}}) {
    std::vector<std::future<absl::StatusOr<std::vector<float>>>> got;
    for (int r = 0; r < kWorkers; ++r) got.push_back(submit(r, t, value, 1000));
    for (auto& f : got) {
      absl::StatusOr<std::vector<float>> sum = f.get();
      ASSERT_TRUE(sum.ok()) << sum.status();
      EXPECT_EQ((*sum)[0], -2 * value);
      for (size_t i = 1; i < sum->size(); ++i) ASSERT_EQ((*sum)[i], 2 * value) << i;
    }
  }
  for (auto& e : ex) {
    const CollectiveExchange::Counts c = e->counts();
    EXPECT_EQ(c.fp16_overflows, 1);  // 80000 overflowed; 60000 did not
    EXPECT_EQ(c.collectives, c.batches + 1);
    e->Stop();
  }
}

TEST(CollectiveExchangeTest, AllgatherGivesEveryRanksPayload) {
  constexpr int kWorkers = 3;
  Exchanges ex = Connect(kWorkers);
  std::vector<std::future<std::vector<std::string>>> got;
  for (int r = 0; r < kWorkers; ++r) {
    auto promise = std::make_shared<std::promise<std::vector<std::string>>>();
    got.push_back(promise->get_future());
    CollectiveItem item;
    item.key = 7;
    item.scheme = proto::SCHEME_ALLGATHER;
    item.name = "g";
    const std::string mine(static_cast<size_t>(10 * (r + 1)), static_cast<char>('a' + r));
    item.payload.assign(mine.begin(), mine.end());
    item.done = [promise](absl::StatusOr<CollectiveResult> result) {
      std::vector<std::string> payloads;
      if (result.ok()) {
        for (auto p : result->payloads) payloads.emplace_back(p.begin(), p.end());
      }
      promise->set_value(payloads);
    };
    ex[r]->Submit(std::move(item));
  }
  for (int r = 0; r < kWorkers; ++r) {
    std::vector<std::string> payloads = got[r].get();
    ASSERT_EQ(payloads.size(), static_cast<size_t>(kWorkers));
    for (int q = 0; q < kWorkers; ++q) {
      EXPECT_EQ(payloads[q], std::string(static_cast<size_t>(10 * (q + 1)), 'a' + q));
    }
  }
  for (auto& e : ex) e->Stop();
}

TEST(CollectiveExchangeTest, AnItemAbortedOnOneRankFailsOnEveryRankAndTheNextRoundSums) {
  constexpr int kWorkers = 2;
  Exchanges ex = Connect(kWorkers);
  auto a0 = SubmitSum(*ex[0], 0, 1, 8);
  auto a1 = SubmitSum(*ex[1], 1, 1, 8, /*aborted=*/true);
  for (auto* f : {&a0, &a1}) {
    absl::StatusOr<std::vector<float>> got = f->get();
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kAborted);
    EXPECT_NE(got.status().message().find("could not encode"), std::string::npos);
  }
  auto b0 = SubmitSum(*ex[0], 0, 2, 8);
  auto b1 = SubmitSum(*ex[1], 1, 2, 8);
  ASSERT_TRUE(b0.get().ok());
  ASSERT_TRUE(b1.get().ok());
  for (auto& e : ex) e->Stop();
}

TEST(CollectiveExchangeTest, AnItemMissingOnAFollowerFailsTheCollectivesNamingIt) {
  Exchanges ex = Connect(2, std::chrono::milliseconds(1500));
  auto only_leader = SubmitSum(*ex[0], 0, 3, 4);
  // Rank 1 never gives tensor 3: it times out waiting for it, and ends the collectives.
  absl::StatusOr<std::vector<float>> got = only_leader.get();
  ASSERT_FALSE(got.ok());
  auto later = SubmitSum(*ex[1], 1, 4, 4);
  absl::StatusOr<std::vector<float>> refused = later.get();
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("did not give"), std::string::npos) << refused.status();
  for (auto& e : ex) e->Stop();
}

TEST(CollectiveExchangeTest, StopEndsEveryRankAndFailsLaterItems) {
  Exchanges ex = Connect(2);
  ex[0]->Stop();  // the leader tells the other
  auto late = SubmitSum(*ex[1], 1, 5, 4);
  absl::StatusOr<std::vector<float>> got = late.get();
  ASSERT_FALSE(got.ok());
  ex[1]->Stop();
}

// NCCL's part, over host memory: the W ranks' summers meet at each call, the last to come sums
// every rank's buffers in place (and averages where asked); each rank's first call receives
// worker 0's broadcast, as a communicator's id. Each rank records the keys it summed, in order.
class FakeDeviceSummers {
 public:
  explicit FakeDeviceSummers(int size) : size_(size), order_(static_cast<size_t>(size)) {}

  class Rank final : public DeviceSummer {
   public:
    Rank(FakeDeviceSummers* all, int rank) : all_(all), rank_(rank) {}
    absl::Status SumInPlace(const std::vector<DeviceValues>& items,
                            const BroadcastFromLeader& broadcast) override {
      if (!joined_) {
        std::string id = rank_ == 0 ? std::string("id of worker 0") : std::string(14, '?');
        broadcast(&id);
        if (id != "id of worker 0") return absl::InternalError("broadcast gave '" + id + "'");
        joined_ = true;
      }
      return all_->Meet(rank_, items);
    }

   private:
    FakeDeviceSummers* all_;
    int rank_;
    bool joined_ = false;
  };

  std::shared_ptr<DeviceSummer> For(int rank) { return std::make_shared<Rank>(this, rank); }
  // The data pointers each rank summed, in its calls' order.
  std::vector<std::vector<void*>> order() {
    std::lock_guard<std::mutex> lock(mu_);
    return order_;
  }

 private:
  absl::Status Meet(int rank, const std::vector<DeviceValues>& items) {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t call = calls_[static_cast<size_t>(rank)]++;
    for (const DeviceValues& v : items) order_[static_cast<size_t>(rank)].push_back(v.data);
    pending_[call].push_back(items);
    if (static_cast<int>(pending_[call].size()) == size_) {
      const auto& all = pending_[call];
      for (size_t j = 0; j < items.size(); ++j) {
        std::vector<float> sum(items[j].count, 0.0f);
        for (const auto& rank_items : all) {
          const float* x = static_cast<const float*>(rank_items[j].data);
          for (size_t i = 0; i < sum.size(); ++i) sum[i] += x[i];
        }
        for (const auto& rank_items : all) {
          float* x = static_cast<float*>(rank_items[j].data);
          for (size_t i = 0; i < sum.size(); ++i) {
            x[i] = rank_items[j].average ? sum[i] / static_cast<float>(size_) : sum[i];
          }
        }
      }
      done_.insert(call);
      changed_.notify_all();
    }
    changed_.wait(lock, [&] { return done_.count(call) > 0; });
    return absl::OkStatus();
  }

  const int size_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<int, uint64_t> calls_;
  std::map<uint64_t, std::vector<std::vector<DeviceValues>>> pending_;
  std::set<uint64_t> done_;
  std::vector<std::vector<void*>> order_;
};

// Submits tensor t's allreduce as device values (`data`, host memory for the fake) on `ex`.
std::future<absl::StatusOr<CollectiveResult>> SubmitDevice(CollectiveExchange& ex, int t,
                                                           std::vector<float>& data, bool average) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<CollectiveResult>>>();
  auto future = promise->get_future();
  CollectiveItem item;
  item.key = static_cast<uint64_t>(t) << 32;
  item.scheme = proto::SCHEME_ALLREDUCE;
  item.name = "dev" + std::to_string(t);
  DeviceValues values;
  values.data = data.data();
  values.count = data.size();
  values.average = average;
  item.device = values;
  item.done = [promise](absl::StatusOr<CollectiveResult> result) {
    promise->set_value(std::move(result));
  };
  ex.Submit(std::move(item));
  return future;
}

TEST(CollectiveExchangeTest, DeviceValuesAreSummedInPlaceInTheLeadersOrderBesideHostValues) {
  constexpr int kWorkers = 3, kTensors = 6;
  FakeDeviceSummers summers(kWorkers);
  Exchanges ex =
      Connect(kWorkers, std::chrono::seconds(20), [&](int rank) { return summers.For(rank); });
  for (auto& e : ex) EXPECT_TRUE(e->sums_device_memory());
  std::vector<std::vector<std::vector<float>>> data(kWorkers);
  std::vector<std::future<absl::StatusOr<CollectiveResult>>> device;
  std::vector<std::future<absl::StatusOr<std::vector<float>>>> host;
  for (int r = 0; r < kWorkers; ++r) {
    data[r].resize(kTensors);
    for (int t = 0; t < kTensors; ++t) {
      data[r][t].resize(100 + t);
      for (size_t i = 0; i < data[r][t].size(); ++i) data[r][t][i] = Value(r, t, i);
    }
  }
  // Each rank gives its device tensors in another order, with a host tensor among them.
  for (int r = 0; r < kWorkers; ++r) {
    std::vector<int> order(kTensors);
    std::iota(order.begin(), order.end(), 0);
    std::rotate(order.begin(), order.begin() + r, order.end());
    for (int t : order) {
      device.push_back(SubmitDevice(*ex[r], t, data[r][t], /*average=*/t % 2 == 1));
      if (t == 2) host.push_back(SubmitSum(*ex[r], r, 100, 16));
    }
  }
  for (auto& f : device) {
    absl::StatusOr<CollectiveResult> got = f.get();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(got->in_place);
  }
  for (auto& f : host) ASSERT_TRUE(f.get().ok());
  for (int r = 0; r < kWorkers; ++r) {
    for (int t = 0; t < kTensors; ++t) {
      for (size_t i = 0; i < data[r][t].size(); ++i) {
        float want = 0;
        for (int q = 0; q < kWorkers; ++q) want += Value(q, t, i);
        if (t % 2 == 1) want /= kWorkers;
        ASSERT_EQ(data[r][t][i], want) << "rank " << r << " tensor " << t << " element " << i;
      }
    }
  }
  // Every rank summed the tensors in the same order (the leader's).
  const std::vector<std::vector<void*>> order = summers.order();
  for (int r = 0; r < kWorkers; ++r) {
    ASSERT_EQ(order[r].size(), static_cast<size_t>(kTensors));
    for (int j = 0; j < kTensors; ++j) {
      const auto t0 = std::find_if(data[0].begin(), data[0].end(),
                                   [&](auto& d) { return d.data() == order[0][j]; }) -
                      data[0].begin();
      EXPECT_EQ(order[r][j], data[r][t0].data()) << "rank " << r << " position " << j;
    }
  }
  EXPECT_EQ(ex[0]->counts().device_items, kTensors);
  for (auto& e : ex) e->Stop();
}

TEST(CollectiveExchangeTest, DeviceValuesOnOneRankAndHostValuesOnAnotherFailNamingBoth) {
  FakeDeviceSummers summers(2);
  Exchanges ex =
      Connect(2, std::chrono::milliseconds(1500), [&](int rank) { return summers.For(rank); });
  std::vector<float> mine(8, 1.0f);
  auto on_device = SubmitDevice(*ex[0], 5, mine, false);
  auto on_host = SubmitSum(*ex[1], 1, 5, 8);
  absl::StatusOr<CollectiveResult> a = on_device.get();
  absl::StatusOr<std::vector<float>> b = on_host.get();
  ASSERT_FALSE(a.ok());
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("in device memory, worker 1"), std::string::npos)
      << b.status();
  EXPECT_NE(b.status().message().find("in host memory"), std::string::npos) << b.status();
  for (auto& e : ex) e->Stop();
}

TEST(CollectiveExchangeTest, DeviceValuesWithoutADeviceSummerEndTheCollectivesNamingWhy) {
  Exchanges ex = Connect(2);
  EXPECT_FALSE(ex[0]->sums_device_memory());
  std::vector<float> d0(8, 1.0f), d1(8, 2.0f);
  auto a = SubmitDevice(*ex[0], 6, d0, false);
  auto b = SubmitDevice(*ex[1], 6, d1, false);
  for (auto* f : {&a, &b}) {
    absl::StatusOr<CollectiveResult> got = f->get();
    ASSERT_FALSE(got.ok());
    EXPECT_NE(got.status().message().find("'dev6' came as device values"), std::string::npos)
        << got.status();
    EXPECT_NE(got.status().message().find("built without NCCL"), std::string::npos);
  }
  for (auto& e : ex) e->Stop();
}

}  // namespace
}  // namespace bytecomp::worker
