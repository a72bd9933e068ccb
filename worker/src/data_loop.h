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
    // The cluster key (or none) for the DEALERs, where the data messages are not sealed.
    const SocketSecurity* security = nullptr;
    int rank = 0;
    NodeToken token;  // carried by every push and pull: the server checks it
    // This worker's data key (SchedulerClient::data_key): it seals every message to the
    // servers, which open them with it; the servers' keys come with the topology. Empty: the
    // job does not seal its data messages.
    std::string data_key;
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
  explicit DataLoop(Wiring wiring) : w_(wiring), sockets_(w_, seals_) {}
  // Until StopData: connects, probes the links, then moves messages.
  void Run();

 private:
  // The DEALER sockets, [server][connection], as the sender's ServerConnections.
  class DealerSockets : public ServerConnections {
   public:
    DealerSockets(const Wiring& wiring, DataSeals& seals)
        : w_(wiring), seals_(seals), sockets_(wiring.topology->num_servers()) {}
    absl::Status Send(int server, int connection, std::vector<zmq::message_t>& frames) override;
    void Open(int server, const std::string& address) override;
    void Close(int server) override;
    std::vector<std::vector<zmq::socket_t>>& sockets() { return sockets_; }
    // Sockets were opened or closed since the last call: the poll items must be built again.
    bool TakeChanged() { return std::exchange(changed_, false); }

   private:
    const Wiring& w_;
    DataSeals& seals_;
    std::vector<std::vector<zmq::socket_t>> sockets_;
    bool changed_ = false;
  };

  // Where the job seals its data messages: this worker's key and sealer, and the opener of the
  // servers' replies (keys from the topology, a replacement's from ReconnectServer).
  absl::Status StartSealing();
  // Server failover: the replacement's key opens its replies from now on (where sealed).
  absl::Status TakeReplacementKey(const ReconnectServer& reconnect);
  // Opens a reply (where sealed); false, with the refusal logged, for one that does not open.
  bool OpenReply(int server, std::vector<zmq::message_t>& frames);

  // Before the first push: measures each server's link and reports it (link_probes.cc). Takes
  // request ids from `next_request` on.
  void ProbeLinks(uint64_t* next_request);

  const Wiring w_;
  std::unique_ptr<SealKey> seal_key_;  // outlives seals_' sealer
  DataSeals seals_;
  RefusalLog unsealed_;  // replies that did not open
  DealerSockets sockets_;
};

}  // namespace bytecomp::worker
