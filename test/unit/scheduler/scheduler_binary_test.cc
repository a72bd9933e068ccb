// The real bytecomp-scheduler binary: flags, signals and exit status. Every child is killed
// and reaped by ChildProcess's destructor, and dies with the test through PR_SET_PDEATHSIG.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/transport.h"
#include "test_node.h"

namespace bytecomp {
namespace {

using proto::ControlMessage;
using testing::TestNode;

class ChildProcess {
 public:
  explicit ChildProcess(const std::vector<std::string>& args) {
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~ChildProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  // The exit code (128+N for a signal N), or -1 if still running after `timeout_ms`.
  int WaitExit(int timeout_ms) {
    const int64_t deadline = MonotonicMs() + timeout_ms;
    while (true) {  // looks at least once, even with timeout 0
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (MonotonicMs() >= deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
};

// An ephemeral port that is free now. The probe has its own context: ZeroMQ closes sockets
// asynchronously, and only terminating the context guarantees the listener is gone (else a
// test node could connect to the dying probe and lose its first messages).
int FreePort() {
  zmq::context_t probe_context(1);
  zmq::socket_t probe(probe_context, zmq::socket_type::router);
  probe.set(zmq::sockopt::linger, 0);
  const int port = *BindTcp(probe, "127.0.0.1", 0);
  probe.close();
  return port;
}

std::vector<std::string> Args(int port, std::vector<std::string> extra) {
  std::vector<std::string> args = {BYTECOMP_SCHEDULER_BINARY, "--bind_host=127.0.0.1",
                                   absl::StrCat("--scheduler_address=127.0.0.1:", port)};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(SchedulerBinaryTest, SighupKeepsTheJobAndSigtermSendsShutdownToEveryNode) {
  zmq::context_t context(1);
  const int port = FreePort();
  ChildProcess scheduler(Args(port, {"--num_workers=1", "--num_servers=1"}));
  TestNode worker(context, port), server(context, port);
  worker.Register(proto::ROLE_WORKER, -1);
  server.Register(proto::ROLE_SERVER, -1);
  worker.Expect(ControlMessage::kTopology, 5000);
  server.Expect(ControlMessage::kTopology, 5000);
  // SIGHUP asks for a strategy reload: the job goes on.
  kill(scheduler.pid(), SIGHUP);
  worker.ExpectNothing(200);
  EXPECT_EQ(scheduler.WaitExit(0), -1) << "SIGHUP ended the scheduler";
  worker.Barrier("workers", 1);
  EXPECT_EQ(worker.Expect(ControlMessage::kBarrierRelease).barrier_release().sequence(), 1u);
  kill(scheduler.pid(), SIGTERM);
  for (TestNode* n : {&worker, &server}) {
    EXPECT_EQ(n->Expect(ControlMessage::kShutdown).shutdown().reason(),
              "scheduler received SIGTERM");
  }
  EXPECT_EQ(scheduler.WaitExit(3000), 128 + SIGTERM);
}

TEST(SchedulerBinaryTest, ExitsZeroWhenEveryWorkerIsDone) {
  zmq::context_t context(1);
  const int port = FreePort();
  ChildProcess scheduler(Args(port, {"--num_workers=1", "--num_servers=1"}));
  TestNode worker(context, port), server(context, port);
  worker.Register(proto::ROLE_WORKER, -1);
  server.Register(proto::ROLE_SERVER, -1);
  worker.Expect(ControlMessage::kTopology, 5000);
  server.Expect(ControlMessage::kTopology, 5000);
  ControlMessage done;
  done.mutable_worker_done();
  worker.Send(done);
  server.Expect(ControlMessage::kShutdown);
  EXPECT_EQ(scheduler.WaitExit(3000), 0);
}

TEST(SchedulerBinaryTest, BadConfigExitsWithStatusTwo) {
  zmq::context_t context(1);
  const int port = FreePort();
  ChildProcess missing(Args(port, {"--config=/nonexistent/cluster.pbtxt"}));
  EXPECT_EQ(missing.WaitExit(3000), 2);
  ChildProcess bad(Args(port, {"--num_workers=-3"}));
  EXPECT_EQ(bad.WaitExit(3000), 2);
}

// What `command` prints on stdout and stderr.
std::string Output(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return "";
  std::string out;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
  pclose(pipe);
  return out;
}

// Abseil's --help lists only flags from a file named after the program unless told otherwise
// (common/command_line.h); the daemons' flags live in main.cc.
TEST(SchedulerBinaryTest, HelpListsTheDaemonsFlags) {
  const std::string scheduler = Output(absl::StrCat(BYTECOMP_SCHEDULER_BINARY, " --help"));
  EXPECT_EQ(scheduler.find("No flags matched"), std::string::npos) << scheduler;
  for (const char* flag : {"--num_workers", "--strategy", "--plan_cluster", "--plan_costs",
                           "--plan_out", "--plan_options", "--plan_links", "--hierarchical"}) {
    EXPECT_NE(scheduler.find(flag), std::string::npos) << flag << " missing:\n" << scheduler;
  }
  EXPECT_EQ(scheduler.find("--flagfile"), std::string::npos) << "Abseil's own flags: --helpfull";
  const std::string server = Output(absl::StrCat(BYTECOMP_SERVER_BINARY, " --help"));
  EXPECT_EQ(server.find("No flags matched"), std::string::npos) << server;
  for (const char* flag : {"--config", "--scheduler", "--rank", "--bind_host", "--port"}) {
    EXPECT_NE(server.find(flag), std::string::npos) << flag << " missing:\n" << server;
  }
}

}  // namespace
}  // namespace bytecomp
