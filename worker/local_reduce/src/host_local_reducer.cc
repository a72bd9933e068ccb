#include "host_local_reducer.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/common.h"
#include "control.pb.h"

namespace bytecomp::worker {
namespace {

// How long closing the socket may take to deliver what is still queued (a dead peer: no more).
constexpr int kCloseLingerMs = 2000;

using Header = proto::LocalReduceHeader;

std::string PeerIdentity(int local_rank) { return absl::StrCat("local-rank-", local_rank); }

int64_t Bytes(int64_t elements, proto::DType dtype) {
  return elements * static_cast<int64_t>(DTypeSize(dtype));
}

// Waits for one message, at most `timeout_ms`, running `tick` every 100 ms.
absl::StatusOr<std::vector<zmq::message_t>> RecvWithTicks(zmq::socket_t& socket,
                                                          int64_t deadline_ms,
                                                          const HostLocalReducer::Tick& tick,
                                                          const std::string& waiting_for) {
  while (true) {
    if (tick) {
      if (absl::Status s = tick(); !s.ok()) return s;
    }
    const int64_t left = deadline_ms - MonotonicMs();
    if (left <= 0) {
      return absl::DeadlineExceededError(absl::StrCat("local reducer: ", waiting_for));
    }
    absl::StatusOr<std::vector<zmq::message_t>> frames =
        RecvFrames(socket, std::chrono::milliseconds(std::min<int64_t>(left, 100)));
    if (!frames.ok() || !frames->empty()) return frames;
  }
}

}  // namespace

LoopbackReducer::LoopbackReducer(zmq::context_t& context, int local_rank, int local_size,
                                 const SocketLimits& limits)
    : local_rank_(local_rank),
      local_size_(local_size),
      socket_(context, local_rank == 0 ? zmq::socket_type::router : zmq::socket_type::dealer),
      peer_identity_(local_size) {
  ConfigureSocket(socket_);
  LimitSocket(socket_, limits);
  // The root's last broadcast of a job is often still queued when its training process shuts
  // down right after: closing must deliver it (bounded), not drop it, or a local rank waits
  // for a result that never comes.
  socket_.set(zmq::sockopt::linger, kCloseLingerMs);
  for (int lr = 0; lr < local_size; ++lr) peer_identity_[lr] = PeerIdentity(lr);
}

LoopbackReducer::~LoopbackReducer() { Stop(); }

void LoopbackReducer::Stop() {
  if (thread_.joinable()) {
    queue_.Push(StopCall{});
    thread_.join();
  }
  stopped_.store(true);  // later calls fail at once
  if (failed_.ok()) failed_ = absl::CancelledError("the local reducer stopped");
  FailAll(failed_);
  // Calls queued after the thread's last look (some by callbacks): fail them here, until none
  // is left.
  for (std::deque<Command> left = queue_.TakeAll(); !left.empty(); left = queue_.TakeAll()) {
    for (Command& cmd : left) {
      if (auto* call = std::get_if<Call>(&cmd)) call->done(failed_);
    }
  }
}

absl::StatusOr<std::unique_ptr<LoopbackReducer>> LoopbackReducer::Listen(zmq::context_t& context,
                                                                         int local_size,
                                                                         const SocketLimits& limits,
                                                                         SocketSecurity* security) {
  std::unique_ptr<LoopbackReducer> r(new LoopbackReducer(context, 0, local_size, limits));
  // A send to a local rank that is gone fails instead of vanishing.
  r->socket_.set(zmq::sockopt::router_mandatory, 1);
  if (security != nullptr) {
    if (absl::Status s =
            security->SecureListening(r->socket_, LocalReduceConnectionCaps(local_size));
        !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<int> port = BindTcp(r->socket_, "127.0.0.1", 0);
  if (!port.ok()) {
    return absl::UnavailableError(absl::StrCat("local reducer: ", port.status().message()));
  }
  r->endpoint_ = TcpEndpoint("127.0.0.1", *port);
  return r;
}

absl::StatusOr<std::unique_ptr<LoopbackReducer>> LoopbackReducer::Join(
    zmq::context_t& context, const std::string& endpoint, int local_rank, int local_size,
    int64_t timeout_ms, const Tick& tick, const SocketLimits& limits,
    const SocketSecurity* security) {
  if (local_rank < 1 || local_rank >= local_size) {
    return absl::InvalidArgumentError(absl::StrCat("local reducer: local rank ", local_rank,
                                                   " cannot join as a non-root of ", local_size));
  }
  std::unique_ptr<LoopbackReducer> r(new LoopbackReducer(context, local_rank, local_size, limits));
  r->socket_.set(zmq::sockopt::routing_id, PeerIdentity(local_rank));
  if (security != nullptr) security->SecureConnecting(r->socket_);
  try {
    r->socket_.connect(endpoint);
  } catch (const zmq::error_t& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "local reducer: cannot connect to the local root at '", endpoint, "': ", e.what()));
  }
  r->endpoint_ = endpoint;
  Header hello;
  hello.set_kind(Header::HELLO);
  hello.set_local_rank(local_rank);
  hello.set_local_size(local_size);
  std::vector<zmq::message_t> frames;
  frames.push_back(ProtoFrame(hello));
  if (absl::Status s = SendFrames(r->socket_, frames); !s.ok()) return s;
  const int64_t deadline = MonotonicMs() + timeout_ms;
  const std::string waiting =
      absl::StrCat("local rank ", local_rank, " got no WELCOME from the local root at ", endpoint,
                   " within ", timeout_ms, " ms");
  while (true) {
    absl::StatusOr<std::vector<zmq::message_t>> got =
        RecvWithTicks(r->socket_, deadline, tick, waiting);
    if (!got.ok()) return got.status();
    Header h;
    if (got->empty() || !ParseFrame((*got)[0], &h).ok()) continue;
    if (h.kind() == Header::WELCOME) break;
    if (h.kind() == Header::ERROR) {
      return absl::FailedPreconditionError(
          absl::StrCat("local root refused local rank ", local_rank, ": ", h.error()));
    }
  }
  return r;
}

absl::Status LoopbackReducer::AcceptAll(int64_t timeout_ms, const Tick& tick) {
  std::vector<bool> joined(local_size_, false);
  int missing = local_size_ - 1;
  const int64_t deadline = MonotonicMs() + timeout_ms;
  while (missing > 0) {
    std::vector<int> absent;
    for (int lr = 1; lr < local_size_; ++lr) {
      if (!joined[lr]) absent.push_back(lr);
    }
    absl::StatusOr<std::vector<zmq::message_t>> got = RecvWithTicks(
        socket_, deadline, tick,
        absl::StrCat("the local root waited ", timeout_ms, " ms for local rank(s) ",
                     absl::StrJoin(absent, ", "), " of ", local_size_, " to join at ", endpoint_));
    if (!got.ok()) return got.status();
    Header h;
    if (got->size() < 2 || !ParseFrame((*got)[1], &h).ok() || h.kind() != Header::HELLO) {
      BC_LOG_WARNING("local reducer: ignoring a malformed message while waiting for local ranks");
      continue;
    }
    const std::string identity = FrameToString((*got)[0]);
    if (h.local_size() != local_size_ || h.local_rank() < 1 || h.local_rank() >= local_size_ ||
        identity != peer_identity_[h.local_rank()]) {
      return absl::FailedPreconditionError(
          absl::StrCat("local reducer: a process joined as local rank ", h.local_rank(), " of ",
                       h.local_size(), "; this machine's local root expects local ranks 1..",
                       local_size_ - 1, " of ", local_size_));
    }
    if (!joined[h.local_rank()]) {
      joined[h.local_rank()] = true;
      --missing;
    }
  }
  Header welcome;
  welcome.set_kind(Header::WELCOME);
  welcome.set_local_size(local_size_);
  for (int lr = 1; lr < local_size_; ++lr) {
    std::vector<zmq::message_t> frames;
    frames.push_back(ProtoFrame(welcome));
    if (absl::Status s = SendTo(lr, frames); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HostLocalReducer>> HostLocalReducer::Listen(
    zmq::context_t& context, int local_size, SocketSecurity* security) {
  absl::StatusOr<std::unique_ptr<LoopbackReducer>> root =
      LoopbackReducer::Listen(context, local_size, SocketLimits{}, security);
  if (!root.ok()) return root.status();
  return std::unique_ptr<HostLocalReducer>(*std::move(root));
}

absl::StatusOr<std::unique_ptr<HostLocalReducer>> HostLocalReducer::Join(
    zmq::context_t& context, const std::string& endpoint, int local_rank, int local_size,
    int64_t timeout_ms, const Tick& tick, const SocketSecurity* security) {
  absl::StatusOr<std::unique_ptr<LoopbackReducer>> member = LoopbackReducer::Join(
      context, endpoint, local_rank, local_size, timeout_ms, tick, SocketLimits{}, security);
  if (!member.ok()) return member.status();
  return std::unique_ptr<HostLocalReducer>(*std::move(member));
}

void LoopbackReducer::Start() {
  thread_ = std::thread([this] { Run(); });
}

void LoopbackReducer::Reduce(const std::string& tag, void* buffer, int64_t elements,
                             proto::DType dtype, Done done) {
  if (stopped_.load()) return done(absl::CancelledError("the local reducer stopped"));
  queue_.Push(Call{false, tag, buffer, elements, dtype, absl::OkStatus(), std::move(done)});
}

void LoopbackReducer::Broadcast(const std::string& tag, void* buffer, int64_t elements,
                                proto::DType dtype, absl::Status root_status, Done done) {
  if (stopped_.load()) return done(absl::CancelledError("the local reducer stopped"));
  queue_.Push(Call{true, tag, buffer, elements, dtype, std::move(root_status), std::move(done)});
}

void LoopbackReducer::Fail(const absl::Status& reason) { queue_.Push(FailCall{reason}); }

void LoopbackReducer::Run() {
  bool stop = false;
  while (!stop) {
    zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, queue_.fd(), ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 2, std::chrono::milliseconds(1000));
    } catch (const zmq::error_t& e) {
      FailAll(absl::UnavailableError(absl::StrCat("local reducer poll: ", e.what())));
      continue;
    }
    if (items[1].revents & ZMQ_POLLIN) {
      for (Command& cmd : queue_.TakeAll()) {
        if (auto* call = std::get_if<Call>(&cmd)) {
          Handle(std::move(*call));
        } else if (auto* fail = std::get_if<FailCall>(&cmd)) {
          FailAll(fail->reason);
        } else {
          stop = true;
        }
      }
    }
    for (int n = 0; n < 64 && (items[0].revents & ZMQ_POLLIN); ++n) {
      absl::StatusOr<std::vector<zmq::message_t>> frames =
          RecvFrames(socket_, std::chrono::milliseconds(0));
      if (!frames.ok() || frames->empty()) break;
      HandleMessage(*frames);
    }
  }
  FailAll(absl::CancelledError("the local reducer stopped"));
}

absl::Status LoopbackReducer::SendTo(int local_rank, std::vector<zmq::message_t>& frames) {
  if (local_rank_ == 0) {
    frames.insert(frames.begin(), zmq::message_t(peer_identity_[local_rank].data(),
                                                 peer_identity_[local_rank].size()));
  }
  absl::Status s = SendFrames(socket_, frames, /*dont_wait=*/true);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("local reducer: sending to local rank ", local_rank, ": ", s.message()));
  }
  return s;
}

void LoopbackReducer::Handle(Call call) {
  if (!failed_.ok()) {
    call.done(failed_);
    return;
  }
  const int64_t bytes = Bytes(call.elements, call.dtype);
  if (local_rank_ == 0) {
    if (!call.broadcast) {
      Collect& c = collecting_[call.tag];
      if (c.own.has_value()) {
        call.done(
            absl::InternalError(absl::StrCat("local reducer: '", call.tag, "' reduced twice")));
        return;
      }
      c.own = std::move(call);
      TryFinishReduce(c.own->tag);
      return;
    }
    Header h;
    h.set_kind(call.root_status.ok() ? Header::RESULT : Header::ERROR);
    h.set_tag(call.tag);
    h.set_element_count(call.elements);
    h.set_dtype(call.dtype);
    h.set_error(std::string(call.root_status.message()));
    zmq::message_t values;
    if (call.root_status.ok()) values = zmq::message_t(call.buffer, static_cast<size_t>(bytes));
    absl::Status sent;
    for (int lr = 1; lr < local_size_; ++lr) {
      std::vector<zmq::message_t> frames;
      frames.push_back(ProtoFrame(h));
      if (call.root_status.ok()) {
        frames.emplace_back();
        frames.back().copy(values);  // reference-counted: one copy of the values for all
      }
      sent.Update(SendTo(lr, frames));
    }
    call.done(sent);
    return;
  }
  if (!call.broadcast) {
    Header h;
    h.set_kind(Header::CONTRIBUTION);
    h.set_local_rank(local_rank_);
    h.set_local_size(local_size_);
    h.set_tag(call.tag);
    h.set_element_count(call.elements);
    h.set_dtype(call.dtype);
    std::vector<zmq::message_t> frames;
    frames.push_back(ProtoFrame(h));
    frames.emplace_back(call.buffer, static_cast<size_t>(bytes));
    call.done(SendTo(0, frames));
    return;
  }
  const std::string tag = call.tag;
  auto early = early_.find(tag);
  waiting_.emplace(tag, std::move(call));
  if (early != early_.end()) {
    std::vector<zmq::message_t> frames = std::move(early->second);
    early_.erase(early);
    HandleMessage(frames);
  }
}

void LoopbackReducer::HandleMessage(std::vector<zmq::message_t>& frames) {
  // Root: identity, header[, values]. Others: header[, values].
  const size_t first = local_rank_ == 0 ? 1 : 0;
  Header h;
  if (frames.size() <= first || frames.size() > first + 2 || !ParseFrame(frames[first], &h).ok()) {
    BC_LOG_WARNING("local reducer: ignoring a malformed message (", frames.size(), " frames)");
    return;
  }
  if (local_rank_ == 0) {
    const std::string identity = FrameToString(frames[0]);
    if (h.kind() != Header::CONTRIBUTION || h.local_rank() < 1 || h.local_rank() >= local_size_ ||
        identity != peer_identity_[h.local_rank()] || frames.size() != 3) {
      BC_LOG_WARNING("local reducer: ignoring an unexpected ", Header::Kind_Name(h.kind()),
                     " from local rank ", h.local_rank());
      return;
    }
    Collect& c = collecting_[h.tag()];
    if (c.contributions.count(h.local_rank()) > 0) {
      BC_LOG_WARNING("local reducer: local rank ", h.local_rank(), " contributed '", h.tag(),
                     "' twice");
      return;
    }
    std::vector<zmq::message_t>& stored = c.contributions[h.local_rank()];
    stored.push_back(std::move(frames[1]));
    stored.push_back(std::move(frames[2]));
    TryFinishReduce(h.tag());
    return;
  }
  if (h.kind() != Header::RESULT && h.kind() != Header::ERROR) return;
  auto it = waiting_.find(h.tag());
  if (it == waiting_.end()) {
    early_[h.tag()] = std::move(frames);
    return;
  }
  Call call = std::move(it->second);
  waiting_.erase(it);
  if (h.kind() == Header::ERROR) {
    call.done(absl::FailedPreconditionError(absl::StrCat("local root: ", h.error())));
    return;
  }
  const int64_t bytes = Bytes(call.elements, call.dtype);
  if (h.element_count() != call.elements || h.dtype() != call.dtype || frames.size() != 2 ||
      static_cast<int64_t>(frames[1].size()) != bytes) {
    call.done(absl::DataLossError(absl::StrCat(
        "local root sent '", call.tag, "' as ", h.element_count(), " elements of dtype ", h.dtype(),
        " (", frames.size() == 2 ? frames[1].size() : 0, " bytes); local rank ", local_rank_,
        " has ", call.elements, " of dtype ", static_cast<int>(call.dtype))));
    return;
  }
  std::memcpy(call.buffer, frames[1].data(), static_cast<size_t>(bytes));
  call.done(absl::OkStatus());
}

void LoopbackReducer::TryFinishReduce(std::string tag) {
  auto it = collecting_.find(tag);
  if (it == collecting_.end()) return;
  Collect& c = it->second;
  if (!c.own.has_value() || static_cast<int>(c.contributions.size()) < local_size_ - 1) return;
  Call own = std::move(*c.own);
  std::map<int, std::vector<zmq::message_t>> contributions = std::move(c.contributions);
  collecting_.erase(it);
  const size_t n = static_cast<size_t>(own.elements);
  const int64_t bytes = Bytes(own.elements, own.dtype);
  for (auto& [lr, frames] : contributions) {
    Header h;
    (void)ParseFrame(frames[0], &h);
    if (h.element_count() != own.elements || h.dtype() != own.dtype ||
        static_cast<int64_t>(frames[1].size()) != bytes) {
      own.done(absl::InvalidArgumentError(
          absl::StrCat("tensor round '", tag, "': local rank ", lr, " has ", h.element_count(),
                       " elements of dtype ", h.dtype(), ", the local root ", own.elements,
                       " of dtype ", static_cast<int>(own.dtype))));
      return;
    }
  }
  // fp32 sums in place; fp16/bf16 are widened to fp32 once, summed, and narrowed back.
  const bool fp32 = own.dtype == proto::DTYPE_FLOAT32;
  std::vector<float> wide;
  float* sum = static_cast<float*>(own.buffer);
  if (!fp32) {
    wide.resize(n);
    ToFloat32(own.dtype, own.buffer, wide.data(), n);
    sum = wide.data();
  }
  std::vector<float> aligned;  // a misaligned receive buffer is copied once
  for (auto& [lr, frames] : contributions) {
    const void* values = frames[1].data();
    if (reinterpret_cast<uintptr_t>(values) % alignof(float) != 0) {
      aligned.resize((static_cast<size_t>(bytes) + sizeof(float) - 1) / sizeof(float));
      std::memcpy(aligned.data(), values, static_cast<size_t>(bytes));
      values = aligned.data();
    }
    AddToFloat32(own.dtype, values, sum, n);
  }
  if (!fp32) FromFloat32(own.dtype, sum, own.buffer, n);
  own.done(absl::OkStatus());
}

void LoopbackReducer::FailAll(const absl::Status& reason) {
  if (failed_.ok()) failed_ = reason.ok() ? absl::UnknownError("local reducer failed") : reason;
  std::map<std::string, Collect> collecting = std::move(collecting_);
  std::map<std::string, Call> waiting = std::move(waiting_);
  collecting_.clear();
  waiting_.clear();
  early_.clear();
  for (auto& [tag, c] : collecting) {
    if (c.own.has_value()) c.own->done(failed_);
  }
  for (auto& [tag, call] : waiting) call.done(failed_);
}

}  // namespace bytecomp::worker
