#include "control_plane_sim.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/config.h"
#include "bytecomp/common/control_parts.h"
#include "bytecomp/common/node_token.h"
#include "bytecomp/common/rejoin_record.h"
#include "bytecomp/scheduler/control_router.h"
#include "control.pb.h"

namespace bytecomp::scale {
namespace {

constexpr int kHeartbeatIntervalMs = 1000;
constexpr int kHeartbeatTimeoutMs = 5000;

double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

int64_t ResidentKb() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  f << text;
  f.close();
  if (!f) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

struct SimNode {
  std::string identity;
  std::string token;
};

class Sim {
 public:
  // `start_ms`: when this scheduler started, on the virtual clock.
  Sim(proto::ClusterConfig config, StrategyKeeper strategy, int64_t start_ms = 0)
      : now_ms_(start_ms),
        config_(std::move(config)),
        router_(config_, std::move(strategy), std::nullopt, start_ms) {}

  // Runs `body` as one step: what it sends and what the scheduler answers are counted.
  ControlStep Step(const std::string& name, const std::function<void()>& body) {
    step_ = ControlStep{};
    step_.name = name;
    const int64_t rss = ResidentKb();
    const int64_t start_ms = now_ms_;
    to_node_.clear();
    body();
    step_.rss_growth_kb = ResidentKb() - rss;
    step_.waited_ms = now_ms_ - start_ms;
    return step_;
  }

  // A node's message (its token set), as the scheduler's loop hands it over; the node's
  // RejoinRecord sees it, as a SchedulerClient's does.
  void Send(const SimNode& node, proto::ControlMessage m) {
    m.set_token(node.token);
    Deliver(node.identity, m);
  }
  // A message from the connection `identity` as it is (a ControlPart carries no token).
  void Deliver(const std::string& identity, const proto::ControlMessage& m) {
    records_[identity].Sent(m);
    ++step_.messages_in;
    step_.largest_in_bytes =
        std::max(step_.largest_in_bytes, static_cast<int64_t>(m.ByteSizeLong()));
    Outbox out;
    const double cpu = ThreadCpuMs();
    router_.Handle(identity, m, now_ms_, &out);
    step_.scheduler_cpu_ms += ThreadCpuMs() - cpu;
    Take(out);
  }
  // The loop's turn: heartbeats due and deadlines.
  void Turn() {
    Outbox out;
    const double cpu = ThreadCpuMs();
    router_.SendHeartbeats(now_ms_, &out);
    router_.OnTime(now_ms_, &out);
    step_.scheduler_cpu_ms += ThreadCpuMs() - cpu;
    Take(out);
  }
  void Reload() {
    Outbox out;
    const double cpu = ThreadCpuMs();
    router_.Reload(&out);
    step_.scheduler_cpu_ms += ThreadCpuMs() - cpu;
    Take(out);
  }

  // The node registers: a new node with a new token, or (`rejoin_from`) a node of the job
  // coming back to a restarted scheduler on a new connection, with its token and its record's
  // report, in parts where large, as SchedulerClient::Rejoin sends them.
  SimNode Register(proto::Role role, int rank, const std::string& identity,
                   const std::optional<std::pair<SimNode, proto::Rejoin>>& rejoin_from = {}) {
    SimNode node{identity,
                 rejoin_from.has_value() ? rejoin_from->first.token : TokenBytes(NewNodeToken())};
    proto::ControlMessage m;
    proto::Register* r = m.mutable_register_();
    r->set_role(role);
    r->set_requested_rank(rank);
    r->set_hostname(absl::StrCat("host", role == proto::ROLE_SERVER ? "s" : "w", rank));
    r->set_pid(1000 + rank);
    r->set_token(node.token);
    if (role == proto::ROLE_SERVER) {
      r->set_data_address(absl::StrCat("tcp://10.0.", rank / 250, ".", rank % 250, ":9000"));
    }
    r->set_rejoining(rejoin_from.has_value());
    Send(node, m);
    if (rejoin_from.has_value()) {
      proto::ControlMessage reported;
      *reported.mutable_rejoin_report() = rejoin_from->second;
      reported.set_token(node.token);
      for (const proto::ControlMessage& piece : SplitControlMessage(reported, 1)) {
        Deliver(node.identity, piece);
      }
    }
    return node;
  }
  // What the node on `identity` would report to a restarted scheduler.
  proto::Rejoin Report(const std::string& identity) const {
    auto it = records_.find(identity);
    return it == records_.end() ? proto::Rejoin{} : it->second.Report();
  }

  // Messages of the current step whose body is `field` (ControlMessage's oneof case).
  int64_t Count(proto::ControlMessage::BodyCase body) const {
    auto it = bodies_.find(static_cast<int>(body));
    return it == bodies_.end() ? 0 : it->second;
  }
  void ClearCounts() { bodies_.clear(); }
  const std::optional<absl::Status>& job_end() const { return job_end_; }
  // The first message the scheduler refused, for an error's detail ("" when none).
  const std::string& first_refusal() const { return first_refusal_; }

  int64_t now_ms_ = 0;
  ControlStep step_;

 private:
  void Take(const Outbox& out) {
    for (const OutgoingControl& m : out.messages()) {
      ++step_.messages_out;
      const int64_t bytes = static_cast<int64_t>(m.message.ByteSizeLong());
      step_.bytes_out += bytes;
      step_.largest_out_bytes = std::max(step_.largest_out_bytes, bytes);
      step_.most_to_one_node = std::max(step_.most_to_one_node, ++to_node_[m.to]);
      ++bodies_[static_cast<int>(m.message.body_case())];
      RejoinRecord& record = records_[m.to];
      if (m.message.has_topology()) {
        record.Registered(m.message.topology());
      } else {
        record.Received(m.message);
      }
    }
    for (const Refusal& r : out.refusals()) {
      if (first_refusal_.empty()) first_refusal_ = r.log_line;
    }
    if (out.job_end().has_value() && !job_end_.has_value()) job_end_ = out.job_end();
  }

  const proto::ClusterConfig config_;
  ControlRouter router_;
  std::map<int, int64_t> bodies_;
  std::map<std::string, int64_t> to_node_;       // messages to each node in the current step
  std::map<std::string, RejoinRecord> records_;  // each node's, by identity
  std::optional<absl::Status> job_end_;
  std::string first_refusal_;
};

absl::Status Expect(const std::string& step, int64_t got, int64_t want, const std::string& what) {
  if (got == want) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("step '", step, "' did not complete: ", got, " ", what, ", expected ", want));
}

}  // namespace

absl::StatusOr<std::vector<ControlStep>> RunControlPlaneSim(const ControlSimOptions& options) {
  const int W = options.workers, S = options.servers;
  proto::ClusterConfig overrides;
  overrides.set_scheduler_address("127.0.0.1:1");
  overrides.set_num_workers(W);
  overrides.set_num_servers(S);
  overrides.set_heartbeat_interval_ms(kHeartbeatIntervalMs);
  overrides.set_heartbeat_timeout_ms(kHeartbeatTimeoutMs);
  overrides.set_server_replacement_timeout_ms(60000);
  const proto::ClusterConfig config = WithClusterDefaults(overrides);

  const std::string strategy_path =
      absl::StrCat(options.scratch_dir, "/bytecomp-control-sim-", getpid(), ".pbtxt");
  if (absl::Status s = WriteText(strategy_path, "seed: 7\n"); !s.ok()) return s;
  StrategyKeeper keeper;
  if (absl::Status s = keeper.LoadInitial(strategy_path); !s.ok()) return s;
  auto sim = std::make_unique<Sim>(config, std::move(keeper));
  std::vector<ControlStep> steps;
  std::vector<SimNode> workers(W), servers(S);
  using Body = proto::ControlMessage::BodyCase;
  absl::Status failed;
  auto check = [&](absl::Status s) {
    if (failed.ok() && !s.ok()) failed = std::move(s);
  };

  steps.push_back(sim->Step("registration", [&] {
    for (int w = 0; w < W; ++w)
      workers[w] = sim->Register(proto::ROLE_WORKER, w, absl::StrCat("w", w));
    for (int s = 0; s < S; ++s)
      servers[s] = sim->Register(proto::ROLE_SERVER, s, absl::StrCat("s", s));
    check(Expect("registration", sim->Count(Body::kTopology), W + S, "topologies sent"));
    sim->step_.outcome = absl::StrCat("topology to ", W + S, " nodes");
  }));
  sim->ClearCounts();

  steps.push_back(sim->Step("declarations", [&] {
    for (int t = 0; t < options.tensors; ++t) {
      for (int w = 0; w < W; ++w) {
        proto::ControlMessage m;
        m.mutable_declare_tensor()->set_name(absl::StrCat("layer", t, ".weight"));
        m.mutable_declare_tensor()->set_element_count(int64_t{1} << 20);
        m.mutable_declare_tensor()->set_dtype(proto::DTYPE_FLOAT32);
        sim->Send(workers[w], m);
      }
    }
    check(Expect("declarations", sim->Count(Body::kDeclareReply),
                 int64_t{options.tensors} * (W + S), "declaration replies"));
    sim->step_.outcome = absl::StrCat(options.tensors, " tensors declared to ", W + S, " nodes");
  }));
  sim->ClearCounts();

  auto beat = [&](const std::vector<const SimNode*>& alive, uint64_t sequence) {
    for (const SimNode* n : alive) {
      proto::ControlMessage m;
      m.mutable_heartbeat()->set_sequence(sequence);
      sim->Send(*n, m);
    }
  };
  std::vector<const SimNode*> everyone;
  for (const SimNode& n : workers) everyone.push_back(&n);
  for (const SimNode& n : servers) everyone.push_back(&n);
  uint64_t sequence = 0;

  steps.push_back(sim->Step("heartbeats", [&] {
    for (int i = 0; i < options.heartbeat_intervals; ++i) {
      sim->now_ms_ += kHeartbeatIntervalMs;
      sim->Turn();
      beat(everyone, ++sequence);
    }
    check(Expect("heartbeats", sim->Count(Body::kNodeFailed), 0, "nodes failed"));
    sim->step_.outcome = absl::StrCat(options.heartbeat_intervals, " intervals, no node failed");
  }));
  sim->ClearCounts();

  steps.push_back(sim->Step("barrier", [&] {
    for (int w = 0; w < W; ++w) {
      proto::ControlMessage m;
      m.mutable_barrier_request()->set_group("workers");
      m.mutable_barrier_request()->set_sequence(1);
      sim->Send(workers[w], m);
    }
    check(Expect("barrier", sim->Count(Body::kBarrierRelease), W, "releases"));
    sim->step_.outcome = absl::StrCat("released ", W, " workers");
  }));
  sim->ClearCounts();

  steps.push_back(sim->Step("strategy switch", [&] {
    check(WriteText(strategy_path,
                    "seed: 7\ntensors {\n  name_pattern: \"*\"\n  push_codec { name: \"fp16\" }\n"
                    "  pull_codec { name: \"fp16\" }\n  force: true\n}\n"));
    sim->Reload();
    check(Expect("strategy switch", sim->Count(Body::kStrategyPrepare), W, "prepares"));
    for (int w = 0; w < W; ++w) {
      proto::ControlMessage m;
      m.mutable_strategy_prepare_reply()->set_version(2);
      m.mutable_strategy_prepare_reply()->set_highest_started_round(3);
      sim->Send(workers[w], m);
    }
    check(Expect("strategy switch", sim->Count(Body::kStrategyCommit), W + S, "commits"));
    sim->step_.outcome = absl::StrCat("version 2 committed on ", W + S, " nodes");
  }));
  sim->ClearCounts();
  std::remove(strategy_path.c_str());

  steps.push_back(sim->Step("server lost and replaced", [&] {
    std::vector<const SimNode*> alive(everyone.begin(), everyone.end());
    alive.erase(alive.begin() + W);  // server 0 falls silent
    const int64_t lost_by = sim->now_ms_ + kHeartbeatTimeoutMs + kHeartbeatIntervalMs;
    while (sim->now_ms_ < lost_by) {
      sim->now_ms_ += kHeartbeatIntervalMs;
      beat(alive, ++sequence);
      sim->Turn();
    }
    const SimNode replacement = sim->Register(proto::ROLE_SERVER, 0, "s0-replacement");
    servers[0] = replacement;
    check(Expect("server lost and replaced", sim->Count(Body::kServerReplaced), W,
                 "ServerReplaced messages"));
    check(Expect("server lost and replaced", sim->Count(Body::kTopology), 1,
                 "topologies (the replacement's)"));
    sim->step_.outcome = absl::StrCat("server 0 replaced; ", W, " workers told");
  }));
  sim->ClearCounts();

  // The scheduler restarts: a new one (a new ControlRouter, the same config) takes the job
  // over from every node's Register{rejoining} and rejoin report (takeover.h).
  if (!sim->job_end().has_value() && failed.ok()) {
    if (absl::Status s = WriteText(strategy_path, "seed: 7\n"); !s.ok()) return s;
    StrategyKeeper restarted_keeper;
    if (absl::Status s = restarted_keeper.LoadInitial(strategy_path); !s.ok()) return s;
    std::remove(strategy_path.c_str());
    std::vector<std::pair<SimNode, proto::Rejoin>> reports;
    for (const SimNode& n : workers) reports.emplace_back(n, sim->Report(n.identity));
    for (const SimNode& n : servers) reports.emplace_back(n, sim->Report(n.identity));
    auto restarted = std::make_unique<Sim>(config, std::move(restarted_keeper), sim->now_ms_);
    sim = std::move(restarted);
    steps.push_back(sim->Step("scheduler restarted", [&] {
      for (int w = 0; w < W; ++w) {
        workers[w] =
            sim->Register(proto::ROLE_WORKER, w, absl::StrCat("w", w, "-rejoined"), reports[w]);
      }
      for (int s = 0; s < S; ++s) {
        servers[s] =
            sim->Register(proto::ROLE_SERVER, s, absl::StrCat("s", s, "-rejoined"), reports[W + s]);
      }
      check(Expect("scheduler restarted", sim->Count(Body::kRejoined), W + S, "Rejoined messages"));
      sim->step_.outcome = absl::StrCat("job taken over from ", W + S, " nodes' reports");
    }));
  }
  if (sim->job_end().has_value()) {
    check(
        absl::InternalError(absl::StrCat("the simulated job ended: ", sim->job_end()->ToString())));
  }
  if (!failed.ok()) {
    if (sim->first_refusal().empty()) return failed;
    return absl::Status(
        failed.code(),
        absl::StrCat(failed.message(), " (the scheduler refused: ", sim->first_refusal(), ")"));
  }
  return steps;
}

}  // namespace bytecomp::scale
