#include "nccl_local_reducer.h"

#include <cuda_runtime_api.h>

#include <array>
#include <vector>

#include "absl/strings/str_cat.h"

namespace bytecomp::worker {
namespace {

absl::Status CudaError(const std::string& what, cudaError_t rc) {
  return absl::InternalError(absl::StrCat("CUDA ", what, ": ", cudaGetErrorString(rc)));
}

// A collective's number travels as four fp32 values of 16 bits each (exact in fp32).
using Number = std::array<float, 4>;
void Encode(uint64_t n, Number* out) {
  for (int i = 0; i < 4; ++i) (*out)[i] = static_cast<float>((n >> (16 * i)) & 0xffff);
}
uint64_t Decode(const Number& in) {
  uint64_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint64_t>(in[i]) << (16 * i);
  return n;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclLocalReducerAdapter>> NcclLocalReducerAdapter::Create(
    std::unique_ptr<LocalReducer> control, std::unique_ptr<NcclLocalReducer> nccl, int device) {
  if (control == nullptr || nccl == nullptr) {
    return absl::InvalidArgumentError(
        "NCCL local reducer: needs a control plane and a communicator");
  }
  if (control->local_rank() != nccl->local_rank() || control->local_size() != nccl->local_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL local reducer: control plane is local rank ", control->local_rank(),
                     " of ", control->local_size(), ", the communicator ", nccl->local_rank(),
                     " of ", nccl->local_size()));
  }
  if (cudaError_t rc = cudaSetDevice(device); rc != cudaSuccess)
    return CudaError("cudaSetDevice", rc);
  cudaStream_t stream = nullptr;
  if (cudaError_t rc = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      rc != cudaSuccess) {
    return CudaError("cudaStreamCreate", rc);
  }
  return std::unique_ptr<NcclLocalReducerAdapter>(
      new NcclLocalReducerAdapter(std::move(control), std::move(nccl), device, stream));
}

NcclLocalReducerAdapter::NcclLocalReducerAdapter(std::unique_ptr<LocalReducer> control,
                                                 std::unique_ptr<NcclLocalReducer> nccl, int device,
                                                 void* stream)
    : control_(std::move(control)), nccl_(std::move(nccl)), device_(device), stream_(stream) {
  completer_ = std::thread([this] { Complete(); });
}

NcclLocalReducerAdapter::~NcclLocalReducerAdapter() {
  Stop();
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void NcclLocalReducerAdapter::Reduce(const std::string& tag, void* buffer, int64_t elements,
                                     proto::DType dtype, Done done) {
  Coordinate(absl::StrCat("reduce:", tag), Launch{false, buffer, elements, dtype, std::move(done)});
}

void NcclLocalReducerAdapter::Broadcast(const std::string& tag, void* buffer, int64_t elements,
                                        proto::DType dtype, absl::Status root_status, Done done) {
  const std::string key = absl::StrCat("broadcast:", tag);
  if (local_rank() == 0 && !root_status.ok()) {
    // The others learn the error from the control plane instead of a number; no NCCL call.
    auto number = std::make_shared<Number>();
    control_->Broadcast(
        absl::StrCat("order:", key), number->data(), 4, proto::DTYPE_FLOAT32, root_status,
        [number, done = std::move(done), root_status](absl::Status) mutable { done(root_status); });
    return;
  }
  Coordinate(key, Launch{true, buffer, elements, dtype, std::move(done)});
}

void NcclLocalReducerAdapter::Coordinate(const std::string& key, Launch launch) {
  auto pending = std::make_shared<Launch>(std::move(launch));
  auto ready = std::make_shared<float>(0.0f);
  auto number = std::make_shared<Number>();
  const std::string order_tag = absl::StrCat("order:", key);
  if (local_rank() != 0) {
    control_->Reduce(absl::StrCat("ready:", key), ready.get(), 1, proto::DTYPE_FLOAT32,
                     [ready](absl::Status) {});  // a failure shows in the order broadcast
    control_->Broadcast(order_tag, number->data(), 4, proto::DTYPE_FLOAT32, absl::OkStatus(),
                        [this, pending, number](absl::Status s) {
                          if (!s.ok()) return pending->done(s);
                          Enqueue(Decode(*number), std::move(*pending));
                        });
    return;
  }
  // Root: once every rank is ready for `key`, number it and send the number to every rank.
  control_->Reduce(absl::StrCat("ready:", key), ready.get(), 1, proto::DTYPE_FLOAT32,
                   [this, pending, ready, number, order_tag](absl::Status s) {
                     uint64_t n = 0;
                     if (s.ok()) {
                       absl::MutexLock lock(&mu_);
                       n = next_number_++;
                     }
                     Encode(n, number.get());
                     control_->Broadcast(order_tag, number->data(), 4, proto::DTYPE_FLOAT32, s,
                                         [this, pending, number, s, n](absl::Status sent) {
                                           if (!s.ok()) return pending->done(s);
                                           if (!sent.ok()) return pending->done(sent);
                                           Enqueue(n, std::move(*pending));
                                         });
                   });
}

void NcclLocalReducerAdapter::Enqueue(uint64_t sequence, Launch launch) {
  std::vector<std::pair<Launch, absl::Status>> failed;
  {
    absl::MutexLock lock(&mu_);
    if (!failed_.ok()) {
      failed.emplace_back(std::move(launch), failed_);
    } else {
      numbered_.emplace(sequence, std::move(launch));
      while (failed_.ok()) {
        auto it = numbered_.find(next_launch_);
        if (it == numbered_.end()) break;
        Launch next = std::move(it->second);
        numbered_.erase(it);
        ++next_launch_;
        absl::Status s;
        if (cudaError_t rc = cudaSetDevice(device_); rc != cudaSuccess)
          s = CudaError("cudaSetDevice", rc);
        if (s.ok()) {
          s = next.broadcast
                  ? nccl_->BroadcastFromRoot(next.buffer, static_cast<size_t>(next.elements),
                                             next.dtype, 0, stream_)
                  : nccl_->ReduceToRoot(next.buffer, static_cast<size_t>(next.elements), next.dtype,
                                        0, stream_);
        }
        cudaEvent_t event = nullptr;
        if (s.ok()) {
          if (cudaError_t rc = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
              rc != cudaSuccess) {
            s = CudaError("cudaEventCreate", rc);
          } else if (cudaError_t rc = cudaEventRecord(event, static_cast<cudaStream_t>(stream_));
                     rc != cudaSuccess) {
            s = CudaError("cudaEventRecord", rc);
          }
        }
        if (!s.ok()) {
          // The ranks' NCCL sequences are out of step now: nothing more can run.
          failed_ = s;
          failed.emplace_back(std::move(next), s);
          break;
        }
        gpu_.emplace_back(event, std::move(next));
      }
      if (!failed_.ok()) {
        for (auto& [n, l] : numbered_) failed.emplace_back(std::move(l), failed_);
        numbered_.clear();
      }
    }
  }
  cv_.SignalAll();
  for (auto& [l, s] : failed) l.done(s);
}

void NcclLocalReducerAdapter::Complete() {
  while (true) {
    std::pair<void*, Launch> item;
    {
      absl::MutexLock lock(&mu_);
      while (gpu_.empty() && !stopping_) cv_.Wait(&mu_);
      if (gpu_.empty()) return;
      item = std::move(gpu_.front());
      gpu_.pop_front();
    }
    cudaEvent_t event = static_cast<cudaEvent_t>(item.first);
    const cudaError_t rc = cudaEventSynchronize(event);
    cudaEventDestroy(event);
    item.second.done(rc == cudaSuccess ? absl::OkStatus() : CudaError("NCCL collective", rc));
  }
}

void NcclLocalReducerAdapter::Fail(const absl::Status& reason) {
  control_->Fail(reason);
  std::map<uint64_t, Launch> numbered;
  {
    absl::MutexLock lock(&mu_);
    if (failed_.ok()) failed_ = reason;
    numbered.swap(numbered_);
  }
  for (auto& [n, l] : numbered) l.done(reason);
}

void NcclLocalReducerAdapter::Stop() {
  control_->Stop();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.SignalAll();
  // Collectives already on the GPU complete first (a dead peer would hang them: NCCL offers
  // only ncclCommAbort for that, which NcclLocalReducer does not expose yet).
  if (completer_.joinable()) completer_.join();
  Fail(absl::CancelledError("the NCCL local reducer stopped"));
}

}  // namespace bytecomp::worker
