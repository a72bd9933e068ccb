#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "bytecomp/compress.h"
#include "bytecomp/worker/device_backend.h"
#include "bytecomp/worker/emulated_device.h"
#include "gtest/gtest.h"

namespace bytecomp::worker {
namespace {

DeviceStream Stream(uintptr_t id) { return reinterpret_cast<DeviceStream>(id); }

TEST(EmulatedDevice, CopiesWaitForTheWorkQueuedBeforeThem) {
  EmulatedDeviceBackend device;
  std::vector<float> gradient(1000, 0.0f), host(1000, -1.0f);
  // A slow "kernel" produces the gradient; the copy queued after it must see its result.
  ASSERT_TRUE(device
                  .QueueWork(0, Stream(1),
                             [&] {
                               std::this_thread::sleep_for(std::chrono::milliseconds(50));
                               for (size_t i = 0; i < gradient.size(); ++i)
                                 gradient[i] = static_cast<float>(i);
                             })
                  .ok());
  ASSERT_TRUE(device.CopyToHost(0, Stream(1), host.data(), gradient.data(), 4000).ok());
  std::promise<std::vector<float>> seen;
  ASSERT_TRUE(device.WhenReached(0, Stream(1), [&] { seen.set_value(host); }).ok());
  const std::vector<float> at_callback = seen.get_future().get();
  for (size_t i = 0; i < at_callback.size(); ++i) ASSERT_EQ(at_callback[i], static_cast<float>(i));
}

TEST(EmulatedDevice, CallbacksRunInStreamOrderOffTheStreamThread) {
  EmulatedDeviceBackend device;
  std::mutex mu;
  std::vector<int> order;
  std::thread::id stream_thread;
  ASSERT_TRUE(
      device.QueueWork(0, Stream(2), [&] { stream_thread = std::this_thread::get_id(); }).ok());
  std::promise<void> last;
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(device
                    .QueueWork(0, Stream(2),
                               [&mu, &order, i] {
                                 std::lock_guard<std::mutex> lock(mu);
                                 order.push_back(2 * i);
                               })
                    .ok());
    ASSERT_TRUE(device
                    .WhenReached(0, Stream(2),
                                 [&, i] {
                                   // Off the stream's thread, so a callback may wait for the device
                                   // without deadlock.
                                   EXPECT_NE(std::this_thread::get_id(), stream_thread);
                                   ASSERT_TRUE(device.RunAndWait(0, Stream(2), [] {}).ok());
                                   {
                                     std::lock_guard<std::mutex> lock(mu);
                                     order.push_back(2 * i + 1);
                                   }
                                   if (i == 199) last.set_value();
                                 })
                    .ok());
  }
  last.get_future().wait();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(order.size(), 400u);
  // Each callback comes after the work queued before it, and callbacks keep their order.
  std::vector<int> callbacks, works;
  for (size_t k = 0; k < order.size(); ++k) {
    (order[k] % 2 ? callbacks : works).push_back(order[k]);
    if (order[k] % 2) {
      const auto work = std::find(order.begin(), order.end(), order[k] - 1);
      EXPECT_LT(work - order.begin(), static_cast<std::ptrdiff_t>(k));
    }
  }
  EXPECT_TRUE(std::is_sorted(callbacks.begin(), callbacks.end()));
  EXPECT_TRUE(std::is_sorted(works.begin(), works.end()));
}

TEST(EmulatedDevice, EncodeReadsTheGradientAfterTheStreamProducedIt) {
  EmulatedDeviceBackend device;
  auto codec = device.CreateCodec(0, "topk", {{"ratio", "0.1"}}, "residual", {});
  ASSERT_TRUE(codec.ok()) << codec.status();
  auto cpu = compress::CreateCodec("topk", {{"ratio", "0.1"}});
  auto memory = compress::CreateMemory("residual");
  ASSERT_TRUE(cpu.ok() && memory.ok());
  const size_t n = 1003;
  std::vector<float> gradient(n, std::nanf("")), compensated, decoded;
  std::vector<uint8_t> out((*codec)->MaxEncodedBytes(n)), expected(out.size());
  for (uint64_t round = 0; round < 3; ++round) {
    std::fill(gradient.begin(), gradient.end(), std::nanf(""));
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i) values[i] = std::sin(static_cast<float>(i * (round + 1)));
    ASSERT_TRUE(device
                    .QueueWork(0, Stream(3),
                               [&] {
                                 std::this_thread::sleep_for(std::chrono::milliseconds(20));
                                 gradient = values;
                               })
                    .ok());
    compress::CodecContext ctx;
    ctx.key = 7;
    ctx.round = round;
    absl::StatusOr<size_t> bytes =
        (*codec)->Encode(gradient.data(), n, ctx, out.data(), out.size(), Stream(3));
    ASSERT_TRUE(bytes.ok()) << bytes.status();  // NaN input would be an error
    absl::StatusOr<size_t> want = compress::EncodeWithMemory(
        **cpu, memory->get(), values, ctx, absl::MakeSpan(expected), compensated, decoded);
    ASSERT_TRUE(want.ok());
    ASSERT_EQ(*bytes, *want);
    EXPECT_EQ(std::memcmp(out.data(), expected.data(), *bytes), 0) << "round " << round;
    std::vector<float> back(n), cpu_back(n);
    ASSERT_TRUE((*codec)->Decode(out.data(), *bytes, ctx, back.data(), n, Stream(3)).ok());
    ASSERT_TRUE(
        (*cpu)
            ->Decode(absl::MakeConstSpan(expected.data(), *want), ctx, absl::MakeSpan(cpu_back))
            .ok());
    EXPECT_EQ(back, cpu_back);
  }
  EXPECT_EQ(device.stats().encodes, 3);
  EXPECT_EQ(device.stats().decodes, 3);
}

TEST(EmulatedDevice, OffersTheGpuCodecsOnly) {
  EmulatedDeviceBackend device;
  EXPECT_EQ(device.CreateCodec(0, "nosuchcodec", {}, "", {}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(device.CreateCodec(0, "artopk", {}, "residual", {}).ok());
  EXPECT_EQ(device.CreateCodec(0, "signum", {}, "residual", {}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(device.CreateCodec(0, "dgc", {}, "dgc_momentum", {}).ok());
  EXPECT_EQ(device.CreateCodec(8, "fp16", {}, "", {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DeviceBackend, WithoutEmulationTheErrorSaysWhy) {
  absl::StatusOr<std::unique_ptr<DeviceBackend>> backend = MakeDeviceBackend("");
  if (CudaBackendBuilt()) {
    if (backend.ok()) GTEST_SKIP() << "a CUDA device is present";
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(backend.status().message().find("no usable CUDA device"), absl::string_view::npos)
        << backend.status();
    EXPECT_NE(backend.status().message().find("cudaGetDeviceCount"), absl::string_view::npos);
  } else {
    ASSERT_FALSE(backend.ok());
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(backend.status().message().find("built without CUDA"), absl::string_view::npos)
        << backend.status();
  }
  absl::StatusOr<std::unique_ptr<DeviceBackend>> bogus = MakeDeviceBackend("opencl");
  ASSERT_FALSE(bogus.ok());
  EXPECT_NE(bogus.status().message().find("auto, cuda, emulated"), absl::string_view::npos);
  absl::StatusOr<std::unique_ptr<DeviceBackend>> emulated = MakeDeviceBackend("emulated");
  ASSERT_TRUE(emulated.ok());
  EXPECT_EQ((*emulated)->name(), "emulated");
}

}  // namespace
}  // namespace bytecomp::worker
