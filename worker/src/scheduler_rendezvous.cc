#include "scheduler_rendezvous.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "gloo/common/error.h"

namespace bytecomp::worker {

void SchedulerRendezvousStore::set(const std::string& key, const std::vector<char>& data) {
  proto::ControlMessage m;
  m.mutable_collective_store_set()->set_key(key);
  m.mutable_collective_store_set()->set_value(std::string(data.begin(), data.end()));
  send_(std::move(m));
}

void SchedulerRendezvousStore::wait(const std::vector<std::string>& keys,
                                    const std::chrono::milliseconds& timeout) {
  std::vector<proto::ControlMessage> asks;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& key : keys) {
      if (values_.count(key) > 0 || !asked_.insert(key).second) continue;
      proto::ControlMessage m;
      m.mutable_collective_store_get()->set_key(key);
      asks.push_back(std::move(m));
    }
  }
  for (proto::ControlMessage& m : asks) send_(std::move(m));
  absl::MutexLock lock(&mu_);
  auto all_here = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const std::string& key : keys) {
      if (values_.count(key) == 0) return false;
    }
    return true;
  };
  // (A CondVar loop, not Await: collective_exchange.cc, NextBatch, says why.)
  const absl::Time deadline = absl::Now() + absl::FromChrono(timeout);
  while (!all_here()) {
    if (arrived_.WaitWithDeadline(&mu_, deadline)) break;
  }
  if (!all_here()) {
    std::vector<std::string> missing;
    for (const std::string& key : keys) {
      if (values_.count(key) == 0) missing.push_back(key);
    }
    throw gloo::IoException(absl::StrCat("the scheduler's rendezvous gave no value for keys ",
                                         absl::StrJoin(missing, ", "), " within ", timeout.count(),
                                         " ms (a worker did not join the collectives)"));
  }
}

std::vector<char> SchedulerRendezvousStore::get(const std::string& key) {
  wait({key}, timeout_);
  absl::MutexLock lock(&mu_);
  const std::string& v = values_.at(key);
  return std::vector<char>(v.begin(), v.end());
}

void SchedulerRendezvousStore::OnValue(const proto::CollectiveStoreValue& value) {
  absl::MutexLock lock(&mu_);
  values_[value.key()] = value.value();
  arrived_.SignalAll();
}

}  // namespace bytecomp::worker
