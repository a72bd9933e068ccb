/* ByteComp worker engine: the C API that framework shims (shim/, Python ctypes) bind to.
 *
 * One engine per process. Every function returns BYTECOMP_OK (0) or a negative error code;
 * nothing throws. After a failure, bytecomp_last_error() gives the text on the calling thread;
 * a failed handle keeps its own text (bytecomp_handle_error).
 *
 * Configuration: bytecomp_init(config_path) reads an optional ClusterConfig text file
 * (proto/cluster_config.proto), then environment variables override it:
 *   BYTECOMP_SCHEDULER=host:port   scheduler address (required unless in the file)
 *   BYTECOMP_RANK=N                requested worker rank (optional; the scheduler assigns)
 *   BYTECOMP_CONNECT_TIMEOUT_MS    how long init waits for the scheduler
 *   BYTECOMP_KEY_FILE=path         the job's cluster key (bytecomp-keygen): CURVE on every
 *                                  socket; without one, only a scheduler on loopback
 *   BYTECOMP_ALLOW_INSECURE=1      without a key, connect off loopback anyway (a warning)
 *   BYTECOMP_IO_THREADS=N          ZeroMQ I/O threads (default 2; CURVE runs on them)
 *   BYTECOMP_PUSH_PULL_TIMEOUT_MS  how long a wait without a limit of its own waits
 * Everything else (W, S, partition size, connections per server, timeouts) comes from the
 * scheduler's topology, so every worker follows one configuration.
 */
#ifndef BYTECOMP_C_API_H_
#define BYTECOMP_C_API_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define BYTECOMP_API __attribute__((visibility("default")))
#else
#define BYTECOMP_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes. */
#define BYTECOMP_OK 0
#define BYTECOMP_ERR_INVALID_ARGUMENT (-1) /* bad size, dtype, name, pointer, ... */
#define BYTECOMP_ERR_NOT_INITIALIZED (-2)
#define BYTECOMP_ERR_TIMEOUT (-3)     /* wait timed out; the operation goes on */
#define BYTECOMP_ERR_UNAVAILABLE (-4) /* scheduler unreachable, a node failed */
#define BYTECOMP_ERR_REJECTED (-5)    /* a server or the scheduler rejected the request */
#define BYTECOMP_ERR_SHUTDOWN (-6)    /* the engine shut down before completion */
#define BYTECOMP_ERR_INTERNAL (-7)

/* Element types (values match proto DType). */
#define BYTECOMP_FLOAT32 0
#define BYTECOMP_FLOAT16 1
#define BYTECOMP_BFLOAT16 2

/* Flags for bytecomp_push_pull. */
#define BYTECOMP_FLAG_AVERAGE 1u /* divide the sum by the number of workers */

typedef int64_t bytecomp_handle_t;

/* Starts the engine: registers with the scheduler, receives the topology, connects to every
 * server. config_path may be NULL. Fails within the connect timeout naming the address. */
BYTECOMP_API int bytecomp_init(const char* config_path);
/* Completes or fails every operation in flight (never hangs), tells the scheduler, and stops.
 * Once it returns, the engine uses no tensor's memory: a caller that gives up on operations
 * (an error mid-round) shuts down before freeing their memory, not after. */
BYTECOMP_API int bytecomp_shutdown(void);
BYTECOMP_API int bytecomp_is_initialized(void);

BYTECOMP_API int bytecomp_rank(void);
BYTECOMP_API int bytecomp_size(void);
BYTECOMP_API int bytecomp_local_rank(void);
BYTECOMP_API int bytecomp_local_size(void);
BYTECOMP_API int bytecomp_num_servers(void);
/* The job's partition size in bytes (from the scheduler's configuration). */
BYTECOMP_API int64_t bytecomp_partition_bytes(void);

/* Declares a tensor. The same name on every worker gives the same key; the scheduler checks
 * that every worker declares it with the same element count and dtype (a mismatch fails every
 * worker's operations on it with an error naming both sizes). Declaring the same name twice
 * with a different size or dtype is an immediate error. Re-declaring identically is a no-op. */
BYTECOMP_API int bytecomp_declare(const char* name, int64_t element_count, int dtype);

/* The same with the tensor's shape (`ndim` dimensions in `dims`, multiplying to element_count;
 * e.g. a conv weight's [out, in, kh, kw]). Codecs that work on a matrix (powersgd) then read
 * the tensor as the layer's rows, dims[0] rows of dims[1] * ... elements (as PyTorch's PowerSGD
 * hook does), instead of a near-square matrix; every worker must give the same shape, else it
 * counts as flat. Declare before the tensor's first push_pull (which declares without a
 * shape). ndim 0 (dims may be NULL) is bytecomp_declare. */
BYTECOMP_API int bytecomp_declare_shape(const char* name, int64_t element_count, int dtype,
                                        int ndim, const int64_t* dims);

/* Starts an asynchronous in-place push-pull: `data` (element_count elements of dtype) is
 * summed over all workers and the result written back into `data`. The memory must stay
 * valid and untouched until the handle completes. Higher priority partitions leave first.
 * Declares the tensor if it is not yet declared. */
BYTECOMP_API int bytecomp_push_pull(const char* name, void* data, int64_t element_count, int dtype,
                                    int priority, uint32_t flags, bytecomp_handle_t* handle_out);

/* The same for a tensor in device (GPU) memory. `data` is a device pointer on device
 * `device_id`; `cuda_stream` is the cudaStream_t (NULL: the legacy default stream) on which
 * the gradient is produced: the engine reads it once the work queued there before this call
 * is done, queues its own copies and kernels on that stream, and writes the result back into
 * `data` before the handle completes. Keep `data` untouched until then.
 * Where each stage runs follows the tensor's strategy (proto/strategy.proto):
 *   uncompressed: device -> pinned host memory -> push; pull -> pinned -> device
 *   compress_on GPU or DEFAULT: encode on the device (error feedback fused), copy the payload
 *     to pinned memory, push; CPU_POOL or INLINE: copy to pinned memory, encode on the pool
 *   decompress_on GPU or DEFAULT (two-way): copy the payload to the device and decode there;
 *     CPU_POOL or INLINE: decode on the pool, copy to the device
 * A stage the device cannot run (a memory the device cannot fuse with the codec, fp16/bf16
 * tensors, BYTECOMP_FLAG_AVERAGE for the decode) runs on the pool, and the engine logs it once
 * per tensor. Without a device: BYTECOMP_ERR_INVALID_ARGUMENT, with the reason (a build
 * without CUDA, or cudaGetDeviceCount's error).
 * Test facility: BYTECOMP_DEVICE_BACKEND=emulated makes "device memory" ordinary host memory
 * and runs the device path on an emulated device (worker/device/.../emulated_device.h), so
 * that it can be tested without a GPU; never set it in training. */
BYTECOMP_API int bytecomp_push_pull_device(const char* name, void* data, int64_t element_count,
                                           int dtype, int device_id, void* cuda_stream,
                                           int priority, uint32_t flags,
                                           bytecomp_handle_t* handle_out);

/* 1 when done (successfully), 0 while pending, a negative code if it failed. */
BYTECOMP_API int bytecomp_poll(bytecomp_handle_t handle);
/* Waits up to timeout_ms (< 0: bytecomp_wait_timeout_ms(), the job's push_pull_timeout_ms,
 * 30 min unless the cluster config or this worker's BYTECOMP_PUSH_PULL_TIMEOUT_MS sets it).
 * BYTECOMP_OK, BYTECOMP_ERR_TIMEOUT or the failure (its text: bytecomp_last_error). A wait that
 * sees the operation complete, successfully or not, releases the handle; bytecomp_release
 * releases one without waiting. Nothing waits forever: a failed node or a silent scheduler
 * fails every wait within the heartbeat timeout, naming it. */
BYTECOMP_API int bytecomp_wait(bytecomp_handle_t handle, int64_t timeout_ms);
/* How long a wait or barrier with timeout_ms < 0 waits, in ms. */
BYTECOMP_API int64_t bytecomp_wait_timeout_ms(void);
BYTECOMP_API int bytecomp_release(bytecomp_handle_t handle);
/* Copies the handle's error text (empty if none) into buf (NUL-terminated, truncated). */
BYTECOMP_API int bytecomp_handle_error(bytecomp_handle_t handle, char* buf, size_t buf_len);

/* The optimiser's current learning rate, for codecs that need it (efsignsgd); call it
 * whenever the learning rate changes. */
BYTECOMP_API int bytecomp_set_learning_rate(double learning_rate);

/* Bytes this worker moved: on the wire (compressed) and what they stand for (uncompressed). */
typedef struct {
  int64_t pushed_bytes;
  int64_t pushed_raw_bytes;
  int64_t pulled_bytes;
  int64_t pulled_raw_bytes;
  int64_t operations;
} bytecomp_stats_t;
BYTECOMP_API int bytecomp_get_stats(bytecomp_stats_t* stats);

/* The training round (push_pull count - 1) of the tensor's latest started operation and the
 * strategy version it used (1 = the scheduler's initial strategy). */
BYTECOMP_API int bytecomp_tensor_strategy(const char* name, int64_t* round, int64_t* version);

/* Error-feedback state of a tensor (its memories' residuals and momenta), for checkpoints. Call
 * between steps (no push_pull of the tensor in flight). save: *state_len receives the size; the
 * state is written when buf_len is large enough (call with buf NULL to ask the size), else
 * BYTECOMP_ERR_INVALID_ARGUMENT. load: the tensor must be declared (and known to every
 * worker: after its first push_pull, or a barrier after bytecomp_declare). The state of a
 * memory fused into a device encode (bytecomp_push_pull_device, compress_on GPU) lives on the
 * device and is not saved or loaded yet: save is refused (BYTECOMP_ERR_REJECTED), and a loaded
 * state fails the tensor's first device encode. */
BYTECOMP_API int bytecomp_save_state(const char* name, void* buf, size_t buf_len,
                                     size_t* state_len);
BYTECOMP_API int bytecomp_load_state(const char* name, const void* buf, size_t len);

/* Blocks until every worker reached the barrier (or a node failed / timeout; timeout_ms < 0:
 * bytecomp_wait_timeout_ms()). */
BYTECOMP_API int bytecomp_barrier(int64_t timeout_ms);

/* The text of the last failure on this thread ("" if none). Valid until the next call. */
BYTECOMP_API const char* bytecomp_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* BYTECOMP_C_API_H_ */
