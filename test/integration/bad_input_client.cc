// A misbehaving client for the bad-input test: sends malformed frames, a foreign sender, bad
// link probes, and pushes and pulls as worker 0 or 1 without their token (unknown keys, wrong
// sizes, a wrong dtype, an unknown codec, a round far in the future, an abort, a guessed
// token) to a live server, and checks that each gets an OP_ERROR reply naming the problem:
// without the worker's token nothing about a key is even looked at.
//
// Usage: bad_input_client tcp://host:port KEY_TENSOR_ID KEY_ELEMENTS
//   (a key the server owns: tensor id, partition 0, with that many fp32 elements)
// Prints one line per case; exit 0 when every case got the expected error.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bytecomp/common.h"
#include "data.pb.h"

using bytecomp::proto::DataHeader;

namespace {

struct Case {
  std::string name;
  std::vector<std::string> frames;  // after the (implicit) identity
  std::string expect;               // substring of the error
};

std::string Header(DataHeader h) { return h.SerializeAsString(); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s tcp://host:port TENSOR_ID ELEMENTS\n", argv[0]);
    return 2;
  }
  const std::string address = argv[1];
  const uint32_t tensor = static_cast<uint32_t>(std::atoi(argv[2]));
  const int64_t n = std::atoll(argv[3]);
  const std::string good_payload(n * 4, '\0');

  DataHeader base;
  base.set_op(bytecomp::proto::OP_PUSH);
  base.set_key(bytecomp::MakeKey(tensor, 0));
  base.set_round(0);
  base.set_dtype(bytecomp::proto::DTYPE_FLOAT32);
  base.set_element_count(n);
  base.set_payload_bytes(n * 4);
  base.set_sender(0);

  const std::string kNoToken = "does not carry its token";
  std::vector<Case> cases;
  cases.push_back(
      {"garbage header", {std::string("\xff\xff\xff garbage", 12)}, "not a DataHeader"});
  cases.push_back({"too many frames", {Header(base), good_payload, "x", "y"}, "malformed request"});
  {
    DataHeader h = base;
    h.set_payload_bytes(n * 4 + 4);
    cases.push_back({"wrong payload size", {Header(h), good_payload + "abcd"}, kNoToken});
  }
  {
    DataHeader h = base;
    h.set_element_count(n + 5);
    cases.push_back({"wrong element count", {Header(h), good_payload}, kNoToken});
  }
  {
    DataHeader h = base;
    h.set_dtype(bytecomp::proto::DTYPE_FLOAT16);
    cases.push_back({"wrong dtype", {Header(h), good_payload}, kNoToken});
  }
  {
    DataHeader h = base;
    h.set_codec("zzz");
    cases.push_back({"unknown codec", {Header(h), good_payload}, kNoToken});
  }
  {
    DataHeader h = base;
    h.set_sender(99);
    cases.push_back({"foreign sender", {Header(h), good_payload}, "not a worker rank"});
  }
  {
    DataHeader h = base;
    h.set_op(bytecomp::proto::OP_PUSH_ACK);
    cases.push_back({"reply op as request", {Header(h)}, "unsupported op"});
  }
  {
    DataHeader h = base;
    h.set_round(1000000);
    cases.push_back({"round far in the future (push)", {Header(h), good_payload}, kNoToken});
    h.set_op(bytecomp::proto::OP_PULL);
    h.set_payload_bytes(0);
    cases.push_back({"round far in the future (pull)", {Header(h)}, kNoToken});
  }
  {
    DataHeader h = base;
    h.set_key(bytecomp::MakeKey(999999, 0));
    cases.push_back({"unknown key", {Header(h), good_payload}, kNoToken});
  }

  {
    DataHeader h = base;
    h.set_sender(1);
    h.set_op(bytecomp::proto::OP_PULL);
    h.set_payload_bytes(0);
    cases.push_back({"pull of the round's sum as worker 1", {Header(h)}, kNoToken});
    h.set_op(bytecomp::proto::OP_PUSH);
    h.set_error("worker 1 gives up");
    cases.push_back({"abort blaming worker 1", {Header(h)}, kNoToken});
    h.clear_error();
    h.set_payload_bytes(n * 4);
    const bytecomp::NodeToken guess = bytecomp::NewNodeToken();
    bytecomp::SetHeaderToken(guess, &h);
    cases.push_back({"push as worker 1 with a guessed token", {Header(h), good_payload}, kNoToken});
  }
  {
    DataHeader probe;
    probe.set_op(bytecomp::proto::OP_PROBE);
    probe.set_sender(0);
    probe.set_probe_reply_bytes(bytecomp::kMaxProbeBytes + 1);
    cases.push_back({"link probe asking too much",
                     {Header(probe)},
                     "probe_reply_bytes 67108865 is outside [0, 67108864]"});
    probe.set_probe_reply_bytes(16);
    probe.set_round(3);
    cases.push_back({"link probe naming a round", {Header(probe)}, "must be 0, got key 0 round 3"});
  }

  zmq::context_t ctx(1);
  zmq::socket_t sock(ctx, zmq::socket_type::dealer);
  bytecomp::ConfigureSocket(sock);
  sock.connect(address);
  int failures = 0;
  uint64_t id = 1000;
  for (Case& c : cases) {
    std::vector<zmq::message_t> frames;
    for (size_t i = 0; i < c.frames.size(); ++i) {
      std::string f = c.frames[i];
      if (i == 0) {  // tag the request so the reply can be matched
        DataHeader h;
        if (h.ParseFromString(f)) {
          h.set_request_id(++id);
          f = h.SerializeAsString();
        }
      }
      frames.emplace_back(f.data(), f.size());
    }
    if (!bytecomp::SendFrames(sock, frames).ok()) {
      std::printf("FAIL %s: send failed\n", c.name.c_str());
      ++failures;
      continue;
    }
    absl::StatusOr<std::vector<zmq::message_t>> reply =
        bytecomp::RecvFrames(sock, std::chrono::milliseconds(8000));
    DataHeader h;
    if (!reply.ok() || reply->empty() ||
        !h.ParseFromArray((*reply)[0].data(), (*reply)[0].size())) {
      std::printf("FAIL %s: no reply within 8 s\n", c.name.c_str());
      ++failures;
      continue;
    }
    // No error reply tells an outsider which round a key is at.
    const bool ok = h.op() == bytecomp::proto::OP_ERROR &&
                    h.error().find(c.expect) != std::string::npos &&
                    h.error().find("accumulat") == std::string::npos;
    std::printf("%s %s: %s\n", ok ? "ok  " : "FAIL", c.name.c_str(), h.error().c_str());
    if (!ok) ++failures;
  }
  std::printf("%d of %zu bad requests answered with the expected error\n",
              static_cast<int>(cases.size()) - failures, cases.size());
  return failures == 0 ? 0 : 1;
}
