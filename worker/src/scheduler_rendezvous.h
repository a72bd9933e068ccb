// gloo's rendezvous store (gloo/rendezvous/store.h) on the scheduler's (scheduler/include/
// bytecomp/scheduler/collective_store.h): set sends a CollectiveStoreSet through the control
// thread; get and wait ask for the keys not yet here (CollectiveStoreGet) and wait until the
// control thread hands over their CollectiveStoreValue (OnValue), or the timeout. gloo takes a
// store's failures as exceptions: a wait past its timeout throws gloo::IoException.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "control.pb.h"
#include "gloo/rendezvous/store.h"

namespace bytecomp::worker {

class SchedulerRendezvousStore : public gloo::rendezvous::Store {
 public:
  using SendControl = std::function<void(proto::ControlMessage)>;
  SchedulerRendezvousStore(SendControl send, std::chrono::milliseconds timeout)
      : send_(std::move(send)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override ABSL_LOCKS_EXCLUDED(mu_);
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override
      ABSL_LOCKS_EXCLUDED(mu_);

  // The control thread: the scheduler's answer to a get.
  void OnValue(const proto::CollectiveStoreValue& value) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const SendControl send_;
  const std::chrono::milliseconds timeout_;
  absl::Mutex mu_;
  absl::CondVar arrived_;  // a value came
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> asked_ ABSL_GUARDED_BY(mu_);
};

}  // namespace bytecomp::worker
