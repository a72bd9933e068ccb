// Fuzz target: every control message a bytecomp-scheduler receives, through its socket-free
// protocol classes (Registration, Barriers, Declarations, LocalRelay, StrategyControl,
// Liveness) sharing one NodeTable, routed as Scheduler::HandleFrames and Scheduler::Dispatch
// route them (scheduler.cc; the loop here mirrors them, the protocols are the real ones).
//
// Input (fuzz_input.h): u8 job shape: bits 0-1 workers - 1, bit 2 servers - 1, bit 3
// hierarchical, bit 4 --strategy=auto (planned from the repository's example cluster and
// nominal costs), bits 5-6 which nodes registered before the events (none, all, all but the
// last worker); then events (scheduler_fuzz_job.h) until the input ends or the job ends.
//
// Checks beyond sanitizers: every message goes to a node of the job or to the sender, and
// once the job has ended nothing more happens.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/config.h"
#include "bytecomp/scheduler/barriers.h"
#include "bytecomp/scheduler/declarations.h"
#include "bytecomp/scheduler/liveness.h"
#include "bytecomp/scheduler/local_relay.h"
#include "bytecomp/scheduler/node_table.h"
#include "bytecomp/scheduler/outbox.h"
#include "bytecomp/scheduler/registration.h"
#include "bytecomp/scheduler/strategy_control.h"
#include "codec_choice.h"
#include "fuzz_input.h"
#include "scheduler_fuzz_job.h"

namespace bytecomp::fuzz {
namespace {

// A strategy file for SIGHUP to read (written once, at start).
std::string g_strategy_path;
std::optional<AutoPlanInputs> g_auto_plan;

class Job {
 public:
  Job(const proto::ClusterConfig& config, StrategyKeeper keeper,
      std::optional<AutoPlanInputs> auto_plan)
      : config_(config),
        nodes_(config_.num_workers(), config_.num_servers()),
        strategy_(config_, nodes_, std::move(keeper), std::move(auto_plan)),
        registration_(config_, &nodes_, strategy_.keeper(), now_),
        barriers_(nodes_),
        declarations_(config_, nodes_),
        local_relay_(config_, nodes_),
        liveness_(config_, nodes_, now_) {}

  bool ended() const { return ended_; }

  // Scheduler::HandleFrames for one frame from `identity`.
  void Receive(const std::string& identity, absl::Span<const uint8_t> frame) {
    Outbox out;
    const RegisteredNode* node = nodes_.Find(identity);
    if (node != nullptr) liveness_.Seen(*node, now_);
    proto::ControlMessage message;
    if (!message.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
      out.Refuse(identity, "malformed", "malformed");
    } else if (message.has_register_()) {
      if (registration_.Handle(identity, message.register_(), now_, &out)) {
        liveness_.StartMonitoring(now_);
        barriers_.ReleaseWaiting(&out);
      }
    } else if (message.has_error()) {
      // never answered
    } else if (node == nullptr) {
      out.Refuse(identity, "register first", "unregistered");
    } else {
      Dispatch(*node, message, &out);
    }
    Deliver(out, identity);
  }

  void AdvanceTime(int64_t ms) {
    now_ += ms;
    Outbox out;
    liveness_.OnTime(now_, &out);
    if (!out.job_end().has_value()) declarations_.OnTime(now_, &out);
    Deliver(out, "");
  }

  void Reload() {
    Outbox out;
    strategy_.Reload(&out);
    Deliver(out, "");
  }

  void Stop() {
    Outbox out;
    liveness_.Stop("scheduler received SIGTERM", &out);
    Deliver(out, "");
  }

 private:
  // Scheduler::Dispatch.
  void Dispatch(const RegisteredNode& node, const proto::ControlMessage& m, Outbox* out) {
    switch (m.body_case()) {
      case proto::ControlMessage::kHeartbeat: return;
      case proto::ControlMessage::kBarrierRequest:
        return barriers_.Handle(node, m.barrier_request(), out);
      case proto::ControlMessage::kDeclareTensor:
        return declarations_.Handle(node, m.declare_tensor(), now_, out);
      case proto::ControlMessage::kLocalCommunicator:
        return local_relay_.Handle(node, m.local_communicator(), out);
      case proto::ControlMessage::kStrategyPrepareReply:
        return strategy_.HandlePrepareReply(node, m.strategy_prepare_reply(), out);
      case proto::ControlMessage::kProfileReport:
        return strategy_.HandleProfileReport(node, m.profile_report(), out);
      case proto::ControlMessage::kLinkProbeReport:
        return strategy_.HandleLinkProbeReport(node, m.link_probe_report(), out);
      case proto::ControlMessage::kRatioReport:
        return strategy_.HandleRatioReport(node, m.ratio_report(), out);
      case proto::ControlMessage::kWorkerDone: return liveness_.HandleWorkerDone(node, out);
      case proto::ControlMessage::kShutdown:
        return liveness_.HandleShutdown(node, m.shutdown(), out);
      default: return out->Refuse(node.identity, "not accepted", "unexpected");
    }
  }

  void Deliver(const Outbox& out, const std::string& sender) {
    for (const OutgoingControl& m : out.messages()) {
      if (m.to != sender && nodes_.Find(m.to) == nullptr) {
        std::fprintf(stderr, "a %s went to '%s', which is no node of the job\n",
                     m.message.GetDescriptor()->FindFieldByNumber(m.message.body_case()) == nullptr
                         ? "message"
                         : m.message.GetDescriptor()->FindFieldByNumber(m.message.body_case())
                               ->name().c_str(),
                     m.to.c_str());
        std::abort();
      }
      (void)m.message.SerializeAsString();
    }
    if (out.job_end().has_value()) ended_ = true;
  }

  proto::ClusterConfig config_;
  int64_t now_ = 1000;
  bool ended_ = false;
  NodeTable nodes_;
  StrategyControl strategy_;
  Registration registration_;
  Barriers barriers_;
  Declarations declarations_;
  LocalRelay local_relay_;
  Liveness liveness_;
};

}  // namespace
}  // namespace bytecomp::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace bytecomp;
  fuzz::SilenceLogs();
  fuzz::g_strategy_path = "/tmp/bytecomp-scheduler-fuzz-strategy.pbtxt";
  std::ofstream(fuzz::g_strategy_path) << "tensors { name_pattern: \"*\" push_codec { name: "
                                          "\"topk\" params { key: \"ratio\" value: \"0.1\" } } "
                                          "force: true adaptive_ratio { min_ratio: 0.01 "
                                          "max_ratio: 0.5 window_rounds: 2 } }\n";
  absl::StatusOr<AutoPlanInputs> plan = LoadAutoPlanInputs(
      BYTECOMP_SOURCE_DIR "/scheduler/planner/clusters/4x1gpu-1g.pbtxt",
      BYTECOMP_SOURCE_DIR "/scheduler/planner/costs/nominal.pbtxt", /*options_path=*/"",
      PlanLinks::kMeasured);
  if (!plan.ok()) {
    std::fprintf(stderr, "scheduler_control_fuzzer: %s\n", plan.status().ToString().c_str());
    std::abort();
  }
  fuzz::g_auto_plan = *std::move(plan);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bytecomp;
  using namespace bytecomp::fuzz;
  FuzzInput in(data, size);
  const uint8_t shape = in.U8();
  proto::ClusterConfig overrides;
  overrides.set_scheduler_address("127.0.0.1:1");
  overrides.set_num_workers(1 + shape % 4);
  overrides.set_num_servers(1 + (shape >> 2) % 2);
  overrides.set_hierarchical((shape >> 3) & 1);
  const bool auto_plan = (shape >> 4) & 1;
  if (auto_plan) overrides.set_profile_rounds(2);
  const proto::ClusterConfig config = WithClusterDefaults(overrides);
  StrategyKeeper keeper;
  if (!keeper.LoadInitial(auto_plan ? "" : g_strategy_path).ok()) std::abort();
  Job job(config, std::move(keeper), auto_plan ? g_auto_plan : std::nullopt);

  const int workers = config.num_workers(), servers = config.num_servers();
  auto send = [&job](const std::string& identity, const proto::ControlMessage& message) {
    const std::string frame = message.SerializeAsString();
    job.Receive(identity, absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(frame.data()),
                                              frame.size()));
  };
  const int preregistered = (shape >> 5) & 3;
  if (preregistered != 0) {
    for (int s = 0; s < servers; ++s) {
      send(NodeIdentity(proto::ROLE_SERVER, s),
           RegisterMessage(proto::ROLE_SERVER, s, config.hierarchical()));
    }
    for (int w = 0; w < workers - (preregistered == 2 ? 1 : 0); ++w) {
      send(NodeIdentity(proto::ROLE_WORKER, w),
           RegisterMessage(proto::ROLE_WORKER, w, config.hierarchical()));
    }
  }
  for (int events = 0; !in.empty() && !job.ended() && events < 512; ++events) {
    switch (static_cast<SchedulerEvent>(in.U8() % static_cast<uint8_t>(SchedulerEvent::kCount))) {
      case SchedulerEvent::kMessage: {
        const size_t sender = in.Pick(static_cast<size_t>(workers + servers) + 1);
        const std::string identity =
            sender < static_cast<size_t>(workers)
                ? NodeIdentity(proto::ROLE_WORKER, static_cast<int>(sender))
                : sender < static_cast<size_t>(workers + servers)
                      ? NodeIdentity(proto::ROLE_SERVER, static_cast<int>(sender) - workers)
                      : std::string("stranger");
        job.Receive(identity, in.Bytes());
        break;
      }
      case SchedulerEvent::kTime:
        job.AdvanceTime(int64_t{in.U16()} * 16);
        break;
      case SchedulerEvent::kReload:
        job.Reload();
        break;
      case SchedulerEvent::kStop:
      case SchedulerEvent::kCount:
        job.Stop();
        break;
    }
  }
  return 0;
}
