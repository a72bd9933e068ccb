// Checks what tsan_zmq_sync.cc tells ThreadSanitizer, in a TSan build with it preloaded
// (tsan_zmq_sync_check.sh runs both modes and reads TSan's reports):
//   handoff  a thread fills buffers and hands them to another over inproc, once as a copied
//            message and once zero-copy (whose free function then writes a counter the
//            sender reads after joining): no report, since each hand-off orders the two;
//   race     the same hand-offs, and beside them a counter that the sending thread and a
//            bystander thread both write with nothing ordering them: TSan must still report
//            that counter (RacyCounter), and nothing else, with the preloaded libraries and
//            the stage's suppressions in place (neither blinds TSan to a plain race);
//   freed    a zero-copy payload whose memory is freed while ZeroMQ still holds its message
//            (what bytecomp_push_pull's contract forbids): the edge lives on the payload's
//            address, freeing the memory drops TSan's record of it, and the free function's
//            read of its hint, written by the sending thread, is reported
//            (ReadHintOfFreedPayload). A report of that shape in the suite means memory went
//            before ZeroMQ let it go.
// Exits 0 when every message arrived intact, whatever TSan reports; 2 on a wrong use.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

namespace {

constexpr int kMessages = 200;
constexpr size_t kBytes = 4096;  // larger than a message libzmq keeps inline

int freed_payloads = 0;  // written by the zero-copy free function, read after the join
long RacyCounter = 0;    // written by two threads with nothing ordering them (race mode)

void FreePayload(void* data, void* /*hint*/) {
  ++freed_payloads;
  delete[] static_cast<char*>(data);
}

__attribute__((noinline)) void BumpRacyCounter() { RacyCounter = RacyCounter + 1; }

struct PayloadHint {
  int sent = 0;
};

__attribute__((noinline)) void ReadHintOfFreedPayload(void* /*data*/, void* hint) {
  auto* h = static_cast<PayloadHint*>(hint);
  freed_payloads += h->sent;
  delete h;
}

// The freed mode: a message queued on a socket whose peer never binds, its payload freed, then
// the socket closed (ZeroMQ's reaper thread drops the message and calls the free function).
int FreeBeforeRelease() {
  zmq::context_t context(1);
  zmq::socket_t sender(context, zmq::socket_type::dealer);
  sender.set(zmq::sockopt::linger, 0);
  sender.connect("inproc://nobody-binds");  // the message stays queued
  auto* payload = new char[kBytes]();
  auto* hint = new PayloadHint;
  hint->sent = 1;
  zmq::message_t zero_copy(payload, kBytes, &ReadHintOfFreedPayload, hint);
  if (!sender.send(zero_copy, zmq::send_flags::dontwait)) return 2;
  delete[] payload;  // too early
  sender.close();
  context.close();
  std::printf("freed mode: %d payload released after its memory was freed\n", freed_payloads);
  return freed_payloads == 1 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode == "freed") return FreeBeforeRelease();
  if (mode != "handoff" && mode != "race") {
    std::fprintf(stderr, "usage: tsan_zmq_sync_check handoff|race|freed\n");
    return 2;
  }
  const bool race = mode == "race";
  zmq::context_t context(1);
  zmq::socket_t receiver(context, zmq::socket_type::pair);
  receiver.bind("inproc://check");
  std::atomic<int> corrupted{0};

  std::thread reader([&] {
    for (int i = 0; i < 2 * kMessages; ++i) {
      zmq::message_t msg;
      if (!receiver.recv(msg)) {
        ++corrupted;
        continue;
      }
      const auto* bytes = static_cast<const unsigned char*>(msg.data());
      for (size_t b = 0; b < msg.size(); ++b) {
        if (bytes[b] != static_cast<unsigned char>((i / 2 + b) & 0xff)) {
          ++corrupted;
          break;
        }
      }
    }
  });

  std::thread bystander;
  if (race) {
    // Both writes close together: TSan's history is bounded (a long run of synchronization
    // between them, as libzmq's sends make, can reset it and lose the first write).
    bystander = std::thread(BumpRacyCounter);
    BumpRacyCounter();
  }
  zmq::socket_t sender(context, zmq::socket_type::pair);
  sender.connect("inproc://check");
  for (int i = 0; i < kMessages; ++i) {
    std::vector<unsigned char> filled(kBytes);
    for (size_t b = 0; b < kBytes; ++b) filled[b] = static_cast<unsigned char>((i + b) & 0xff);
    zmq::message_t copied(filled.data(), filled.size());
    sender.send(copied, zmq::send_flags::none);
    auto* payload = new char[kBytes];
    std::memcpy(payload, filled.data(), kBytes);
    zmq::message_t zero_copy(payload, kBytes, &FreePayload, nullptr);
    sender.send(zero_copy, zmq::send_flags::none);
  }
  reader.join();
  if (bystander.joinable()) bystander.join();
  sender.close();
  receiver.close();
  context.close();
  std::printf("%d messages, %d corrupted, %d zero-copy payloads freed\n", 2 * kMessages,
              corrupted.load(), freed_payloads);
  return corrupted.load() == 0 && freed_payloads == kMessages ? 0 : 1;
}
