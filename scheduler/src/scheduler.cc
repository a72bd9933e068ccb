#include "bytecomp/scheduler/scheduler.h"

#include "bytecomp/planner/inputs.h"
#include "bytecomp/scheduler/auto_planner.h"
#include "bytecomp/scheduler/local_groups.h"

#include <algorithm>
#include <csignal>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bytecomp/common/config.h"
#include "bytecomp/common/dtype.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/net.h"
#include "bytecomp/common/transport.h"

namespace bytecomp {
namespace {

// Upper bound on one poll, so that Stop() from another thread is seen promptly. Signals
// interrupt the poll at once.
constexpr int64_t kMaxPollMs = 100;

std::string RoleName(proto::Role role) {
  switch (role) {
    case proto::ROLE_WORKER: return "worker";
    case proto::ROLE_SERVER: return "server";
    case proto::ROLE_SCHEDULER: return "scheduler";
    default: return absl::StrCat("role ", static_cast<int>(role));
  }
}

std::string Seconds(int64_t ms) { return absl::StrFormat("%.1f s", ms / 1000.0); }

std::string SignalName(int signal_number) {
  switch (signal_number) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return absl::StrCat("signal ", signal_number);
  }
}

std::string BodyName(const proto::ControlMessage& m) {
  const auto* field = m.GetDescriptor()->FindFieldByNumber(m.body_case());
  return field == nullptr ? "empty message" : field->name();
}

std::string DescribeDeclaration(const proto::DeclareTensor& d) {
  return absl::StrCat(d.element_count(), " elements of ",
                      IsValidDType(d.dtype()) ? std::string(DTypeName(static_cast<DType>(d.dtype())))
                                              : absl::StrCat("dtype ", d.dtype()));
}

// A routing id may hold any bytes; print it as hex for logs.
std::string PrintableIdentity(const std::string& id) {
  std::string out;
  for (unsigned char c : id) absl::StrAppend(&out, absl::Hex(c, absl::kZeroPad2));
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(SchedulerOptions options) {
  if (absl::Status s = ValidateClusterConfig(options.config); !s.ok()) return s;
  StrategyKeeper strategy;
  if (absl::Status s = strategy.LoadInitial(options.auto_strategy ? "" : options.strategy_path);
      !s.ok()) {
    return s;
  }
  proto::ClusterDescription plan_cluster;
  proto::CostTable plan_costs;
  if (options.auto_strategy) {
    if (options.plan_cluster_path.empty() || options.plan_costs_path.empty()) {
      return absl::InvalidArgumentError(
          "--strategy=auto needs --plan_cluster (a ClusterDescription: links, GPUs) and "
          "--plan_costs (a codec cost table, e.g. from bytecomp-plan --calibrate)");
    }
    absl::StatusOr<proto::ClusterDescription> c = planner::LoadClusterDescription(options.plan_cluster_path);
    if (!c.ok()) return c.status();
    absl::StatusOr<proto::CostTable> t = planner::LoadCostTable(options.plan_costs_path);
    if (!t.ok()) return t.status();
    plan_cluster = *c;
    plan_costs = *t;
    options.config.set_profile_rounds(std::max(1, options.profile_rounds));
  }
  int port = options.port;
  if (port < 0) {
    absl::StatusOr<HostPort> hp = ParseHostPort(options.config.scheduler_address());
    if (!hp.ok()) return hp.status();
    port = hp->port;
  }
  auto context = std::make_unique<zmq::context_t>(1);
  auto socket = std::make_unique<zmq::socket_t>(*context, zmq::socket_type::router);
  ConfigureSocket(*socket);
  // A node that sets its own routing id keeps it across a TCP reconnect; handover lets the
  // new connection take that id over instead of being refused as a duplicate.
  socket->set(zmq::sockopt::router_handover, 1);
  absl::StatusOr<int> bound = BindTcp(*socket, options.bind_host, port);
  if (!bound.ok()) {
    return absl::UnavailableError(
        absl::StrCat("scheduler: ", bound.status().message(),
                     " (is another scheduler running on that port?)"));
  }
  std::unique_ptr<Scheduler> scheduler(
      new Scheduler(std::move(options), std::move(context), std::move(socket), *bound));
  scheduler->strategy_ = std::move(strategy);
  scheduler->plan_cluster_ = std::move(plan_cluster);
  scheduler->plan_costs_ = std::move(plan_costs);
  return scheduler;
}

Scheduler::Scheduler(SchedulerOptions options, std::unique_ptr<zmq::context_t> context,
                     std::unique_ptr<zmq::socket_t> socket, int port)
    : options_(std::move(options)),
      config_(options_.config),
      context_(std::move(context)),
      socket_(std::move(socket)),
      port_(port),
      worker_by_rank_(config_.num_workers()),
      server_by_rank_(config_.num_servers()),
      assigner_(config_.num_servers(), config_.partition_bytes()) {}

Scheduler::~Scheduler() {
  if (socket_) {
    socket_->set(zmq::sockopt::linger, options_.shutdown_linger_ms);
    socket_->close();
  }
  // Destroying the context waits (at most the linger) for queued messages to leave.
  context_.reset();
}

void Scheduler::Stop() { stop_requested_.store(true); }

void Scheduler::StopForSignal(int signal_number) {
  stop_signal_.store(signal_number);
  stop_requested_.store(true);
}

void Scheduler::RequestReload() { reload_requested_.store(true); }

void Scheduler::ReloadStrategy() {
  absl::StatusOr<proto::ControlMessage> prepare = strategy_.BeginReload();
  if (!prepare.ok()) {
    BC_LOG_ERROR("strategy not reloaded, version ", strategy_.current().version(),
                 " stays: ", prepare.status().message());
    return;
  }
  BC_LOG_INFO("reloading strategy from ", strategy_.path(), ": preparing version ",
              prepare->strategy_prepare().version());
  for (const std::string& id : worker_by_rank_) {
    if (!id.empty()) Send(id, *prepare);
  }
}

void Scheduler::HandleProfileReport(Node& node, const proto::ProfileReport& report) {
  if (node.role != proto::ROLE_WORKER || !options_.auto_strategy || planned_) return;
  profiles_[node.rank] = report.profile();
  if (static_cast<int>(profiles_.size()) < config_.num_workers()) return;
  planned_ = true;
  std::vector<proto::ModelProfile> profiles;
  for (auto& [rank, p] : profiles_) profiles.push_back(p);
  proto::ClusterDescription cluster = plan_cluster_;
  BC_LOG_INFO("--strategy=auto: ", ChooseLinks(options_.plan_links, links_.Median(), &cluster));
  AutoPlanJob job;
  job.workers = config_.num_workers();
  job.servers = config_.num_servers();
  if (config_.hierarchical()) job.hierarchical_machines = static_cast<int>(local_.machines.size());
  job.profiled_uncompressed = IsUncompressed(strategy_.current());
  absl::StatusOr<AutoPlan> plan = PlanFromProfiles(profiles, cluster, plan_costs_, job);
  if (!plan.ok()) {
    BC_LOG_ERROR("--strategy=auto: planning failed, training goes on uncompressed: ",
                 plan.status().message());
    return;
  }
  BC_LOG_INFO("--strategy=auto: ", plan->summary);
  absl::StatusOr<proto::ControlMessage> prepare = strategy_.BeginUpdate(plan->strategy);
  if (!prepare.ok()) {
    BC_LOG_ERROR("--strategy=auto: ", prepare.status().message());
    return;
  }
  for (const std::string& id : worker_by_rank_) {
    if (!id.empty()) Send(id, *prepare);
  }
}

void Scheduler::HandleLinkProbeReport(Node& node, const proto::LinkProbeReport& report) {
  if (node.role != proto::ROLE_WORKER) {
    SendError(node.identity, absl::StrCat("LinkProbeReport from ", NodeName(node)));
    return;
  }
  if (report.links_size() != config_.num_servers()) {
    BC_LOG_WARNING(NodeName(node), " reported link probes of ", report.links_size(),
                   " servers, the job has ", config_.num_servers());
  }
  if (links_.Add(node.rank, report, config_.num_workers())) BC_LOG_INFO(links_.Table());
}

void Scheduler::HandleStrategyPrepareReply(Node& node, const proto::StrategyPrepareReply& reply) {
  if (node.role != proto::ROLE_WORKER) {
    SendError(node.identity, absl::StrCat("StrategyPrepareReply from ", NodeName(node)));
    return;
  }
  std::optional<proto::ControlMessage> commit =
      strategy_.OnPrepareReply(node.rank, reply, config_.num_workers());
  if (!commit.has_value()) return;
  // Servers first: they validate pushes against the version a worker names.
  for (const std::string& id : server_by_rank_) {
    if (!id.empty()) Send(id, *commit);
  }
  for (const std::string& id : worker_by_rank_) {
    if (!id.empty()) Send(id, *commit);
  }
}

absl::Status Scheduler::Run() {
  if (ran_) return absl::FailedPreconditionError("Scheduler::Run called twice");
  ran_ = true;
  start_ms_ = MonotonicMs();
  BC_LOG_INFO("listening on ", options_.bind_host, ":", port_, " for ", config_.num_workers(),
              " workers and ", config_.num_servers(), " servers (registration timeout ",
              Seconds(config_.connect_timeout_ms()), ", heartbeat timeout ",
              Seconds(config_.heartbeat_timeout_ms()), ")");
  while (!final_status_.has_value()) {
    if (stop_requested_.load()) {
      const int signal_number = stop_signal_.load();
      const std::string reason = signal_number != 0
                                     ? absl::StrCat("scheduler received ", SignalName(signal_number))
                                     : std::string("scheduler was stopped");
      BC_LOG_INFO(reason, "; telling every node to shut down");
      BroadcastShutdown(reason);
      Finish(absl::CancelledError(reason));
      break;
    }
    if (reload_requested_.exchange(false)) ReloadStrategy();
    const int64_t now = MonotonicMs();
    const int64_t wait_ms = std::clamp<int64_t>(NextDeadlineMs(now) - now, 0, kMaxPollMs);
    zmq::pollitem_t item{socket_->handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(wait_ms));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;  // a signal: the loop head looks at stop_requested_
      Finish(absl::InternalError(absl::StrCat("zmq poll: ", e.what())));
      break;
    }
    // Deadlines are checked only once the queue is drained: after a stall of this thread
    // (an overloaded machine), heartbeats still queued must count before anyone is declared
    // failed.
    bool drained = true;
    if (item.revents & ZMQ_POLLIN) {
      drained = false;
      for (int i = 0; i < 1024 && !final_status_.has_value(); ++i) {
        std::vector<zmq::message_t> frames;
        try {
          zmq::message_t frame;
          if (!socket_->recv(frame, zmq::recv_flags::dontwait)) {
            drained = true;
            break;
          }
          frames.push_back(std::move(frame));
          while (frames.back().more()) {
            zmq::message_t next;
            (void)socket_->recv(next, zmq::recv_flags::none);
            frames.push_back(std::move(next));
          }
        } catch (const zmq::error_t& e) {
          if (e.num() == EINTR) break;
          Finish(absl::InternalError(absl::StrCat("zmq recv: ", e.what())));
          break;
        }
        HandleMessage(frames, MonotonicMs());
      }
    }
    if (drained && !final_status_.has_value()) CheckDeadlines(MonotonicMs());
  }
  return *final_status_;
}

void Scheduler::LogBadMessage(const std::string& what) {
  ++bad_messages_;
  // A peer stuck in a loop must not flood the log: the first ones, then every 1000th.
  if (bad_messages_ <= 20 || bad_messages_ % 1000 == 0) {
    BC_LOG_WARNING(what, " (bad message ", bad_messages_, " so far)");
  }
}

void Scheduler::Finish(absl::Status status) {
  if (!final_status_.has_value()) final_status_ = std::move(status);
}

// ---------------------------------------------------------------------------------------
// Incoming messages

void Scheduler::HandleMessage(std::vector<zmq::message_t>& frames, int64_t now_ms) {
  if (frames.empty()) return;
  const std::string identity = FrameToString(frames[0]);
  auto found = nodes_.find(identity);
  Node* node = found == nodes_.end() ? nullptr : &found->second;
  const std::string who = node != nullptr ? NodeName(*node)
                                          : absl::StrCat("unregistered peer ",
                                                         PrintableIdentity(identity));
  // Any message counts as a sign of life, even a malformed one.
  if (node != nullptr) node->last_seen_ms = now_ms;

  if (frames.size() != 2) {
    LogBadMessage(absl::StrCat("malformed message from ", who, ": ", frames.size() - 1,
                               " frames, expected 1 (a ControlMessage)"));
    SendError(identity, absl::StrCat("expected one frame holding a ControlMessage, got ",
                                     frames.size() - 1, " frames"));
    return;
  }
  proto::ControlMessage message;
  if (absl::Status s = ParseFrame(frames[1], &message); !s.ok()) {
    LogBadMessage(absl::StrCat("from ", who, ": ", s.message()));
    SendError(identity, std::string(s.message()));
    return;
  }

  if (message.has_register_()) {
    HandleRegister(identity, message.register_(), now_ms);
    return;
  }
  if (message.has_error()) {
    // Never answer an error with an error: two confused peers would ping-pong forever.
    BC_LOG_WARNING(who, " reports an error: ", message.error().message());
    return;
  }
  if (node == nullptr) {
    LogBadMessage(absl::StrCat(who, " sent ", BodyName(message), " before registering"));
    SendError(identity, absl::StrCat("received ", BodyName(message),
                                     " from a node that has not registered; send Register "
                                     "first"));
    return;
  }
  switch (message.body_case()) {
    case proto::ControlMessage::kHeartbeat:
      return;  // last_seen_ms was updated above
    case proto::ControlMessage::kBarrierRequest:
      HandleBarrier(*node, message.barrier_request());
      return;
    case proto::ControlMessage::kDeclareTensor:
      HandleDeclare(*node, message.declare_tensor(), now_ms);
      return;
    case proto::ControlMessage::kWorkerDone:
      HandleWorkerDone(*node);
      return;
    case proto::ControlMessage::kProfileReport:
      HandleProfileReport(*node, message.profile_report());
      return;
    case proto::ControlMessage::kLinkProbeReport:
      HandleLinkProbeReport(*node, message.link_probe_report());
      return;
    case proto::ControlMessage::kStrategyPrepareReply:
      HandleStrategyPrepareReply(*node, message.strategy_prepare_reply());
      return;
    case proto::ControlMessage::kShutdown:
      HandleShutdownRequest(*node, message.shutdown());
      return;
    case proto::ControlMessage::kLocalCommunicator:
      HandleLocalCommunicator(*node, message.local_communicator());
      return;
    case proto::ControlMessage::BODY_NOT_SET:
      LogBadMessage(absl::StrCat("empty ControlMessage from ", who));
      SendError(identity, "empty ControlMessage: no message body is set");
      return;
    default:
      LogBadMessage(absl::StrCat("unexpected ", BodyName(message), " from ", who));
      SendError(identity, absl::StrCat("the scheduler does not accept ", BodyName(message),
                                       " messages from nodes"));
      return;
  }
}

void Scheduler::HandleRegister(const std::string& identity, const proto::Register& reg,
                               int64_t now_ms) {
  auto reject = [&](const std::string& why) {
    BC_LOG_WARNING("rejected registration of ", RoleName(reg.role()), " (pid ", reg.pid(),
                   " on ", reg.hostname().empty() ? "?" : reg.hostname(), "): ", why);
    SendError(identity, absl::StrCat("registration rejected: ", why));
  };
  if (auto it = nodes_.find(identity); it != nodes_.end()) {
    reject(absl::StrCat("this connection already registered as ", NodeName(it->second)));
    return;
  }
  if (reg.role() != proto::ROLE_WORKER && reg.role() != proto::ROLE_SERVER) {
    reject(absl::StrCat("role must be worker or server, got ", RoleName(reg.role())));
    return;
  }
  if (JobComplete()) {
    reject(absl::StrCat("the job is full: all ", config_.num_workers(), " workers and ",
                        config_.num_servers(), " servers have registered"));
    return;
  }
  const bool is_worker = reg.role() == proto::ROLE_WORKER;
  MachineSlot slot;
  slot.machine = reg.machine().empty() ? reg.hostname() : reg.machine();
  // Local ranks matter (and are checked) only when machines reduce locally; otherwise they
  // are informational and the scheduler numbers each machine's workers in rank order.
  if (config_.hierarchical()) {
    if (reg.has_requested_local_rank()) slot.requested_local_rank = reg.requested_local_rank();
    if (reg.has_declared_local_size()) slot.declared_local_size = reg.declared_local_size();
  }
  std::vector<std::string>& by_rank = is_worker ? worker_by_rank_ : server_by_rank_;
  const std::string role = RoleName(reg.role());
  if (!is_worker) {
    if (absl::StatusOr<HostPort> hp = ParseHostPort(reg.data_address()); !hp.ok()) {
      reject(absl::StrCat("server data_address '", reg.data_address(),
                          "' is not tcp://host:port"));
      return;
    }
  }
  int rank = reg.requested_rank();
  const int count = static_cast<int>(by_rank.size());
  if (rank >= 0) {
    if (rank >= count) {
      reject(absl::StrCat("requested ", role, " rank ", rank, " is out of range: the job has ",
                          count, " ", role, "s (ranks 0..", count - 1, ")"));
      return;
    }
    if (!by_rank[rank].empty()) {
      const Node& holder = nodes_.at(by_rank[rank]);
      reject(absl::StrCat("requested ", role, " rank ", rank, " is already taken by pid ",
                          holder.pid, " on ", holder.hostname));
      return;
    }
  } else {
    const auto free = std::find(by_rank.begin(), by_rank.end(), std::string());
    if (free == by_rank.end()) {
      reject(absl::StrCat("all ", count, " ", role, " ranks are taken"));
      return;
    }
    rank = static_cast<int>(free - by_rank.begin());
  }
  if (is_worker) {
    slot.rank = rank;
    if (absl::Status s = CheckMachineSlot(MachineSlots(), slot); !s.ok()) {
      reject(std::string(s.message()));
      return;
    }
  }
  Node node;
  node.identity = identity;
  node.role = reg.role();
  node.rank = rank;
  node.data_address = reg.data_address();
  node.hostname = reg.hostname();
  node.pid = reg.pid();
  node.last_seen_ms = now_ms;
  if (is_worker) node.slot = slot;
  by_rank[rank] = identity;
  BC_LOG_INFO("registered ", NodeName(node), " (pid ", node.pid, " on ",
              node.hostname.empty() ? "?" : node.hostname,
              node.data_address.empty() ? "" : absl::StrCat(", data ", node.data_address), "); ",
              nodes_.size() + 1, " of ", config_.num_workers() + config_.num_servers(),
              " nodes");
  nodes_.emplace(identity, std::move(node));
  if (static_cast<int>(nodes_.size()) == config_.num_workers() + config_.num_servers()) {
    SendTopology();
  }
}

std::vector<MachineSlot> Scheduler::MachineSlots() const {
  std::vector<MachineSlot> out;
  for (const std::string& id : worker_by_rank_) {
    if (!id.empty()) out.push_back(nodes_.at(id).slot);
  }
  return out;
}

void Scheduler::SendTopology() {
  topology_sent_ = true;
  const int64_t now = MonotonicMs();
  absl::StatusOr<LocalAssignment> local = AssignLocalRanks(MachineSlots());
  if (!local.ok()) {
    const std::string reason = absl::StrCat("cannot group the workers by machine: ",
                                            local.status().message());
    BC_LOG_ERROR(reason);
    BroadcastShutdown(reason);
    Finish(absl::FailedPreconditionError(reason));
    return;
  }
  local_ = *std::move(local);
  // Heartbeat monitoring starts now: until the topology arrives a node may be busy with its
  // own start-up, and the registration timeout covers that phase.
  for (auto& [id, node] : nodes_) node.last_seen_ms = now;

  std::string table = absl::StrFormat("\n  %-7s %4s  %-24s %7s  %s", "role", "rank", "host",
                                      "pid", "data address / machine:local rank");
  for (const auto* ranks : {&worker_by_rank_, &server_by_rank_}) {
    for (const std::string& id : *ranks) {
      const Node& n = nodes_.at(id);
      const std::string where =
          n.role == proto::ROLE_WORKER
              ? absl::StrCat(n.slot.machine, ":", local_.local_rank[n.rank], "/",
                             local_.local_size[n.rank])
              : n.data_address;
      absl::StrAppend(&table, absl::StrFormat("\n  %-7s %4d  %-24s %7d  %s", RoleName(n.role),
                                              n.rank, n.hostname, n.pid, where));
    }
  }
  BC_LOG_INFO("all ", config_.num_workers(), " workers and ", config_.num_servers(),
              " servers registered after ", Seconds(now - start_ms_), ":", table);

  proto::ControlMessage base;
  proto::Topology* topology = base.mutable_topology();
  topology->set_num_workers(config_.num_workers());
  topology->set_num_servers(config_.num_servers());
  for (const std::string& id : server_by_rank_) {
    const Node& n = nodes_.at(id);
    proto::ServerInfo* info = topology->add_servers();
    info->set_rank(n.rank);
    info->set_data_address(n.data_address);
  }
  *topology->mutable_config() = config_;
  *topology->mutable_strategy() = strategy_.current();
  if (config_.hierarchical()) {
    for (int root : local_.roots) topology->add_pushers(root);
    BC_LOG_INFO("hierarchical: ", local_.machines.size(), " machines; local roots (the workers "
                "that push) ", absl::StrJoin(local_.roots, ", "));
  } else {
    for (int r = 0; r < config_.num_workers(); ++r) topology->add_pushers(r);
  }
  for (const std::string& id : worker_by_rank_) {
    const Node& n = nodes_.at(id);
    proto::ControlMessage message = base;
    message.mutable_topology()->set_your_rank(n.rank);
    message.mutable_topology()->set_local_rank(local_.local_rank[n.rank]);
    message.mutable_topology()->set_local_size(local_.local_size[n.rank]);
    message.mutable_topology()->set_local_root(local_.local_root[n.rank]);
    Send(id, message);
  }
  for (const std::string& id : server_by_rank_) {
    proto::ControlMessage message = base;
    message.mutable_topology()->set_your_rank(nodes_.at(id).rank);
    Send(id, message);
  }
  // Barrier requests that arrived before the job was complete can be decided now.
  for (auto& [group_name, group] : barriers_) {
    std::vector<uint64_t> sequences;
    for (const auto& [sequence, waiting] : group.waiting) sequences.push_back(sequence);
    for (uint64_t sequence : sequences) TryReleaseBarrier(group_name, sequence);
  }
}

int Scheduler::GroupSize(const std::string& group) const {
  if (group == "workers") return config_.num_workers();
  if (group == "servers") return config_.num_servers();
  if (group == "all") return config_.num_workers() + config_.num_servers();
  return -1;
}

bool Scheduler::InGroup(const Node& node, const std::string& group) const {
  if (group == "all") return true;
  if (group == "workers") return node.role == proto::ROLE_WORKER;
  if (group == "servers") return node.role == proto::ROLE_SERVER;
  return false;
}

void Scheduler::HandleBarrier(Node& node, const proto::BarrierRequest& request) {
  const std::string& group_name = request.group();
  if (GroupSize(group_name) < 0) {
    SendError(node.identity, absl::StrCat("unknown barrier group '", group_name,
                                          "'; valid: workers, servers, all"));
    return;
  }
  if (!InGroup(node, group_name)) {
    SendError(node.identity, absl::StrCat(NodeName(node), " is not a member of barrier group '",
                                          group_name, "'"));
    return;
  }
  BarrierGroup& group = barriers_[group_name];
  if (group.released.count(request.sequence()) > 0) {
    // A repeated request for a barrier already released: release this node again.
    proto::ControlMessage release;
    release.mutable_barrier_release()->set_group(group_name);
    release.mutable_barrier_release()->set_sequence(request.sequence());
    Send(node.identity, release);
    return;
  }
  group.waiting[request.sequence()].insert(node.identity);
  TryReleaseBarrier(group_name, request.sequence());
}

void Scheduler::TryReleaseBarrier(const std::string& group_name, uint64_t sequence) {
  if (!JobComplete()) return;  // membership is known only once everyone registered
  BarrierGroup& group = barriers_[group_name];
  auto it = group.waiting.find(sequence);
  if (it == group.waiting.end()) return;
  if (static_cast<int>(it->second.size()) < GroupSize(group_name)) return;
  proto::ControlMessage release;
  release.mutable_barrier_release()->set_group(group_name);
  release.mutable_barrier_release()->set_sequence(sequence);
  for (const std::string& id : it->second) Send(id, release);
  BC_LOG_DEBUG("barrier '", group_name, "' ", sequence, " released");
  group.waiting.erase(it);
  group.released.insert(sequence);
}

void Scheduler::HandleDeclare(Node& node, const proto::DeclareTensor& declare, int64_t now_ms) {
  auto reply_error = [&](const std::string& error) {
    proto::ControlMessage message;
    proto::DeclareReply* reply = message.mutable_declare_reply();
    reply->set_name(declare.name());
    reply->set_ok(false);
    reply->set_error(error);
    BC_LOG_WARNING("declaration from ", NodeName(node), " rejected: ", error);
    Send(node.identity, message);
  };
  if (node.role != proto::ROLE_WORKER) {
    reply_error(absl::StrCat("only workers declare tensors; ", NodeName(node),
                             " declared '", declare.name(), "'"));
    return;
  }
  if (declare.name().empty()) {
    reply_error("tensor name must not be empty");
    return;
  }
  if (!IsValidDType(declare.dtype())) {
    reply_error(absl::StrCat("tensor '", declare.name(), "' declared with unknown dtype ",
                             declare.dtype(), " by worker ", node.rank));
    return;
  }
  if (declare.element_count() < 1) {
    reply_error(absl::StrCat("tensor '", declare.name(), "' declared with ",
                             declare.element_count(), " elements by worker ", node.rank,
                             "; a tensor needs at least 1 element"));
    return;
  }
  Declaration& decl = declarations_[declare.name()];
  if (decl.by_worker.empty()) {
    decl.first_ms = now_ms;
    undecided_declarations_.insert(declare.name());
  }
  auto mine = decl.by_worker.find(node.rank);
  if (mine != decl.by_worker.end()) {
    const bool same = mine->second.element_count() == declare.element_count() &&
                      mine->second.dtype() == declare.dtype();
    if (!same) {
      reply_error(absl::StrCat("tensor '", declare.name(), "' re-declared by worker ", node.rank,
                               " with ", DescribeDeclaration(declare), " after ",
                               DescribeDeclaration(mine->second)));
      return;
    }
    // Identical re-declaration: answer again once decided, else keep waiting.
    if (decl.reply.has_value()) {
      proto::ControlMessage message;
      *message.mutable_declare_reply() = *decl.reply;
      Send(node.identity, message);
    }
    return;
  }
  decl.by_worker[node.rank] = declare;
  if (decl.reply.has_value()) {
    // Decided without this worker (it timed out): it gets the same verdict as the others.
    proto::ControlMessage message;
    *message.mutable_declare_reply() = *decl.reply;
    Send(node.identity, message);
    return;
  }
  if (static_cast<int>(decl.by_worker.size()) == config_.num_workers()) {
    CompleteDeclaration(declare.name(), decl);
  }
}

void Scheduler::CompleteDeclaration(const std::string& name, Declaration& decl) {
  proto::DeclareReply reply;
  reply.set_name(name);
  const proto::DeclareTensor& first = decl.by_worker.begin()->second;
  const bool counts_agree = std::all_of(
      decl.by_worker.begin(), decl.by_worker.end(),
      [&](const auto& kv) { return kv.second.element_count() == first.element_count(); });
  const bool dtypes_agree = std::all_of(
      decl.by_worker.begin(), decl.by_worker.end(),
      [&](const auto& kv) { return kv.second.dtype() == first.dtype(); });
  if (!counts_agree || !dtypes_agree) {
    // Group the workers by what they declared, in rank order of first appearance:
    // "tensor 'w' declared with 100 elements by workers 0, 2 and 200 elements by worker 1".
    auto describe = [&](const proto::DeclareTensor& d) -> std::string {
      const std::string dtype(DTypeName(static_cast<DType>(d.dtype())));
      if (!dtypes_agree && !counts_agree) return DescribeDeclaration(d);
      if (!dtypes_agree) return absl::StrCat("dtype ", dtype);
      return absl::StrCat(d.element_count(), " elements");
    };
    std::vector<std::pair<std::string, std::vector<int>>> groups;
    for (const auto& [rank, d] : decl.by_worker) {
      const std::string what = describe(d);
      auto g = std::find_if(groups.begin(), groups.end(),
                            [&](const auto& group) { return group.first == what; });
      if (g == groups.end()) {
        groups.push_back({what, {rank}});
      } else {
        g->second.push_back(rank);
      }
    }
    std::vector<std::string> parts;
    for (const auto& [what, ranks] : groups) {
      parts.push_back(absl::StrCat(what, ranks.size() == 1 ? " by worker " : " by workers ",
                                   absl::StrJoin(ranks, ", ")));
    }
    reply.set_ok(false);
    reply.set_error(
        absl::StrCat("tensor '", name, "' declared with ", absl::StrJoin(parts, " and ")));
  } else {
    absl::StatusOr<PartitionAssignment> assignment =
        assigner_.Assign(first.element_count(), static_cast<DType>(first.dtype()));
    if (!assignment.ok()) {
      reply.set_ok(false);
      reply.set_error(absl::StrCat("tensor '", name, "': ", assignment.status().message()));
    } else {
      reply.set_ok(true);
      reply.set_tensor_id(next_tensor_id_++);
      reply.set_element_count(first.element_count());
      reply.set_dtype(first.dtype());
      reply.set_partition_elements(assignment->partition_elements);
      for (int32_t server : assignment->partition_server) reply.add_partition_server(server);
      BC_LOG_DEBUG("tensor '", name, "' id ", reply.tensor_id(), ": ",
                   DescribeDeclaration(first), " in ", reply.partition_server_size(),
                   " partitions");
    }
  }
  if (!reply.ok()) BC_LOG_WARNING("declaration failed: ", reply.error());
  decl.reply = reply;
  undecided_declarations_.erase(name);
  proto::ControlMessage message;
  *message.mutable_declare_reply() = reply;
  // Servers first: they validate every data message against the declaration, and a worker
  // may push the moment it has its reply.
  if (reply.ok()) {
    for (const std::string& id : server_by_rank_) {
      if (!id.empty()) Send(id, message);
    }
  }
  for (const std::string& id : worker_by_rank_) {
    if (!id.empty()) Send(id, message);
  }
}

void Scheduler::HandleLocalCommunicator(Node& node, const proto::LocalCommunicator& comm) {
  auto refuse = [&](const std::string& why) {
    LogBadMessage(absl::StrCat("LocalCommunicator from ", NodeName(node), " refused: ", why));
    SendError(node.identity, absl::StrCat("LocalCommunicator refused: ", why));
  };
  if (node.role != proto::ROLE_WORKER) return refuse(absl::StrCat(NodeName(node), " is not a worker"));
  if (!config_.hierarchical()) return refuse("the job is not hierarchical (ClusterConfig.hierarchical)");
  if (!JobComplete()) return refuse("sent before the topology");
  const int local_rank = local_.local_rank[node.rank];
  const int local_size = local_.local_size[node.rank];
  if (local_rank != 0 || local_size < 2) {
    return refuse(absl::StrCat(NodeName(node), " is local rank ", local_rank, " of ", local_size,
                               " on machine '", node.slot.machine,
                               "'; only the local root of a machine with more than one worker "
                               "sends one"));
  }
  if (comm.kind() != "host" && comm.kind() != "nccl") {
    return refuse(absl::StrCat("unknown kind '", comm.kind(), "' (valid: host, nccl)"));
  }
  constexpr size_t kNcclIdBytes = 128;
  constexpr size_t kMaxIdBytes = 1024;
  if (comm.id().empty() || comm.id().size() > kMaxIdBytes ||
      (comm.kind() == "nccl" && comm.id().size() != kNcclIdBytes)) {
    return refuse(absl::StrCat("a ", comm.kind(), " id of ", comm.id().size(), " bytes (expected ",
                               comm.kind() == "nccl" ? "128" : "1 to 1024", ")"));
  }
  // One communicator of each kind per machine: the host reducer's endpoint and, when its local
  // ranks have GPUs, an NCCL unique id.
  auto [it, added] = local_comms_.emplace(std::make_pair(node.slot.machine, comm.kind()),
                                          comm.id());
  if (!added) {
    if (it->second != comm.id()) {
      refuse(absl::StrCat("machine '", node.slot.machine, "' already has a different ",
                          comm.kind(), " local communicator"));
    }
    return;  // a repeat: the local ranks have it already
  }
  proto::ControlMessage relay;
  *relay.mutable_local_communicator() = comm;
  for (const std::vector<int>& machine : local_.machines) {
    if (machine.front() != node.rank) continue;
    for (size_t lr = 1; lr < machine.size(); ++lr) Send(worker_by_rank_[machine[lr]], relay);
  }
  BC_LOG_DEBUG("relayed the ", comm.kind(), " communicator of machine '", node.slot.machine,
               "' to ", local_size - 1, " local ranks");
}

void Scheduler::HandleWorkerDone(Node& node) {
  if (node.role != proto::ROLE_WORKER) {
    SendError(node.identity, absl::StrCat("WorkerDone from ", NodeName(node),
                                          ", which is not a worker"));
    return;
  }
  if (node.done) return;
  node.done = true;
  ++workers_done_;
  BC_LOG_INFO(NodeName(node), " is done (", workers_done_, " of ", config_.num_workers(), ")");
  if (workers_done_ == config_.num_workers()) {
    BC_LOG_INFO("every worker is done; shutting the servers down");
    BroadcastShutdown("every worker is done", "", /*servers_only=*/true);
    Finish(absl::OkStatus());
  }
}

void Scheduler::HandleShutdownRequest(Node& node, const proto::Shutdown& shutdown) {
  const std::string reason = absl::StrCat(NodeName(node), " asked to shut the job down: ",
                                          shutdown.reason().empty() ? "no reason given"
                                                                    : shutdown.reason());
  BC_LOG_ERROR(reason);
  BroadcastShutdown(reason, node.identity);
  Finish(absl::AbortedError(reason));
}

// ---------------------------------------------------------------------------------------
// Deadlines: registration, heartbeats, declarations

int64_t Scheduler::NextDeadlineMs(int64_t now_ms) const {
  int64_t next = now_ms + kMaxPollMs;
  if (!JobComplete()) {
    next = std::min(next, start_ms_ + config_.connect_timeout_ms());
  } else {
    for (const auto& [id, node] : nodes_) {
      if (!node.done) next = std::min(next, node.last_seen_ms + config_.heartbeat_timeout_ms());
    }
  }
  for (const std::string& name : undecided_declarations_) {
    next = std::min(next, declarations_.at(name).first_ms + config_.declare_timeout_ms());
  }
  return next;
}

std::string Scheduler::MissingNodes() const {
  std::vector<std::string> parts;
  for (const auto& [role, by_rank] :
       {std::pair<std::string, const std::vector<std::string>*>{"worker", &worker_by_rank_},
        {"server", &server_by_rank_}}) {
    std::vector<int> missing;
    for (int r = 0; r < static_cast<int>(by_rank->size()); ++r) {
      if ((*by_rank)[r].empty()) missing.push_back(r);
    }
    if (missing.empty()) continue;
    parts.push_back(absl::StrCat(role, missing.size() == 1 ? " rank " : " ranks ",
                                 absl::StrJoin(missing, ", "), " (",
                                 by_rank->size() - missing.size(), " of ", by_rank->size(), " ",
                                 role, "s registered)"));
  }
  return absl::StrJoin(parts, "; ");
}

void Scheduler::CheckDeadlines(int64_t now_ms) {
  if (!JobComplete()) {
    if (now_ms - start_ms_ >= config_.connect_timeout_ms()) {
      const std::string reason =
          absl::StrCat("registration did not complete within ",
                       Seconds(config_.connect_timeout_ms()), ": missing ", MissingNodes());
      BC_LOG_ERROR(reason);
      BroadcastShutdown(reason);
      Finish(absl::DeadlineExceededError(reason));
      return;
    }
  } else {
    std::vector<const Node*> failed;
    for (const auto& [id, node] : nodes_) {
      if (!node.done && now_ms - node.last_seen_ms >= config_.heartbeat_timeout_ms()) {
        failed.push_back(&node);
      }
    }
    if (!failed.empty()) {
      std::sort(failed.begin(), failed.end(), [](const Node* a, const Node* b) {
        return std::make_pair(a->role, a->rank) < std::make_pair(b->role, b->rank);
      });
      const std::string missed =
          absl::StrCat("missed heartbeats for ", Seconds(config_.heartbeat_timeout_ms()));
      std::vector<std::string> names;
      for (const Node* f : failed) {
        names.push_back(NodeName(*f));
        BC_LOG_ERROR(NodeName(*f), " (pid ", f->pid, " on ", f->hostname, ") failed: ", missed);
        proto::ControlMessage message;
        proto::NodeFailed* nf = message.mutable_node_failed();
        nf->mutable_node()->set_role(f->role);
        nf->mutable_node()->set_rank(f->rank);
        nf->set_reason(missed);
        nf->set_data_address(f->data_address);
        for (const auto& [id, other] : nodes_) {
          if (std::find(failed.begin(), failed.end(), &other) == failed.end()) Send(id, message);
        }
      }
      const std::string reason = absl::StrCat(absl::StrJoin(names, ", "), " failed (", missed,
                                               "); a synchronous job cannot continue");
      std::set<std::string> failed_ids;
      for (const Node* f : failed) failed_ids.insert(f->identity);
      proto::ControlMessage shutdown;
      shutdown.mutable_shutdown()->set_reason(reason);
      for (const auto& [id, node] : nodes_) {
        if (failed_ids.count(id) == 0) Send(id, shutdown);
      }
      BC_LOG_ERROR("shutting the job down: ", reason);
      Finish(absl::UnavailableError(reason));
      return;
    }
  }
  std::vector<std::string> expired;
  for (const std::string& name : undecided_declarations_) {
    if (now_ms - declarations_.at(name).first_ms >= config_.declare_timeout_ms()) {
      expired.push_back(name);
    }
  }
  for (const std::string& name : expired) {
    Declaration& decl = declarations_.at(name);
    undecided_declarations_.erase(name);
    std::vector<int> missing;
    std::vector<int> declared;
    for (int r = 0; r < config_.num_workers(); ++r) {
      (decl.by_worker.count(r) > 0 ? declared : missing).push_back(r);
    }
    proto::DeclareReply reply;
    reply.set_name(name);
    reply.set_ok(false);
    reply.set_error(absl::StrCat("tensor '", name, "' was not declared by worker",
                                 missing.size() == 1 ? " " : "s ", absl::StrJoin(missing, ", "),
                                 " within ", Seconds(config_.declare_timeout_ms()),
                                 " (declared by worker", declared.size() == 1 ? " " : "s ",
                                 absl::StrJoin(declared, ", "), ")"));
    BC_LOG_WARNING("declaration failed: ", reply.error());
    decl.reply = reply;
    proto::ControlMessage message;
    *message.mutable_declare_reply() = reply;
    for (const std::string& id : worker_by_rank_) {
      if (!id.empty()) Send(id, message);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Sending

void Scheduler::Send(const std::string& identity, const proto::ControlMessage& message) {
  std::vector<zmq::message_t> frames;
  frames.emplace_back(identity.data(), identity.size());
  frames.push_back(ProtoFrame(message));
  // ROUTER drops messages to peers that have gone; that is what we want for a dead node.
  if (absl::Status s = SendFrames(*socket_, frames, /*dont_wait=*/true); !s.ok()) {
    BC_LOG_WARNING("could not send ", BodyName(message), " to ", PrintableIdentity(identity),
                   ": ", s.message());
  }
}

void Scheduler::SendError(const std::string& identity, const std::string& text) {
  proto::ControlMessage message;
  message.mutable_error()->set_message(text);
  Send(identity, message);
}

void Scheduler::BroadcastShutdown(const std::string& reason, const std::string& except,
                                  bool servers_only) {
  proto::ControlMessage message;
  message.mutable_shutdown()->set_reason(reason);
  for (const auto& [id, node] : nodes_) {
    if (id == except) continue;
    if (servers_only && node.role != proto::ROLE_SERVER) continue;
    Send(id, message);
  }
}

std::string Scheduler::NodeName(const Node& node) {
  return absl::StrCat(RoleName(node.role), " ", node.rank);
}

}  // namespace bytecomp
