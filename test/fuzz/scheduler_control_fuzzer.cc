// Fuzz target: every control message a bytecomp-scheduler receives, through the scheduler's
// own socket-free ControlRouter (control_router.h: the token checks, registration, a restarted
// scheduler's takeover, every protocol), as Scheduler::HandleFrames hands it each message.
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
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/config.h"
#include "bytecomp/scheduler/control_router.h"
#include "bytecomp/scheduler/outbox.h"
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
      : config_(config), router_(config_, std::move(keeper), std::move(auto_plan), now_) {
    for (int w = 0; w < config_.num_workers(); ++w) {
      nodes_.push_back(
          {NodeIdentity(proto::ROLE_WORKER, w), NodeTokenBytes(proto::ROLE_WORKER, w)});
    }
    for (int s = 0; s < config_.num_servers(); ++s) {
      nodes_.push_back(
          {NodeIdentity(proto::ROLE_SERVER, s), NodeTokenBytes(proto::ROLE_SERVER, s)});
    }
  }

  bool ended() const { return ended_; }

  // Scheduler::HandleFrames for one frame from `identity`.
  void Receive(const std::string& identity, absl::Span<const uint8_t> frame) {
    Outbox out;
    proto::ControlMessage message;
    if (!message.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
      out.Refuse(identity, "malformed", "malformed");
    } else {
      StampToken(identity, &message);
      router_.Handle(identity, message, now_, &out);
    }
    Deliver(out, identity);
  }

  void AdvanceTime(int64_t ms) {
    now_ += ms;
    Outbox out;
    router_.SendHeartbeats(now_, &out);
    router_.OnTime(now_, &out);
    Deliver(out, "");
  }

  void Reload() {
    Outbox out;
    router_.Reload(&out);
    Deliver(out, "");
  }

  void Stop() {
    Outbox out;
    router_.Stop("scheduler received SIGTERM", &out);
    Deliver(out, "");
  }

 private:
  // No token: the sender's own, when the sender is a node of the job. One byte: the token of
  // node (byte % nodes), sent on whatever connection this is. Else as the input has it.
  void StampToken(const std::string& identity, proto::ControlMessage* m) const {
    if (m->has_register_()) return;
    if (m->token().size() == 1) {
      m->set_token(nodes_[static_cast<uint8_t>(m->token()[0]) % nodes_.size()].second);
      return;
    }
    if (!m->token().empty()) return;
    for (const auto& [id, token] : nodes_) {
      if (id == identity) m->set_token(token);
    }
  }

  void Deliver(const Outbox& out, const std::string& sender) {
    for (const OutgoingControl& m : out.messages()) {
      if (m.to != sender && router_.nodes().Find(m.to) == nullptr) {
        std::fprintf(stderr, "a %s went to '%s', which is no node of the job\n",
                     BodyName(m.message).c_str(), m.to.c_str());
        std::abort();
      }
      (void)m.message.SerializeAsString();
    }
    if (out.job_end().has_value()) ended_ = true;
  }

  proto::ClusterConfig config_;
  int64_t now_ = 1000;
  bool ended_ = false;
  std::vector<std::pair<std::string, std::string>> nodes_;  // identity, token; workers first
  ControlRouter router_;
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
  absl::StatusOr<AutoPlanInputs> plan =
      LoadAutoPlanInputs(BYTECOMP_SOURCE_DIR "/scheduler/planner/clusters/4x1gpu-1g.pbtxt",
                         BYTECOMP_SOURCE_DIR "/scheduler/planner/costs/nominal.pbtxt",
                         /*options_path=*/"", PlanLinks::kMeasured);
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
    job.Receive(identity,
                absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(frame.data()), frame.size()));
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
