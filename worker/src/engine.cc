#include "engine.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "bytecomp/common.h"
#include "bytecomp/common/net.h"
#include "data_loop.h"
#include "nccl_device_summer.h"

namespace bytecomp::worker {

absl::StatusOr<std::unique_ptr<WorkerEngine>> WorkerEngine::Start(const std::string& config_path) {
  absl::StatusOr<JoinedJob> job = JoinJob(config_path);
  if (!job.ok()) return job.status();
  auto engine = std::make_unique<Engine>(*std::move(job));
  if (absl::Status s = engine->Run(); !s.ok()) return s;
  return std::unique_ptr<WorkerEngine>(std::move(engine));
}

namespace {

std::unique_ptr<cpu_offload::PriorityThreadPool> CodecPool(int threads) {
  cpu_offload::ThreadPoolOptions options;
  options.num_threads = static_cast<size_t>(threads);
  options.name = "bc-codec";
  return std::make_unique<cpu_offload::PriorityThreadPool>(options);
}

}  // namespace

Engine::Engine(JoinedJob job)
    : config_(std::move(job.config)),
      topology_(std::move(job.topology)),
      info_(job.info),
      context_(std::move(job.context)),
      security_(std::move(job.security)),
      client_(std::move(job.client)),
      reducers_(std::move(job.reducers)),
      observer_(config_, info_.rank, client_->shared_clock()),
      tensors_(info_.num_servers, strategies_,
               [this](proto::ControlMessage declaration) {
                 control_queue_.Push(SendControl{std::move(declaration)});
               }),
      tracker_([this](const std::shared_ptr<Operation>& op) { Complete(op); }),
      profiler_(config_.profile_rounds() > 0
                    ? std::make_unique<ReadyProfiler>(config_.profile_rounds())
                    : nullptr),
      profiling_(profiler_ != nullptr),
      pool_(CodecPool(job.compress_threads)),
      stage_context_{info_.rank,   info_.size, &strategies_, &learning_rate_,     pool_.get(),
                     &data_queue_, &tracker_,  &traffic_,    observer_.timeline()},
      host_stages_(stage_context_),
      device_stages_(stage_context_, host_stages_) {
  traffic_.metrics = observer_.metrics();
  observer_.WatchEngine([this] { return Stats(); }, &traffic_.queued_partitions,
                        &traffic_.inflight_bytes);
  if (reducers_.host != nullptr) {
    hierarchy_ = std::make_unique<Hierarchy>(
        reducers_, device_stages_,
        [this](const std::shared_ptr<Operation>& outer,
               absl::AnyInvocable<void(absl::Status)> done) {
          return PushPullMachineSum(outer, std::move(done));
        },
        [this](const absl::Status& reason) { FailEngine(reason); });
  }
}

Engine::~Engine() { Shutdown().IgnoreError(); }

absl::Status Engine::Run() {
  if (absl::Status s = strategies_.Add(topology_.strategy()); !s.ok()) return s;
  BC_LOG_DEBUG("joined: ", info_.size, " workers, ", info_.num_servers, " servers");
  DataLoop::Wiring wiring;
  wiring.config = &config_;
  wiring.topology = &topology_;
  wiring.context = context_.get();
  wiring.security = security_.get();
  wiring.rank = info_.rank;
  wiring.token = client_->token();
  wiring.data_key = client_->data_key();
  wiring.commands = &data_queue_;
  wiring.to_control = &control_queue_;
  wiring.tracker = &tracker_;
  wiring.traffic = &traffic_;
  wiring.held = &held_payloads_;
  wiring.timeline = observer_.timeline();
  data_thread_ = std::thread([wiring] { DataLoop(wiring).Run(); });
  if (config_.collectives()) {
    rendezvous_ = std::make_unique<SchedulerRendezvousStore>(
        [this](proto::ControlMessage m) { control_queue_.Push(SendControl{std::move(m)}); },
        std::chrono::milliseconds(config_.connect_timeout_ms()));
  }
  control_thread_ = std::thread([this, client = std::move(client_)]() mutable {
    ControlLoop(std::move(client), control_queue_, *this).Run();
  });
  if (config_.collectives()) return JoinCollectives();
  return absl::OkStatus();
}

absl::Status Engine::JoinCollectives() {
  absl::StatusOr<std::string> advertised =
      AdvertisedHost(config_.advertise_host(), config_.scheduler_address());
  if (!advertised.ok()) return advertised.status();
  const std::string& host = *advertised;
  if (absl::Status s = security_->CheckPlainHost(host, "the collectives' address (gloo)");
      !s.ok()) {
    return s;
  }
  CollectiveExchange::Options options;
  options.rank = info_.rank;
  options.size = info_.size;
  options.timeout = std::chrono::milliseconds(config_.push_pull_timeout_ms());
  options.device_summer = MakeNcclDeviceSummer(info_.rank, info_.size, options.timeout);
  absl::StatusOr<std::unique_ptr<CollectiveExchange>> joined =
      CollectiveExchange::Connect(*rendezvous_, host, options);
  if (!joined.ok()) return joined.status();
  collectives_ = *std::move(joined);
  host_stages_.SetCollectives(collectives_.get());
  if (!config_.key_file().empty()) {
    BC_LOG_WARNING("collectives (gloo, on ", host,
                   ") carry no encryption: tensors whose strategy entries name allreduce or "
                   "allgather travel in the clear (Strategy.allow_unencrypted_collectives)");
  }
  BC_LOG_DEBUG("joined the collectives of ", info_.size, " workers on ", host);
  return absl::OkStatus();
}

absl::Status Engine::Declare(const std::string& name, int64_t element_count, ElementType dtype,
                             absl::Span<const int64_t> shape) {
  if (absl::Status s = EngineStatus(); !s.ok()) return s;
  return tensors_.Declare(name, element_count, WireDType(dtype), shape);
}

// --- A push_pull's way: request -> operation -> the tensor's queue -> its stages (the pipeline
// brings its partitions to the data loop, whose pull replies come back to the stages) -> each
// partition's events to the tracker -> Complete.

absl::StatusOr<int64_t> Engine::PushPull(const PushPullRequest& request) {
  if (request.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", request.name, "': data is NULL"));
  }
  if (absl::Status s = EngineStatus(); !s.ok()) return s;
  if (hierarchy_ != nullptr) {
    if (absl::Status s = hierarchy_->Check(request); !s.ok()) return s;
  }
  if (const auto groups = strategies_.fusion_groups();
      groups != nullptr && groups->by_name.contains(request.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", request.name,
                     "' is the name of a fusion group (Strategy.fusion_groups): its members' "
                     "push_pulls make its rounds"));
  }
  absl::StatusOr<std::shared_ptr<Operation>> made = NewOperation(request);
  if (!made.ok()) return made.status();
  std::shared_ptr<Operation> op = *std::move(made);
  if (hierarchy_ != nullptr) return PushPullInMachine(op);
  TensorTable::Started started;
  if (absl::Status s = tensors_.Queue(
          op, [&] { Accept(op); }, &started);
      !s.ok())
    return s;
  ++operations_;
  StartStages(started);
  return op->handle;
}

absl::StatusOr<std::shared_ptr<Operation>> Engine::NewOperation(const PushPullRequest& request) {
  auto op = std::make_shared<Operation>(request);
  op->ready_us = telemetry::Timeline::NowUs();
  if (!request.on_device) {
    op->stages = &host_stages_;
    return op;
  }
  absl::StatusOr<std::unique_ptr<DeviceWork>> device = device_stages_.WorkFor(request);
  if (!device.ok()) return device.status();
  op->device = *std::move(device);
  op->stages = &device_stages_;
  return op;
}

absl::StatusOr<int64_t> Engine::PushPullInMachine(const std::shared_ptr<Operation>& op) {
  absl::StatusOr<LocalReducer*> reducer = hierarchy_->ReducerFor(*op);
  if (!reducer.ok()) return reducer.status();
  std::string tag;
  if (absl::Status s = tensors_.BeginMachineRound(
          op, [&] { Accept(op); }, &tag);
      !s.ok()) {
    return s;
  }
  if (tag.empty()) return op->handle;  // its tensor had failed, and so has the operation
  ++operations_;
  hierarchy_->Start(*reducer, op, tag);
  return op->handle;
}

absl::Status Engine::PushPullMachineSum(const std::shared_ptr<Operation>& outer,
                                        absl::AnyInvocable<void(absl::Status)> done) {
  // An internal operation: no handle, not profiled (its outer operation is).
  absl::StatusOr<std::shared_ptr<Operation>> made = NewOperation(outer->request);
  if (!made.ok()) return made.status();
  std::shared_ptr<Operation> network = *std::move(made);
  network->SetOnDone(std::move(done));
  TensorTable::Started started;
  if (absl::Status s = tensors_.Queue(
          network, [] {}, &started);
      !s.ok()) {
    network->SetOnDone(nullptr);
    return s;
  }
  StartStages(started);
  return absl::OkStatus();
}

void Engine::JoinGroupRound(const std::shared_ptr<Operation>& member) {
  const std::shared_ptr<const StrategySwitch::FusionGroups> groups = strategies_.fusion_groups();
  const proto::FusionGroup* group =
      groups != nullptr ? groups->Named(member->plan().fusion_group) : nullptr;
  if (group == nullptr) {  // the switch planned it so: it knows the group
    return CompleteMember(member, absl::InternalError(absl::StrCat(
                                      "fusion group '", member->plan().fusion_group, "' unknown")));
  }
  absl::StatusOr<std::optional<TensorFusion::GroupRound>> round = fusion_.Add(member, *group);
  if (!round.ok()) return CompleteMember(member, round.status());
  if (round->has_value()) StartGroupRound(**std::move(round));
  // An engine that failed since this member started has already taken the waiting members
  // (FailEngine): this one may have come after, so take it now.
  if (absl::Status failed = EngineStatus(); !failed.ok()) {
    for (const std::shared_ptr<Operation>& waiting : fusion_.TakeWaiting()) {
      CompleteMember(waiting, failed);
    }
  }
}

void Engine::CompleteMember(const std::shared_ptr<Operation>& member, const absl::Status& status) {
  if (!status.ok()) member->RecordError(status);
  // Its tensor is idle before the caller sees it done (as Complete does).
  TensorTable::Started started;
  tensors_.Finished(*member, status, &started);
  member->MarkDone();
  StartStages(started);
}

void Engine::StartGroupRound(TensorFusion::GroupRound round) {
  // An internal operation (no handle): its members are the caller's.
  const std::string name = round.request.name;
  const uint64_t index = round.round;
  absl::StatusOr<std::shared_ptr<Operation>> made = NewOperation(round.request);
  if (!made.ok()) return FinishGroupRound(name, index, made.status());
  std::shared_ptr<Operation> group = *std::move(made);
  group->members_round = index;
  // The end queues the copies out to the members on the pool (an operation's on-done work
  // only queues); a stopped pool runs the task at once.
  group->SetOnDone([this, name, index, priority = round.request.priority](absl::Status status) {
    pool_
        ->Submit(priority, [this, name, index,
                            status](absl::Status) { FinishGroupRound(name, index, status); })
        .IgnoreError();
  });
  TensorTable::Started started;
  if (absl::Status s = tensors_.Queue(
          group, [] {}, &started);
      !s.ok()) {
    group->SetOnDone(nullptr);
    return FinishGroupRound(name, index, s);
  }
  StartStages(started);
}

void Engine::FinishGroupRound(const std::string& group, uint64_t round,
                              const absl::Status& status) {
  for (const std::shared_ptr<Operation>& member : fusion_.Finish(group, round, status)) {
    CompleteMember(member, status);
  }
}

void Engine::NoteProfileDone() {
  if (profiler_->done()) profiling_.store(false, std::memory_order_release);
}

void Engine::Accept(const std::shared_ptr<Operation>& op) {
  handles_.Register(op);
  if (!profiling_.load(std::memory_order_acquire)) return;
  const int64_t now_us = MonotonicUs();
  const PushPullRequest& r = op->request;
  bool measure_density = false;
  {
    absl::MutexLock lock(&profile_mu_);
    if (profiler_->done()) return;
    measure_density = profiler_->WantsBlockDensity(r.name);
  }
  // A host fp32 gradient's block density, for the planner's blocksparse: one pass, once.
  const double density =
      measure_density && !r.on_device && op->dtype() == proto::DTYPE_FLOAT32
          ? BlockDensity(static_cast<const float*>(r.data), static_cast<size_t>(r.element_count))
          : -1;
  std::optional<proto::ModelProfile> profile;
  {
    absl::MutexLock lock(&profile_mu_);
    if (profiler_->done()) return;
    profile = profiler_->Record(r.name, r.element_count, static_cast<int>(DTypeSize(op->dtype())),
                                now_us, density, SampleCpu(), r.on_device);
    NoteProfileDone();
  }
  if (profile.has_value()) {
    proto::ControlMessage report;
    *report.mutable_profile_report()->mutable_profile() = *std::move(profile);
    control_queue_.Push(SendControl{std::move(report)});
  }
}

void Engine::StartStages(const TensorTable::Started& started) {
  for (const std::shared_ptr<Operation>& op : started) {
    if (op->plan().fused()) {
      JoinGroupRound(op);
      continue;
    }
    if (op->plan().ratio_window_rounds > 0) {
      ratio_windows_.Started(op->request.name, op->round(), MonotonicUs());
    }
    tracker_.Expect(*op);
    observer_.Started(*op);
    op->stages->Start(op);
  }
}

void Engine::Complete(const std::shared_ptr<Operation>& op) {
  const int64_t done_us = MonotonicUs();  // before the caller can see it done
  const absl::Status status = op->status();
  if (status.ok()) {
    if (std::optional<proto::ControlMessage> report =
            observer_.Completed(*op, telemetry::Timeline::NowUs(), Stats())) {
      control_queue_.Push(SendControl{*std::move(report)});
    }
  }
  if (profiling_.load(std::memory_order_acquire) && status.ok()) {
    absl::MutexLock lock(&profile_mu_);
    const int64_t round = static_cast<int64_t>(op->round());
    if (profiler_->Wants(round)) {
      // The training thread's wait, for the forward time's (forward_timer.h).
      profiler_->RecordDone(round, done_us, SampleCpu(profiler_->caller_tid()));
    }
  }
  if (op->plan().ratio_window_rounds > 0 && status.ok()) RecordRatioRound(*op, done_us);
  // The tensor is idle before the caller sees the operation done: a save_state right after the
  // wait must not find it in flight.
  TensorTable::Started started;
  tensors_.Finished(*op, status, &started);
  op->MarkDone();
  StartStages(started);
}

void Engine::RecordRatioRound(const Operation& op, int64_t done_us) {
  // The kept energy over the partitions (host_pipeline.cc measured each; -1 if one was not).
  double sent = 0, total = 0;
  bool measured = op.codecs() != nullptr;
  for (int64_t p = 0; measured && p < op.layout().num_partitions(); ++p) {
    const PartitionCodec& pc = op.codecs()->partitions[p];
    measured = pc.sent_energy >= 0;
    sent += pc.sent_energy;
    total += pc.compensated_energy;
  }
  const double kept = !measured ? -1 : total > 0 ? sent / total : 1;
  std::optional<proto::RatioReport> report = ratio_windows_.Finished(
      op.request.name, op.round(), op.plan().version, op.plan().ratio_window_rounds, kept, done_us);
  if (!report.has_value()) return;
  proto::ControlMessage message;
  *message.mutable_ratio_report() = *std::move(report);
  control_queue_.Push(SendControl{std::move(message)});
}

// --- Handles, statistics, checkpoints.

namespace {

// A wait without a limit of its own waits the job's default, and says which one ran out.
absl::Status WithDefaultBound(absl::Status status, bool defaulted) {
  if (!defaulted || !absl::IsDeadlineExceeded(status)) return status;
  return absl::DeadlineExceededError(
      absl::StrCat(status.message(),
                   " (the bound of a wait without one: ClusterConfig.push_pull_timeout_ms, "
                   "or BYTECOMP_PUSH_PULL_TIMEOUT_MS on this worker)"));
}

}  // namespace

absl::Status Engine::Wait(int64_t handle, int64_t timeout_ms) {
  const bool defaulted = timeout_ms < 0;
  const bool profiling = profiling_.load(std::memory_order_acquire);
  const int64_t start_us = profiling ? MonotonicUs() : 0;
  absl::Status status = WithDefaultBound(
      handles_.Wait(handle, defaulted ? info_.wait_timeout_ms : timeout_ms), defaulted);
  if (profiling) {
    // The training thread's waits, for the profile's forward time (forward_timer.h).
    const int64_t end_us = MonotonicUs();
    absl::MutexLock lock(&profile_mu_);
    if (!profiler_->done() && ThisThreadId() == profiler_->caller_tid()) {
      profiler_->RecordWait(start_us, end_us);
    }
  }
  return status;
}

EngineStats Engine::Stats() const {
  EngineStats s;
  s.pushed_bytes = traffic_.pushed_bytes.load();
  s.pushed_raw_bytes = traffic_.pushed_raw_bytes.load();
  s.pulled_bytes = traffic_.pulled_bytes.load();
  s.pulled_raw_bytes = traffic_.pulled_raw_bytes.load();
  s.operations = operations_.load();
  return s;
}

absl::Status Engine::TensorStrategy(const std::string& name, int64_t* round, int64_t* version) {
  return tensors_.TensorStrategy(name, /*machine_rounds=*/hierarchy_ != nullptr, round, version);
}

absl::StatusOr<std::string> Engine::SaveTensorState(const std::string& name) {
  // A fusion group's member has its own state (none of its rounds in its group's adds to
  // it); the group's error feedback is the group's tensor's, saved by the group's name.
  return tensors_.SaveState(name);
}

absl::Status Engine::LoadTensorState(const std::string& name, absl::string_view state) {
  return tensors_.LoadState(name, state);
}

// --- The scheduler's messages.

void Engine::OnDeclareReply(const proto::DeclareReply& reply) {
  if (observer_.timeline() != nullptr && reply.ok()) {
    observer_.timeline()->NameTensor(reply.tensor_id(), reply.name());
  }
  TensorTable::Started started;
  tensors_.OnDeclareReply(reply, &started);
  StartStages(started);
}

uint64_t Engine::OnStrategyPrepare(uint64_t version) { return strategies_.Prepare(version); }

void Engine::OnStrategyCommit(const proto::Strategy& strategy) {
  strategies_.Commit(strategy);
  TensorTable::Started started;
  tensors_.ReleaseHeld(&started);
  StartStages(started);
}

absl::Status Engine::Barrier(int64_t timeout_ms) {
  if (absl::Status s = EngineStatus(); !s.ok()) return s;
  const bool defaulted = timeout_ms < 0;
  if (defaulted) timeout_ms = info_.wait_timeout_ms;
  uint64_t sequence;
  {
    absl::MutexLock lock(&barrier_mu_);
    sequence = ++barrier_sequence_;
  }
  proto::ControlMessage msg;
  msg.mutable_barrier_request()->set_group("workers");
  msg.mutable_barrier_request()->set_sequence(sequence);
  control_queue_.Push(SendControl{std::move(msg)});
  {
    absl::MutexLock lock(&barrier_mu_);
    const int64_t deadline = MonotonicMs() + timeout_ms;
    while (barrier_released_ < sequence && !failed_.load()) {
      const int64_t left = deadline - MonotonicMs();
      if (left <= 0) {
        return WithDefaultBound(
            absl::DeadlineExceededError(
                absl::StrCat("barrier ", sequence, " not released after ", timeout_ms, " ms")),
            defaulted);
      }
      barrier_cv_.WaitWithTimeout(&barrier_mu_, absl::Milliseconds(left));
    }
  }
  return EngineStatus();
}

void Engine::OnBarrierRelease(const proto::BarrierRelease& release) {
  absl::MutexLock lock(&barrier_mu_);
  barrier_released_ = std::max<uint64_t>(barrier_released_, release.sequence());
  barrier_cv_.SignalAll();
}

// --- Failure and shutdown.

absl::Status Engine::EngineStatus() const {
  if (!failed_.load()) return absl::OkStatus();
  absl::MutexLock lock(&failure_mu_);
  return failure_;
}

void Engine::FailEngine(const absl::Status& reason) {
  {
    absl::MutexLock lock(&failure_mu_);
    if (failed_.load()) return;
    failure_ = reason;
    failed_.store(true);
  }
  if (!shutting_down_) BC_LOG_ERROR(reason.message());
  // Operations not yet handed to the data thread fail here; those in flight fail there.
  for (const std::shared_ptr<Operation>& op : tensors_.FailAll(reason)) op->FailBeforeStart(reason);
  for (const std::shared_ptr<Operation>& member : fusion_.TakeWaiting()) {
    CompleteMember(member, reason);
  }
  reducers_.Fail(reason);
  data_queue_.Push(FailEverything{reason});
  absl::MutexLock lock(&barrier_mu_);
  barrier_cv_.SignalAll();
}

absl::Status Engine::Shutdown() {
  if (shut_down_.exchange(true)) return absl::OkStatus();
  // Let operations in flight finish, within the time a failed peer takes to be detected.
  const int64_t deadline = MonotonicMs() + config_.heartbeat_timeout_ms() + 5000;
  const std::vector<std::shared_ptr<Operation>> pending = handles_.All();
  for (const std::shared_ptr<Operation>& op : pending) {
    op->WaitOutcome(std::max<int64_t>(0, deadline - MonotonicMs()));
  }
  shutting_down_ = true;
  FailEngine(absl::CancelledError("the engine shut down with this operation in flight"));
  proto::ControlMessage done;
  done.mutable_worker_done();
  control_queue_.Push(SendControl{std::move(done)});
  control_queue_.Push(StopControl{});
  data_queue_.Push(StopData{});
  // Device callbacks queue pool work and call into the engine: let them run out first.
  device_stages_.WaitForCallbacks(deadline);
  // Collective results go to the pool: the exchange ends first (the leader tells the others).
  if (collectives_ != nullptr) {
    collectives_->Stop();
    const CollectiveExchange::Counts c = collectives_->counts();
    BC_LOG_INFO(
        "collectives: ", c.items, " partition rounds summed or gathered in ", c.batches,
        " batches (", c.collectives, " collectives)",
        c.device_items > 0 ? absl::StrCat("; ", c.device_items, " summed in device memory (NCCL)")
                           : "",
        c.fp16_overflows > 0
            ? absl::StrCat("; ", c.fp16_overflows, " fp16 sums overflowed and ran again in fp32")
            : "");
  }
  if (const TensorFusion::Counts c = fusion_.counts(); c.members > 0) {
    BC_LOG_INFO("tensor fusion: ", c.members, " push_pulls of fusion groups' members in ",
                c.group_rounds, " rounds of their groups");
  }
  pool_->Shutdown();
  if (data_thread_.joinable()) data_thread_.join();
  if (control_thread_.joinable()) control_thread_.join();
  reducers_.Stop();
  client_.reset();    // set when the control thread never started
  security_.reset();  // after the local root's listening socket, before the context
  // After every socket. Terminating the context waits for ZeroMQ to drop what the closed
  // sockets still queued, which calls the free function of every zero-copy payload.
  context_.reset();
  // Only now wake the waiters of operations still pending (one whose stages never handed it
  // on): a waiter may free the operation's memory, and ZeroMQ no longer holds any of it.
  for (const std::shared_ptr<Operation>& op : pending) op->MarkDone();
  return absl::OkStatus();
}

}  // namespace bytecomp::worker
