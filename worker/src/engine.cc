#include "bytecomp/worker/engine.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine_impl.h"
#include "local_setup.h"
#include "nccl_setup.h"

namespace bytecomp::worker {

absl::Status EngineImpl::Init(const std::string& config_path) {
  absl::StatusOr<proto::ClusterConfig> config = LoadClusterConfig(config_path);
  if (!config.ok()) return config.status();
  if (absl::Status s = ValidateClusterConfig(*config); !s.ok()) return s;
  config_ = *config;
  int requested_rank = -1;
  if (const char* r = std::getenv("BYTECOMP_RANK"); r != nullptr && *r != '\0') {
    if (!absl::SimpleAtoi(r, &requested_rank)) {
      return absl::InvalidArgumentError(absl::StrCat("BYTECOMP_RANK='", r, "' is not an integer"));
    }
  }
  absl::StatusOr<Placement> placement = PlacementFromEnv();
  if (!placement.ok()) return placement.status();
  context_ = std::make_unique<zmq::context_t>(2);
  auto client = std::make_unique<SchedulerClient>(*context_, config_);
  client->SetPlacement(placement->machine, placement->local_rank, placement->local_size);
  absl::StatusOr<proto::Topology> topology =
      client->Register(proto::ROLE_WORKER, requested_rank, "");
  if (!topology.ok()) return topology.status();
  topology_ = *topology;
  // The scheduler's configuration is the job's; only the scheduler address stays ours.
  const std::string scheduler_address = config_.scheduler_address();
  config_ = WithClusterDefaults(topology_.config());
  config_.set_scheduler_address(scheduler_address);
  info.rank = topology_.your_rank();
  info.size = topology_.num_workers();
  info.local_rank = topology_.local_rank();
  info.local_size = std::max(1, topology_.local_size());
  info.num_servers = topology_.num_servers();
  info.partition_bytes = config_.partition_bytes();
  if (topology_.servers_size() != info.num_servers) {
    return absl::InternalError(absl::StrCat("topology lists ", topology_.servers_size(),
                                            " servers, expected ", info.num_servers));
  }
  SetLogIdentity(absl::StrCat("worker ", info.rank));
  auto setup_failed = [&](const absl::Status& status) {
    // Tell the others at once rather than let them wait for this worker's heartbeats to stop.
    const std::string reason = absl::StrCat("worker ", info.rank, " (local rank ", info.local_rank,
                                            " of ", info.local_size, "): hierarchical set-up failed: ",
                                            status.message());
    proto::ControlMessage bye;
    bye.mutable_shutdown()->set_reason(reason);
    (void)client->Send(bye);
    client->socket().set(zmq::sockopt::linger, 1000);  // let the Shutdown leave
    return absl::Status(status.code(), reason);
  };
  absl::StatusOr<std::unique_ptr<LocalReducer>> reducer =
      ConnectLocalReducer(*context_, *client, topology_);
  if (!reducer.ok()) return setup_failed(reducer.status());
  local_reducer_ = *std::move(reducer);
  if (local_reducer_ != nullptr) {
    absl::StatusOr<DeviceReducer> device_reducer =
        ConnectDeviceReducer(*client, topology_, *local_reducer_);
    if (!device_reducer.ok()) return setup_failed(device_reducer.status());
    device_reducer_ = *std::move(device_reducer);
  }
  if (absl::Status st = strategies_.Add(topology_.strategy()); !st.ok()) return st;
  int threads = 2;
  if (const char* t = std::getenv("BYTECOMP_COMPRESS_THREADS"); t != nullptr && *t != '\0') {
    if (!absl::SimpleAtoi(t, &threads) || threads < 1 || threads > 256) {
      return absl::InvalidArgumentError(
          absl::StrCat("BYTECOMP_COMPRESS_THREADS='", t, "' is not a thread count in [1, 256]"));
    }
  }
  if (config_.profile_rounds() > 0) profiler_ = std::make_unique<ReadyProfiler>(config_.profile_rounds());
  cpu_offload::ThreadPoolOptions pool_options;
  pool_options.num_threads = static_cast<size_t>(threads);
  pool_options.name = "bc-codec";
  pool_ = std::make_unique<cpu_offload::PriorityThreadPool>(pool_options);
  BC_LOG_DEBUG("joined: ", info.size, " workers, ", info.num_servers, " servers");

  data_thread_ = std::thread([this] { DataLoop(*this).Run(); });
  control_thread_ = std::thread(
      [this, c = client.release()]() mutable { ControlLoop(*this, std::unique_ptr<SchedulerClient>(c)).Run(); });
  return absl::OkStatus();
}

absl::Status EngineImpl::EngineStatus() {
  if (!failed_.load()) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(failure_mu_);
  return failure_;
}

std::shared_ptr<TensorEntry> EngineImpl::FindOrDeclareLocked(const std::string& name,
                                                             int64_t count, proto::DType dtype,
                                                             absl::Status* error) {
  if (name.empty()) {
    *error = absl::InvalidArgumentError("tensor name must not be empty");
    return nullptr;
  }
  if (count < 1) {
    *error = absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': element count ", count, " must be >= 1"));
    return nullptr;
  }
  if (DTypeSize(dtype) == 0) {
    *error = absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': invalid dtype ",
                                                     static_cast<int>(dtype),
                                                     " (valid: 0 fp32, 1 fp16, 2 bf16)"));
    return nullptr;
  }
  auto it = tensors_.find(name);
  if (it != tensors_.end()) {
    const TensorEntry& t = *it->second;
    if (t.element_count != count || t.dtype != dtype) {
      *error = absl::InvalidArgumentError(absl::StrCat(
          "tensor '", name, "' was declared with ", t.element_count, " elements of ",
          DTypeName(t.dtype), ", now used with ", count, " elements of ", DTypeName(dtype)));
      return nullptr;
    }
    return it->second;
  }
  auto entry = std::make_shared<TensorEntry>();
  entry->name = name;
  entry->element_count = count;
  entry->dtype = dtype;
  tensors_[name] = entry;
  proto::ControlMessage msg;
  proto::DeclareTensor* d = msg.mutable_declare_tensor();
  d->set_name(name);
  d->set_element_count(count);
  d->set_dtype(dtype);
  control_queue_.Push(SendControl{std::move(msg)});
  return entry;
}

absl::Status EngineImpl::Declare(const std::string& name, int64_t element_count,
                                 proto::DType dtype) {
  if (absl::Status s = EngineStatus(); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(tensors_mu_);
  absl::Status error;
  if (FindOrDeclareLocked(name, element_count, dtype, &error) == nullptr) return error;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> EngineImpl::PushPull(const PushPullRequest& request) {
  if (request.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", request.name, "': data is NULL"));
  }
  if (absl::Status s = EngineStatus(); !s.ok()) return s;
  if (local_reducer_ != nullptr) return HierarchicalPushPull(request);
  absl::StatusOr<std::shared_ptr<Operation>> made = NewOperation(request);
  if (!made.ok()) return made.status();
  std::shared_ptr<Operation> op = *std::move(made);
  if (absl::Status s = QueueOperation(op, /*internal=*/false); !s.ok()) return s;
  ++operations_;
  return op->handle;
}

absl::StatusOr<std::shared_ptr<Operation>> EngineImpl::NewOperation(
    const PushPullRequest& request) {
  auto op = std::make_shared<Operation>();
  if (request.on_device) {
    absl::StatusOr<DeviceBackend*> backend = DeviceBackendFor(request);
    if (!backend.ok()) return backend.status();
    op->device = std::make_unique<DeviceWork>();
    op->device->backend = *backend;
    op->device->device = request.device;
    op->device->stream = request.stream;
  }
  op->name = request.name;
  op->data = request.data;
  op->element_count = request.element_count;
  op->dtype = request.dtype;
  op->priority = request.priority;
  op->average = request.average;
  return op;
}

void EngineImpl::RecordReadyLocked(const Operation& op) {
  if (profiler_ == nullptr || profiler_->done()) return;
  std::optional<proto::ModelProfile> profile = profiler_->Record(
      op.name, op.element_count, static_cast<int>(DTypeSize(op.dtype)), MonotonicUs());
  if (profile.has_value()) {
    proto::ControlMessage report;
    *report.mutable_profile_report()->mutable_profile() = *std::move(profile);
    control_queue_.Push(SendControl{std::move(report)});
  }
}

void EngineImpl::RegisterHandle(const std::shared_ptr<Operation>& op) {
  std::lock_guard<std::mutex> hl(handles_mu_);
  op->handle = next_handle_++;
  handles_[op->handle] = op;
}

absl::Status EngineImpl::QueueOperation(const std::shared_ptr<Operation>& op, bool internal) {
  Deferred deferred;
  {
    std::lock_guard<std::mutex> lock(tensors_mu_);
    absl::Status error;
    std::shared_ptr<TensorEntry> tensor =
        FindOrDeclareLocked(op->name, op->element_count, op->dtype, &error);
    if (tensor == nullptr) return error;
    if (!internal) {
      RecordReadyLocked(*op);
      RegisterHandle(op);
    }
    if (tensor->state == TensorState::kFailed) {
      op->FailBeforeStart(tensor->error);
      return absl::OkStatus();
    }
    tensor->waiting.push_back(op);
    if (tensor->state == TensorState::kReady && !tensor->busy) StartNextLocked(tensor, &deferred);
  }
  RunDeferred(deferred);
  return absl::OkStatus();
}

void EngineImpl::StartNextLocked(const std::shared_ptr<TensorEntry>& tensor_ptr,
                                 Deferred* deferred) {
  TensorEntry& tensor = *tensor_ptr;
  if (tensor.waiting.empty()) return;
  if (hold_after_round_.has_value() && tensor.next_round > *hold_after_round_) {
    held_.push_back(tensor_ptr);  // a strategy switch is being agreed: wait for the commit
    return;
  }
  std::shared_ptr<Operation> op = tensor.waiting.front();
  tensor.waiting.pop_front();
  tensor.busy = true;
  op->tensor = tensor_ptr;
  op->layout = tensor.layout;
  op->round = tensor.next_round++;
  highest_started_round_ = std::max(highest_started_round_, op->round);
  {
    std::lock_guard<std::mutex> lock(strategy_mu_);
    const proto::Strategy* strategy = strategies_.ForRound(op->round);
    if (strategy != nullptr) {
      op->plan = compress::PlanFor(*strategy, tensor.name,
                                   tensor.element_count * static_cast<int64_t>(DTypeSize(tensor.dtype)));
    }
  }
  op->wire_round = tensor.next_wire_round;
  tensor.last_version = op->plan.version;
  const int64_t parts = op->layout.num_partitions();
  if (!op->plan.compressed()) {
    tensor.next_wire_round += 1;
    op->pending_events.store(2 * parts);
    if (op->device != nullptr) {
      StartDeviceLocked(op, tensor, deferred);
    } else {
      data_queue_.Push(StartOperation{op});
    }
    return;
  }
  if (tensor.codecs.size() != static_cast<size_t>(parts)) tensor.codecs.resize(parts);
  if (tensor.pending_state.size() != static_cast<size_t>(parts)) tensor.pending_state.resize(parts);
  if (tensor.two_round_version != op->plan.version) {  // once per strategy version
    absl::StatusOr<std::unique_ptr<compress::Codec>> probe =
        compress::CreateCodec(op->plan.push.name(), compress::ParamsOf(op->plan.push));
    tensor.two_round = probe.ok() && (*probe)->properties().two_round;
    tensor.two_round_version = op->plan.version;
  }
  op->two_round = tensor.two_round;
  tensor.next_wire_round += op->two_round ? 2 : 1;
  op->pending_events.store(parts);
  if (op->device != nullptr) {
    StartDeviceLocked(op, tensor, deferred);
    return;
  }
  if ((op->plan.compress_on == proto::PLACEMENT_GPU ||
       op->plan.decompress_on == proto::PLACEMENT_GPU) &&
      !tensor.placement_logged) {
    tensor.placement_logged = true;
    BC_LOG_WARNING("tensor '", tensor.name, "': the strategy places its compression on the GPU, "
                   "but it was given in host memory (bytecomp_push_pull), so it is encoded and "
                   "decoded on the CPU pool; bytecomp_push_pull_device takes device tensors");
  }
  StartEncodes(op, deferred);
}

void EngineImpl::StartEncodes(const std::shared_ptr<Operation>& op, Deferred* deferred) {
  const bool on_device = op->device != nullptr && op->device->encode_on_device;
  // A device tensor's host stages never run inline: its host copy is ready on another thread.
  const proto::Placement placement =
      op->device != nullptr ? proto::PLACEMENT_CPU_POOL : op->plan.compress_on;
  for (int64_t p = 0; p < op->layout.num_partitions(); ++p) {
    SubmitToPool(op->priority, placement,
                 [this, op, p, on_device] {
                   if (on_device) {
                     EncodePartitionOnDevice(op, p);
                   } else {
                     EncodePartition(op, p);
                   }
                 },
                 op, deferred);
  }
}

void EngineImpl::RunDeferred(Deferred& work) {
  for (auto& w : work) w();
  work.clear();
}

void EngineImpl::SubmitToPool(int priority, proto::Placement placement,
                              absl::AnyInvocable<void()> work, std::shared_ptr<Operation> op,
                              Deferred* deferred) {
  if (placement == proto::PLACEMENT_INLINE && deferred != nullptr) {
    // On the thread that started the operation (the training thread when the tensor was
    // idle), once the tensor table's lock is released.
    deferred->push_back(std::move(work));
    return;
  }
  // PLACEMENT_GPU with a host tensor runs here too (StartNextLocked says so once); device
  // tensors' device stages also start from a pool thread, which waits for the device codec.
  absl::Status submitted = pool_->Submit(
      priority, [this, work = std::move(work), op](absl::Status status) mutable {
        if (!status.ok()) {  // the pool shut down before running it
          op->RecordError(status);
          FinishEvents(op, 1);
          return;
        }
        work();
      });
  if (!submitted.ok()) {
    op->RecordError(submitted);
    FinishEvents(op, 1);
  }
}

uint64_t EngineImpl::OnStrategyPrepare(uint64_t version) {
  std::lock_guard<std::mutex> lock(tensors_mu_);
  hold_after_round_ = highest_started_round_ + 1;
  BC_LOG_DEBUG("strategy version ", version, " prepared at round ", highest_started_round_);
  return highest_started_round_;
}

void EngineImpl::OnStrategyCommit(const proto::Strategy& strategy) {
  {
    std::lock_guard<std::mutex> lock(strategy_mu_);
    if (absl::Status s = strategies_.Add(strategy); !s.ok()) {
      BC_LOG_ERROR("strategy update refused: ", s.message());
    }
  }
  Deferred deferred;
  {
    std::lock_guard<std::mutex> lock(tensors_mu_);
    hold_after_round_.reset();
    std::vector<std::shared_ptr<TensorEntry>> held;
    held.swap(held_);
    for (auto& t : held) {
      if (t->state == TensorState::kReady && !t->busy) StartNextLocked(t, &deferred);
    }
  }
  RunDeferred(deferred);
}

absl::Status EngineImpl::TensorStrategy(const std::string& name, int64_t* round,
                                        int64_t* version) {
  std::lock_guard<std::mutex> lock(tensors_mu_);
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return absl::NotFoundError(absl::StrCat("unknown tensor '", name, "'"));
  if (local_reducer_ != nullptr) {
    // Hierarchical: the local root's network round k carries every local rank's push_pull k,
    // so every local rank reports its own push_pull count and that round's strategy version.
    *round = static_cast<int64_t>(it->second->local_round) - 1;
    std::lock_guard<std::mutex> strategy_lock(strategy_mu_);
    const proto::Strategy* s = *round < 0 ? nullptr : strategies_.ForRound(static_cast<uint64_t>(*round));
    *version = s == nullptr ? 0 : static_cast<int64_t>(s->version());
    return absl::OkStatus();
  }
  *round = static_cast<int64_t>(it->second->next_round) - 1;
  *version = static_cast<int64_t>(it->second->last_version);
  return absl::OkStatus();
}

// Checkpoint format of a tensor's error-feedback state: u32 partition count, then per partition a
// u64 length and compress::SaveMemoryState's bytes (length 0: no memory, or no round yet).
absl::StatusOr<std::string> EngineImpl::SaveTensorState(const std::string& name) {
  std::lock_guard<std::mutex> lock(tensors_mu_);
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return absl::NotFoundError(absl::StrCat("unknown tensor '", name, "'"));
  TensorEntry& t = *it->second;
  if (t.busy || !t.waiting.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("tensor '", name, "' has a push_pull in flight; save its state between steps"));
  }
  std::string out;
  const uint32_t parts = static_cast<uint32_t>(t.layout.num_partitions());
  out.append(reinterpret_cast<const char*>(&parts), 4);
  for (uint32_t p = 0; p < parts; ++p) {
    if (p < t.codecs.size() && t.codecs[p].device_memory) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tensor '", name, "' is encoded on the device, whose error-feedback state cannot be "
          "saved yet; place its compression on the CPU pool to checkpoint it"));
    }
    std::string state;
    if (p < t.codecs.size() && t.codecs[p].memory != nullptr) {
      state = compress::SaveMemoryState(*t.codecs[p].memory);
    } else if (p < t.pending_state.size()) {
      state = t.pending_state[p];
    }
    const uint64_t len = state.size();
    out.append(reinterpret_cast<const char*>(&len), 8);
    out += state;
  }
  return out;
}

absl::Status EngineImpl::LoadTensorState(const std::string& name, absl::string_view state) {
  std::lock_guard<std::mutex> lock(tensors_mu_);
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown tensor '", name, "': declare it first"));
  }
  TensorEntry& t = *it->second;
  if (t.busy || !t.waiting.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("tensor '", name, "' has a push_pull in flight; load its state between steps"));
  }
  if (t.state == TensorState::kDeclaring) {
    t.checkpoint = std::string(state);  // applied once the partitioning is known
    return absl::OkStatus();
  }
  return ApplyCheckpointLocked(t, state);
}

absl::Status EngineImpl::ApplyCheckpointLocked(TensorEntry& t, absl::string_view state) {
  const size_t parts = static_cast<size_t>(t.layout.num_partitions());
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("error-feedback state of '", t.name, "': ", why));
  };
  std::vector<std::string> states(parts);
  uint32_t count = 0;
  if (state.size() < 4) return bad("truncated");
  std::memcpy(&count, state.data(), 4);
  size_t pos = 4;
  if (count != parts) return bad(absl::StrCat(count, " partitions, the tensor has ", parts));
  for (size_t p = 0; p < parts; ++p) {
    uint64_t len = 0;
    if (state.size() - pos < 8) return bad("truncated");
    std::memcpy(&len, state.data() + pos, 8);
    pos += 8;
    if (state.size() - pos < len) return bad("truncated");
    states[p] = std::string(state.substr(pos, len));
    pos += len;
  }
  if (pos != state.size()) return bad("trailing bytes");
  t.codecs.resize(parts);
  t.pending_state.resize(parts);
  for (size_t p = 0; p < parts; ++p) {
    if (t.codecs[p].memory != nullptr && !states[p].empty()) {
      if (absl::Status s = compress::LoadMemoryState(*t.codecs[p].memory, states[p]); !s.ok()) return s;
    } else {
      t.pending_state[p] = std::move(states[p]);
    }
  }
  return absl::OkStatus();
}

EngineStats EngineImpl::Stats() const {
  EngineStats s;
  s.pushed_bytes = pushed_bytes_.load();
  s.pushed_raw_bytes = pushed_raw_bytes_.load();
  s.pulled_bytes = pulled_bytes_.load();
  s.pulled_raw_bytes = pulled_raw_bytes_.load();
  s.operations = operations_.load();
  return s;
}

void EngineImpl::FinishEvents(const std::shared_ptr<Operation>& op, int64_t events) {
  if (op->pending_events.fetch_sub(events) == events) Complete(op);
}

void EngineImpl::Complete(const std::shared_ptr<Operation>& op) {
  const int64_t done_us = MonotonicUs();  // before the caller can see it done
  absl::Status status;
  {
    std::lock_guard<std::mutex> lock(op->mu);
    status = op->status;
  }
  // The tensor's next operation may start; a failed round leaves the key's rounds out of step
  // with the server, so the tensor stays failed. The tensor is idle before the caller sees the
  // operation done: a save_state right after the wait must not find it in flight.
  Deferred deferred;
  {
    std::lock_guard<std::mutex> lock(tensors_mu_);
    if (profiler_ != nullptr && !profiler_->done() && status.ok()) {
      profiler_->RecordDone(static_cast<int64_t>(op->round), done_us);
    }
    auto it = tensors_.find(op->name);
    if (it != tensors_.end() && it->second->busy && it->second->state == TensorState::kReady) {
      TensorEntry& tensor = *it->second;
      tensor.busy = false;
      if (!status.ok()) {
        tensor.state = TensorState::kFailed;
        tensor.error = absl::Status(status.code(), absl::StrCat("tensor '", tensor.name,
                                                                "' failed in round ", op->round,
                                                                ": ", status.message()));
        for (auto& waiting : tensor.waiting) waiting->FailBeforeStart(tensor.error);
        tensor.waiting.clear();
      } else {
        StartNextLocked(it->second, &deferred);
      }
    }
  }
  op->MarkDone();
  RunDeferred(deferred);
}

void EngineImpl::OnDeclareReply(const proto::DeclareReply& reply) {
  Deferred deferred;
  std::unique_lock<std::mutex> lock(tensors_mu_);
  auto it = tensors_.find(reply.name());
  if (it == tensors_.end()) return;
  TensorEntry& tensor = *it->second;
  if (tensor.state != TensorState::kDeclaring) return;
  absl::Status error;
  if (!reply.ok()) {
    error = absl::FailedPreconditionError(reply.error());
  } else {
    absl::StatusOr<TensorLayout> layout = LayoutFromDeclareReply(reply, info.num_servers);
    if (!layout.ok()) {
      error = layout.status();
    } else if (layout->element_count != tensor.element_count || layout->dtype != tensor.dtype) {
      error = absl::InternalError(absl::StrCat("scheduler declared '", reply.name(), "' with ",
                                               layout->element_count, " elements"));
    } else {
      tensor.layout = *layout;
      tensor.state = TensorState::kReady;
      tensor.local_ops.clear();
      if (!tensor.checkpoint.empty()) {
        if (absl::Status s = ApplyCheckpointLocked(tensor, tensor.checkpoint); !s.ok()) {
          BC_LOG_ERROR(s.message());
        }
        tensor.checkpoint.clear();
      }
      StartNextLocked(it->second, &deferred);
      lock.unlock();
      RunDeferred(deferred);
      return;
    }
  }
  tensor.state = TensorState::kFailed;
  tensor.error = error;
  for (auto& op : tensor.waiting) op->FailBeforeStart(error);
  tensor.waiting.clear();
  // Hierarchical push_pulls of this tensor wait on the local root, which may never reduce a
  // tensor that was not declared everywhere: they fail with the declaration's error.
  for (auto& weak : tensor.local_ops) {
    if (std::shared_ptr<Operation> op = weak.lock()) op->FailBeforeStart(error);
  }
  tensor.local_ops.clear();
}

void EngineImpl::FailEngine(const absl::Status& reason) {
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    if (failed_.load()) return;
    failure_ = reason;
    failed_.store(true);
  }
  if (!shutting_down_) BC_LOG_ERROR(reason.message());
  // Operations not yet handed to the data thread fail here; those in flight fail there.
  std::vector<std::shared_ptr<Operation>> waiting;
  {
    std::lock_guard<std::mutex> lock(tensors_mu_);
    for (auto& [name, tensor] : tensors_) {
      for (auto& op : tensor->waiting) waiting.push_back(op);
      tensor->waiting.clear();
      if (tensor->state != TensorState::kFailed) {
        tensor->state = TensorState::kFailed;
        tensor->error = reason;
      }
    }
  }
  for (auto& op : waiting) op->FailBeforeStart(reason);
  if (local_reducer_ != nullptr) local_reducer_->Fail(reason);
  if (device_reducer_.reducer != nullptr) device_reducer_.reducer->Fail(reason);
  data_queue_.Push(FailEverything{reason});
  barrier_cv_.notify_all();
}

std::shared_ptr<Operation> EngineImpl::FindHandle(int64_t handle) {
  std::lock_guard<std::mutex> lock(handles_mu_);
  auto it = handles_.find(handle);
  return it == handles_.end() ? nullptr : it->second;
}

absl::StatusOr<bool> EngineImpl::Poll(int64_t handle) {
  std::shared_ptr<Operation> op = FindHandle(handle);
  if (op == nullptr) return absl::NotFoundError(absl::StrCat("unknown handle ", handle));
  std::lock_guard<std::mutex> lock(op->mu);
  if (!op->done) return false;
  if (!op->status.ok()) return op->status;
  return true;
}

absl::Status EngineImpl::Wait(int64_t handle, int64_t timeout_ms) {
  std::shared_ptr<Operation> op = FindHandle(handle);
  if (op == nullptr) return absl::NotFoundError(absl::StrCat("unknown handle ", handle));
  absl::Status status;
  {
    std::unique_lock<std::mutex> lock(op->mu);
    if (timeout_ms < 0) {
      op->cv.wait(lock, [&] { return op->done; });
    } else if (!op->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                                [&] { return op->done; })) {
      return absl::DeadlineExceededError(absl::StrCat("push_pull of '", op->name,
                                                      "' not done after ", timeout_ms, " ms"));
    }
    status = op->status;
  }
  Release(handle).IgnoreError();
  return status;
}

absl::Status EngineImpl::Release(int64_t handle) {
  std::lock_guard<std::mutex> lock(handles_mu_);
  if (handles_.erase(handle) == 0) {
    return absl::NotFoundError(absl::StrCat("unknown handle ", handle));
  }
  return absl::OkStatus();
}

absl::Status EngineImpl::Barrier(int64_t timeout_ms) {
  if (absl::Status s = EngineStatus(); !s.ok()) return s;
  uint64_t sequence;
  {
    std::lock_guard<std::mutex> lock(barrier_mu_);
    sequence = ++barrier_sequence_;
  }
  proto::ControlMessage msg;
  msg.mutable_barrier_request()->set_group("workers");
  msg.mutable_barrier_request()->set_sequence(sequence);
  control_queue_.Push(SendControl{std::move(msg)});
  std::unique_lock<std::mutex> lock(barrier_mu_);
  auto released = [&] { return barrier_released_ >= sequence || failed_.load(); };
  if (timeout_ms < 0) {
    barrier_cv_.wait(lock, released);
  } else if (!barrier_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), released)) {
    return absl::DeadlineExceededError(absl::StrCat("barrier ", sequence, " not released after ",
                                                    timeout_ms, " ms"));
  }
  lock.unlock();
  return EngineStatus();
}

void EngineImpl::OnBarrierRelease(const proto::BarrierRelease& release) {
  {
    std::lock_guard<std::mutex> lock(barrier_mu_);
    barrier_released_ = std::max<uint64_t>(barrier_released_, release.sequence());
  }
  barrier_cv_.notify_all();
}

absl::Status EngineImpl::Shutdown() {
  if (shut_down_) return absl::OkStatus();
  shut_down_ = true;
  // Let operations in flight finish, within the time a failed peer takes to be detected.
  const int64_t deadline = MonotonicMs() + config_.heartbeat_timeout_ms() + 5000;
  std::vector<std::shared_ptr<Operation>> pending;
  {
    std::lock_guard<std::mutex> lock(handles_mu_);
    for (auto& [h, op] : handles_) pending.push_back(op);
  }
  for (auto& op : pending) {
    std::unique_lock<std::mutex> lock(op->mu);
    op->cv.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(0, deadline - MonotonicMs())),
                    [&] { return op->done; });
  }
  shutting_down_ = true;
  FailEngine(absl::CancelledError("the engine shut down with this operation in flight"));
  proto::ControlMessage done;
  done.mutable_worker_done();
  control_queue_.Push(SendControl{std::move(done)});
  control_queue_.Push(StopControl{});
  data_queue_.Push(StopData{});
  // Device callbacks queue pool work and call into the engine: let them run out first.
  WaitForDeviceCallbacks(deadline);
  if (pool_ != nullptr) pool_->Shutdown();
  if (data_thread_.joinable()) data_thread_.join();
  if (control_thread_.joinable()) control_thread_.join();
  // Operations whose payload ZeroMQ held are released with the sockets; wake their waiters.
  for (auto& op : pending) op->MarkDone();
  // The host reducer first: its callbacks include the NCCL adapter's control plane's.
  if (local_reducer_ != nullptr) local_reducer_->Stop();  // its callbacks still see it
  if (device_reducer_.reducer != nullptr) device_reducer_.reducer->Stop();
  device_reducer_.reducer.reset();
  local_reducer_.reset();  // its socket closes before the context ends
  context_.reset();
  return absl::OkStatus();
}

// --- WorkerEngine

WorkerEngine::WorkerEngine(std::unique_ptr<EngineImpl> impl) : impl_(std::move(impl)) {}
WorkerEngine::~WorkerEngine() { impl_->Shutdown().IgnoreError(); }

absl::StatusOr<std::unique_ptr<WorkerEngine>> WorkerEngine::Start(const std::string& config_path) {
  auto impl = std::make_unique<EngineImpl>();
  if (absl::Status s = impl->Init(config_path); !s.ok()) return s;
  return std::unique_ptr<WorkerEngine>(new WorkerEngine(std::move(impl)));
}

const EngineInfo& WorkerEngine::info() const { return impl_->info; }
absl::Status WorkerEngine::Declare(const std::string& name, int64_t count, proto::DType dtype) {
  return impl_->Declare(name, count, dtype);
}
absl::StatusOr<int64_t> WorkerEngine::PushPull(const PushPullRequest& r) { return impl_->PushPull(r); }
absl::StatusOr<bool> WorkerEngine::Poll(int64_t h) { return impl_->Poll(h); }
absl::Status WorkerEngine::Wait(int64_t h, int64_t t) { return impl_->Wait(h, t); }
absl::Status WorkerEngine::Release(int64_t h) { return impl_->Release(h); }
absl::Status WorkerEngine::Barrier(int64_t t) { return impl_->Barrier(t); }
absl::Status WorkerEngine::Shutdown() { return impl_->Shutdown(); }
void WorkerEngine::SetLearningRate(double lr) { impl_->SetLearningRate(lr); }
EngineStats WorkerEngine::Stats() const { return impl_->Stats(); }
absl::StatusOr<std::string> WorkerEngine::SaveTensorState(const std::string& name) {
  return impl_->SaveTensorState(name);
}
absl::Status WorkerEngine::LoadTensorState(const std::string& name, absl::string_view state) {
  return impl_->LoadTensorState(name, state);
}
absl::Status WorkerEngine::TensorStrategy(const std::string& name, int64_t* round,
                                          int64_t* version) {
  return impl_->TensorStrategy(name, round, version);
}

}  // namespace bytecomp::worker
