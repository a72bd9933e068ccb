// The C API over WorkerEngine: codes and messages, nothing thrown across it.
#include "bytecomp/c_api.h"

#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bytecomp/worker/engine.h"

namespace {

using bytecomp::worker::ElementType;
using bytecomp::worker::WorkerEngine;

// Guards g_engine's lifetime (init, shutdown), not the data path: a call holds its own
// reference to the engine.
ABSL_CONST_INIT absl::Mutex g_mu(absl::kConstInit);
std::shared_ptr<WorkerEngine> g_engine ABSL_GUARDED_BY(g_mu);
thread_local std::string t_last_error;

int CodeOf(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return BYTECOMP_OK;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
      return BYTECOMP_ERR_INVALID_ARGUMENT;
    case absl::StatusCode::kDeadlineExceeded:
      return BYTECOMP_ERR_TIMEOUT;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDataLoss:
      return BYTECOMP_ERR_UNAVAILABLE;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
      return BYTECOMP_ERR_REJECTED;
    case absl::StatusCode::kCancelled:
      return BYTECOMP_ERR_SHUTDOWN;
    default:
      return BYTECOMP_ERR_INTERNAL;
  }
}

int Fail(const absl::Status& s) {
  t_last_error = std::string(s.message());
  return CodeOf(s);
}

int Report(const absl::Status& s) { return s.ok() ? BYTECOMP_OK : Fail(s); }

std::shared_ptr<WorkerEngine> Engine() {
  absl::MutexLock lock(&g_mu);
  return g_engine;
}

int NotInitialized() {
  t_last_error = "bytecomp is not initialized: call bytecomp_init first";
  return BYTECOMP_ERR_NOT_INITIALIZED;
}

template <typename F>
int Guarded(F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    t_last_error = std::string("internal error: ") + e.what();
    return BYTECOMP_ERR_INTERNAL;
  }
}

int PushPull(const char* name, void* data, int64_t element_count, int dtype, int priority,
             uint32_t flags, bytecomp::worker::PushPullRequest& request,
             bytecomp_handle_t* handle_out) {
  return Guarded([&] {
    std::shared_ptr<WorkerEngine> e = Engine();
    if (e == nullptr) return NotInitialized();
    if (name == nullptr) return Fail(absl::InvalidArgumentError("tensor name is NULL"));
    if (handle_out == nullptr) return Fail(absl::InvalidArgumentError("handle_out is NULL"));
    request.name = name;
    request.data = data;
    request.element_count = element_count;
    request.dtype = static_cast<ElementType>(dtype);
    request.priority = priority;
    request.average = (flags & BYTECOMP_FLAG_AVERAGE) != 0;
    absl::StatusOr<int64_t> handle = e->PushPull(request);
    if (!handle.ok()) return Fail(handle.status());
    *handle_out = *handle;
    return BYTECOMP_OK;
  });
}

}  // namespace

extern "C" {

int bytecomp_init(const char* config_path) {
  return Guarded([&] {
    absl::MutexLock lock(&g_mu);
    if (g_engine != nullptr) return BYTECOMP_OK;
    absl::StatusOr<std::unique_ptr<WorkerEngine>> engine =
        WorkerEngine::Start(config_path == nullptr ? "" : config_path);
    if (!engine.ok()) return Fail(engine.status());
    g_engine = std::move(*engine);
    return BYTECOMP_OK;
  });
}

int bytecomp_shutdown(void) {
  return Guarded([&] {
    std::shared_ptr<WorkerEngine> engine;
    {
      absl::MutexLock lock(&g_mu);
      engine.swap(g_engine);
    }
    if (engine == nullptr) return BYTECOMP_OK;
    return Report(engine->Shutdown());
  });
}

int bytecomp_is_initialized(void) { return Engine() != nullptr ? 1 : 0; }

#define BYTECOMP_INFO_GETTER(fn, field)                       \
  int fn(void) {                                              \
    std::shared_ptr<WorkerEngine> e = Engine();               \
    return e == nullptr ? NotInitialized() : e->info().field; \
  }
BYTECOMP_INFO_GETTER(bytecomp_rank, rank)
BYTECOMP_INFO_GETTER(bytecomp_size, size)
BYTECOMP_INFO_GETTER(bytecomp_local_rank, local_rank)
BYTECOMP_INFO_GETTER(bytecomp_local_size, local_size)
BYTECOMP_INFO_GETTER(bytecomp_num_servers, num_servers)
#undef BYTECOMP_INFO_GETTER

int64_t bytecomp_partition_bytes(void) {
  std::shared_ptr<WorkerEngine> e = Engine();
  return e == nullptr ? NotInitialized() : e->info().partition_bytes;
}

int64_t bytecomp_wait_timeout_ms(void) {
  std::shared_ptr<WorkerEngine> e = Engine();
  return e == nullptr ? NotInitialized() : e->info().wait_timeout_ms;
}

int bytecomp_declare(const char* name, int64_t element_count, int dtype) {
  return Guarded([&] {
    std::shared_ptr<WorkerEngine> e = Engine();
    if (e == nullptr) return NotInitialized();
    if (name == nullptr) return Fail(absl::InvalidArgumentError("tensor name is NULL"));
    return Report(e->Declare(name, element_count, static_cast<ElementType>(dtype)));
  });
}

int bytecomp_declare_shape(const char* name, int64_t element_count, int dtype, int ndim,
                           const int64_t* dims) {
  return Guarded([&] {
    std::shared_ptr<WorkerEngine> e = Engine();
    if (e == nullptr) return NotInitialized();
    if (name == nullptr) return Fail(absl::InvalidArgumentError("tensor name is NULL"));
    if (ndim < 0 || ndim > 32 || (ndim > 0 && dims == nullptr)) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "': ", ndim, " dimensions",
                       dims == nullptr ? " and dims NULL" : "", "; a shape has 0 to 32")));
    }
    std::vector<int64_t> shape(dims, dims + ndim);
    return Report(e->Declare(name, element_count, static_cast<ElementType>(dtype), shape));
  });
}

int bytecomp_push_pull(const char* name, void* data, int64_t element_count, int dtype, int priority,
                       uint32_t flags, bytecomp_handle_t* handle_out) {
  bytecomp::worker::PushPullRequest request;
  return PushPull(name, data, element_count, dtype, priority, flags, request, handle_out);
}

int bytecomp_push_pull_device(const char* name, void* data, int64_t element_count, int dtype,
                              int device_id, void* cuda_stream, int priority, uint32_t flags,
                              bytecomp_handle_t* handle_out) {
  bytecomp::worker::PushPullRequest request;
  request.on_device = true;
  request.device = device_id;
  request.stream = cuda_stream;
  return PushPull(name, data, element_count, dtype, priority, flags, request, handle_out);
}

int bytecomp_poll(bytecomp_handle_t handle) {
  return Guarded([&] {
    std::shared_ptr<WorkerEngine> e = Engine();
    if (e == nullptr) return NotInitialized();
    absl::StatusOr<bool> done = e->Poll(handle);
    if (!done.ok()) return Fail(done.status());
    return *done ? 1 : 0;
  });
}

int bytecomp_wait(bytecomp_handle_t handle, int64_t timeout_ms) {
  return Guarded([&] {
    std::shared_ptr<WorkerEngine> e = Engine();
    if (e == nullptr) return NotInitialized();
    return Report(e->Wait(handle, timeout_ms));
  });
}

int bytecomp_release(bytecomp_handle_t handle) {
  return Guarded([&] {
    std::shared_ptr<WorkerEngine> e = Engine();
    if (e == nullptr) return NotInitialized();
    return Report(e->Release(handle));
  });
}

int bytecomp_handle_error(bytecomp_handle_t handle, char* buf, size_t buf_len) {
  return Guarded([&] {
    std::shared_ptr<WorkerEngine> e = Engine();
    if (e == nullptr) return NotInitialized();
    absl::StatusOr<bool> done = e->Poll(handle);
    std::string text = done.ok() ? "" : std::string(done.status().message());
    if (buf != nullptr && buf_len > 0) {
      const size_t n = std::min(text.size(), buf_len - 1);
      std::memcpy(buf, text.data(), n);
      buf[n] = '\0';
    }
    return BYTECOMP_OK;
  });
}

int bytecomp_barrier(int64_t timeout_ms) {
  return Guarded([&] {
    std::shared_ptr<WorkerEngine> e = Engine();
    if (e == nullptr) return NotInitialized();
    return Report(e->Barrier(timeout_ms));
  });
}

int bytecomp_set_learning_rate(double learning_rate) {
  std::shared_ptr<WorkerEngine> e = Engine();
  if (e == nullptr) return NotInitialized();
  if (!(learning_rate >= 0.0)) {
    return Fail(absl::InvalidArgumentError("learning rate must be a number >= 0"));
  }
  e->SetLearningRate(learning_rate);
  return BYTECOMP_OK;
}

int bytecomp_get_stats(bytecomp_stats_t* stats) {
  std::shared_ptr<WorkerEngine> e = Engine();
  if (e == nullptr) return NotInitialized();
  if (stats == nullptr) return Fail(absl::InvalidArgumentError("stats is NULL"));
  const bytecomp::worker::EngineStats s = e->Stats();
  stats->pushed_bytes = s.pushed_bytes;
  stats->pushed_raw_bytes = s.pushed_raw_bytes;
  stats->pulled_bytes = s.pulled_bytes;
  stats->pulled_raw_bytes = s.pulled_raw_bytes;
  stats->operations = s.operations;
  return BYTECOMP_OK;
}

int bytecomp_tensor_strategy(const char* name, int64_t* round, int64_t* version) {
  std::shared_ptr<WorkerEngine> e = Engine();
  if (e == nullptr) return NotInitialized();
  if (name == nullptr || round == nullptr || version == nullptr) {
    return Fail(absl::InvalidArgumentError("bytecomp_tensor_strategy: NULL argument"));
  }
  return Report(e->TensorStrategy(name, round, version));
}

int bytecomp_save_state(const char* name, void* buf, size_t buf_len, size_t* state_len) {
  return Guarded([&] {
    std::shared_ptr<WorkerEngine> e = Engine();
    if (e == nullptr) return NotInitialized();
    if (name == nullptr || state_len == nullptr) {
      return Fail(absl::InvalidArgumentError("bytecomp_save_state: NULL name or state_len"));
    }
    absl::StatusOr<std::string> state = e->SaveTensorState(name);
    if (!state.ok()) return Fail(state.status());
    *state_len = state->size();
    if (buf == nullptr) return BYTECOMP_OK;
    if (buf_len < state->size()) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "state of '", name, "' needs ", state->size(), " bytes, the buffer has ", buf_len)));
    }
    std::memcpy(buf, state->data(), state->size());
    return BYTECOMP_OK;
  });
}

int bytecomp_load_state(const char* name, const void* buf, size_t len) {
  return Guarded([&] {
    std::shared_ptr<WorkerEngine> e = Engine();
    if (e == nullptr) return NotInitialized();
    if (name == nullptr || (buf == nullptr && len > 0)) {
      return Fail(absl::InvalidArgumentError("bytecomp_load_state: NULL name or buffer"));
    }
    return Report(e->LoadTensorState(name, absl::string_view(static_cast<const char*>(buf), len)));
  });
}

const char* bytecomp_last_error(void) { return t_last_error.c_str(); }

}  // extern "C"
