// The data I/O thread: owns the DEALER sockets to the servers (C connections each) and moves
// messages between them and the PartitionSender (partition_sender.h), which decides what goes
// where: it hands the sender the other threads' commands (data_commands.h) and the servers'
// replies, and the sender's pull replies to the operation's stages. Before the first push it
// measures the links to the servers (link_probes.cc).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "bytecomp/common.h"
#include "bytecomp/worker/wake_queue.h"
#include "control.pb.h"
#include "control_loop.h"
#include "data_commands.h"
#include "held_payloads.h"
#include "operation_tracker.h"
#include "partition_sender.h"
#include "traffic_counters.h"

namespace bytecomp::worker {

class DataLoop {
 public:
  // What the loop uses, all owned by the engine and outliving the loop.
  struct Wiring {
    const proto::ClusterConfig* config = nullptr;  // connections, budget, link probes
    const proto::Topology* topology = nullptr;     // the servers' data addresses
    zmq::context_t* context = nullptr;
    const SocketSecurity* security = nullptr;  // the cluster key (or none) for the DEALERs
    int rank = 0;
    NodeToken token;  // carried by every push and pull: the server checks it
    WakeQueue<DataCommand>* commands = nullptr;
    WakeQueue<ControlCommand>* to_control = nullptr;  // the link probe report
    OperationTracker* tracker = nullptr;
    TrafficCounters* traffic = nullptr;
    // The zero-copy payloads ZeroMQ holds: Run waits for none before it returns. The engine's,
    // as a payload ZeroMQ still holds after that wait is released when the engine terminates
    // the context, after the loop is gone.
    HeldPayloads* held = nullptr;
    telemetry::Timeline* timeline = nullptr;  // null: no timeline
  };
  explicit DataLoop(Wiring wiring) : w_(wiring), sockets_(w_) {}
  // Until StopData: connects, probes the links, then moves messages.
  void Run();

 private:
  // The DEALER sockets, [server][connection], as the sender's ServerConnections.
  class DealerSockets : public ServerConnections {
   public:
    explicit DealerSockets(const Wiring& wiring)
        : w_(wiring), sockets_(wiring.topology->num_servers()) {}
    absl::Status Send(int server, int connection, std::vector<zmq::message_t>& frames) override;
    void Open(int server, const std::string& address) override;
    void Close(int server) override;
    std::vector<std::vector<zmq::socket_t>>& sockets() { return sockets_; }
    // Sockets were opened or closed since the last call: the poll items must be built again.
    bool TakeChanged() { return std::exchange(changed_, false); }

   private:
    const Wiring& w_;
    std::vector<std::vector<zmq::socket_t>> sockets_;
    bool changed_ = false;
  };

  // Before the first push: measures each server's link and reports it (link_probes.cc). Takes
  // request ids from `next_request` on.
  void ProbeLinks(uint64_t* next_request);

  const Wiring w_;
  DealerSockets sockets_;
};

}  // namespace bytecomp::worker
