#include "bytecomp/planner/timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace bytecomp::planner {
namespace {

// Orders kept sorted (the next at the back): the earliest event first, the earlier started
// first among equal times (a new event, started last, goes behind every event of its time or
// earlier: Start); the highest-priority (lowest value), earliest job first.
struct LowerPriorityT {
  bool operator()(const TimelineSimulator::Waiting& a, const TimelineSimulator::Waiting& b) const {
    return a.order > b.order;
  }
};
constexpr LowerPriorityT LowerPriority;

template <typename StartedWork>
double BoundFrom(double now, StartedWork started_work, const SimProblem& problem,
                 const std::array<double, kNumResources>& total_work, double tail_us);
double BoundFrom(const TimelineSimulator::State& s, const SimProblem& problem,
                 const std::array<double, kNumResources>& total_work, double tail_us) {
  return BoundFrom(
      s.now, [&](int r) { return s.resources[r].started_work; }, problem, total_work, tail_us);
}
// Tighter, at the cost of a pass over the pending events: a job started on a resource holds
// its slot until its event, so what it has left counts as work not started yet.
double RunningBound(const TimelineSimulator::State& s, const SimProblem& problem,
                    const std::array<double, kNumResources>& total_work, double tail_us) {
  std::array<double, kNumResources> left_running{};
  for (const TimelineSimulator::Event& e : s.events) left_running[e.resource()] += e.time - s.now;
  return BoundFrom(
      s.now, [&](int r) { return s.resources[r].started_work - left_running[r]; }, problem,
      total_work, tail_us);
}

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t Bits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

void AppendJsonString(std::string& out, const std::string& text) {
  out.push_back('"');
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
      out += buffer;
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

}  // namespace

TimelineSimulator::TimelineSimulator(const SimProblem* problem)
    : problem_(problem), n_(static_cast<int>(problem->tensors.size())) {
  stride_ = n_ < 128 ? 1 : n_ / 64;
  // About 16 memo checkpoints in a run over the whole model: hashing a state costs about as
  // much as a few dozen events.
  memo_every_ = std::max(1, n_ / stride_ / 16);
  for (const SimTensor& t : problem_->tensors) {
    const float gap = static_cast<float>(t.ready_gap_us);
    on_time_grid_ = on_time_grid_ && OnTimeGridExact(gap) == gap;
    for (const OptionCost& option : t.options) {
      for (int k = 0; k < option.num_stages; ++k) {
        const float d = option.stages[k].duration_us;
        on_time_grid_ = on_time_grid_ && OnTimeGridExact(d) == d;
      }
    }
  }
  snapshots_.resize(n_);
  summaries_.resize(n_);
  snapshot_hash_.assign(2 * n_, 0);
  snapshot_hash_valid_.assign(2 * n_, 0);
  idle_before_.assign(n_, 0);
  stack_.resize(n_ + 1);
  if (n_ > 0) {
    Reset(snapshots_[0]);
    Run(snapshots_[0], {}, 0, Record::kNothing, kAborted, nullptr, n_);
    Summarize(snapshots_[0], &summaries_[0]);
    idle_before_[0] = 1;
    stack_[0] = snapshots_[0];
  }
}

void TimelineSimulator::Summarize(const State& s, Summary* summary) {
  summary->now = s.now;
  summary->active_partitions = s.active_partitions;
  for (int r = 0; r < kNumResources; ++r) summary->started_work[r] = s.resources[r].started_work;
}

void TimelineSimulator::KeepSnapshotsFrom(int tensor,
                                          const std::array<double, kNumResources>& started_work,
                                          double shift) {
  std::array<double, kNumResources> delta;
  for (int r = 0; r < kNumResources; ++r) {
    delta[r] = started_work[r] - summaries_[tensor].started_work[r];
  }
  for (int j = tensor; j < n_; ++j) {
    summaries_[j].now += shift;
    for (int r = 0; r < kNumResources; ++r) summaries_[j].started_work[r] += delta[r];
    if (j % stride_ != 0) continue;
    State& snapshot = snapshots_[j];
    for (int r = 0; r < kNumResources; ++r) snapshot.resources[r].started_work += delta[r];
    if (shift == 0) continue;
    snapshot.now += shift;
    for (Event& e : snapshot.events) e.time += shift;
    snapshot_hash_valid_[2 * j] = 0;  // (the hash of the times less the state's stays)
  }
}

void TimelineSimulator::Reset(State& s) const {
  s.now = 0;
  s.seq = 0;
  s.pending_ready = -1;
  s.active_partitions = 0;
  s.events.clear();
  for (auto& r : s.resources) {
    r.busy = 0;
    r.started_work = 0;
    r.queue.clear();
  }
  s.partitions.clear();
  s.free_slots.clear();
  const_cast<TimelineSimulator*>(this)->Enqueue(
      s, kCompute, ~0, 0, static_cast<float>(problem_->tensors[0].ready_gap_us), nullptr);
}

inline __attribute__((always_inline)) void TimelineSimulator::Start(State& s, int resource,
                                                                    int32_t job, float duration,
                                                                    std::vector<TraceSpan>* trace) {
  auto& r = s.resources[resource];
  ++r.busy;
  r.started_work += duration;
  // Sorted latest first, so the next event is the last: a new event, usually among the latest,
  // moves the few later ones up one place. (Its seq is the highest yet: it is later than an
  // event of the same time.)
  const Event e{s.now + duration, static_cast<uint32_t>(s.seq++), job * 16 + resource};
  s.events.push_back(e);
  auto at = s.events.end() - 1;
  while (at != s.events.begin() && e.time >= (at - 1)->time) {
    *at = *(at - 1);
    --at;
  }
  *at = e;
  if (trace != nullptr) {
    TraceSpan span{static_cast<uint8_t>(resource), 255, ~job, 0, s.now, duration};
    if (job >= 0) {
      const Partition& p = s.partitions[job];
      span.kind = p.cost->stages[p.stage].kind;
      span.tensor = p.tensor;
      span.partition = p.part;
    }
    trace->push_back(span);
  }
}

inline __attribute__((always_inline)) void TimelineSimulator::Enqueue(
    State& s, int resource, int32_t job, int32_t priority, float duration,
    std::vector<TraceSpan>* trace) {
  auto& r = s.resources[resource];
  if (r.busy < problem_->slots[resource] && r.queue.empty()) {
    Start(s, resource, job, duration, trace);
    return;
  }
  // Sorted lowest priority first, so the next job is the last: a new job, usually of a tensor
  // nearer the input than those waiting, goes near the end.
  const Waiting w{
      static_cast<uint64_t>(static_cast<uint32_t>(priority)) << 32 | static_cast<uint32_t>(s.seq++),
      job, duration};
  r.queue.push_back(w);
  auto at = r.queue.end() - 1;
  while (at != r.queue.begin() && LowerPriority(w, *(at - 1))) {
    *at = *(at - 1);
    --at;
  }
  *at = w;
}

inline __attribute__((always_inline)) void TimelineSimulator::EnqueueStage(
    State& s, int32_t slot, std::vector<TraceSpan>* trace) {
  const Partition& p = s.partitions[slot];
  const Stage& stage = p.cost->stages[p.stage];
  // The compute stream is in order; elsewhere the tensor nearest the input goes first.
  Enqueue(s, stage.resource, slot, stage.resource == kCompute ? 0 : p.priority, stage.duration_us,
          trace);
}

void TimelineSimulator::ExpandTensor(State& s, int tensor, int option,
                                     std::vector<TraceSpan>* trace) {
  const OptionCost& cost = problem_->tensors[tensor].options[option];
  for (int part = 0; part < cost.partitions; ++part) {
    int32_t slot;
    if (s.free_slots.empty()) {
      slot = static_cast<int32_t>(s.partitions.size());
      s.partitions.emplace_back();
    } else {
      slot = s.free_slots.back();
      s.free_slots.pop_back();
    }
    s.partitions[slot] = Partition{&cost,
                                   tensor,
                                   (n_ - tensor) * 4096 + std::min(part, 4095),
                                   static_cast<int16_t>(option),
                                   static_cast<int16_t>(std::min(part, 32767)),
                                   0};
    ++s.active_partitions;
    EnqueueStage(s, slot, trace);
  }
}

void TimelineSimulator::RecordReady(Record record, const State& s, int j) {
  const bool checkpoint = j % stride_ == 0;
  if (record == Record::kBaseline) {
    Summarize(s, &summaries_[j]);
    idle_before_[j] = s.active_partitions == 0;
    if (checkpoint) {
      snapshots_[j] = s;
      snapshot_hash_valid_[2 * j] = snapshot_hash_valid_[2 * j + 1] = 0;
    }
  } else {
    Summarize(s, &kept_.summaries[j]);
    kept_.idle_before[j] = s.active_partitions == 0;
    if (checkpoint) kept_.snapshots[j / stride_] = s;
  }
}

double TimelineSimulator::Run(State& s, const std::vector<int>& choice, int stop_tensor,
                              Record record, double cutoff_us, std::vector<TraceSpan>* trace,
                              int same_as_baseline_after) {
  const double forward = problem_->forward_us;
  const int from = s.pending_ready;
  // After the last tensor is ready, where no ready time checks the bound any more, the bound
  // on the work left is checked every kBoundEvery events, from the time it may reach the
  // cutoff on: it grows no faster than time (a resource's work left, running jobs' included,
  // falls at the rate of its busy slots, at most all of them), so a bound b at time t stays
  // below the cutoff until t + cutoff - b.
  constexpr int kBoundEvery = 8;
  int until_bound = kBoundEvery;
  double bound_reaches_cutoff_at = 0;
  bool all_ready = false;
  auto dispatch = [&](int resource) {
    auto& r = s.resources[resource];
    while (r.busy < problem_->slots[resource] && !r.queue.empty()) {
      Waiting w = r.queue.back();
      r.queue.pop_back();
      Start(s, resource, w.job, w.duration, trace);
    }
  };
  while (true) {
    if (s.pending_ready >= 0) {
      const int j = s.pending_ready;
      if (j == stop_tensor) return s.now;
      const bool checkpoint = j % stride_ == 0;
      // The same state as the baseline's at this ready time (a checkpoint's), and the
      // baseline's choice from here on: the rest of the run is the baseline's (when
      // recording a new baseline: its snapshots from here on are the old ones). States are
      // compared by a 64-bit order-independent hash of every pending job (time, resource,
      // tensor, option, stage).
      uint64_t hash = 0;
      bool hashed = false;
      if (checkpoint && j > same_as_baseline_after && run_memo_on_ && j > from &&
          (j / stride_) % memo_every_ == 0) {
        // Another run of this baseline in this state here: its end is this run's.
        hash = StateHash(s, false);
        hashed = true;
        const uint64_t key = Mix(hash ^ (static_cast<uint64_t>(j) * 0x9e3779b97f4a7c15ULL));
        auto known = run_memo_.find(key);
        if (known != run_memo_.end() && (known->second.exact || known->second.us >= cutoff_us)) {
          ++memo_hits_;
          return known->second.exact && known->second.us < cutoff_us ? known->second.us : kAborted;
        }
        run_keys_.push_back(key);
      }
      if (checkpoint && j > same_as_baseline_after &&
          s.active_partitions == summaries_[j].active_partitions && SameCounts(s, snapshots_[j])) {
        // The baseline's state, or that shifted in time (a second hash, of the pending
        // events' times less the state's): the rest of the run is the baseline's, shifted by
        // as much (the simulation depends on durations only, and times on the grid add
        // exactly: the same bits as running it).
        const bool same_time = s.now == summaries_[j].now;
        if (same_time ? (hashed ? hash : StateHash(s, false)) == SnapshotHash(j, false)
                      : on_time_grid_ && StateHash(s, true) == SnapshotHash(j, true)) {
          const double shift = s.now - summaries_[j].now;
          // (The work started so far differs by the change's: so does the rest's.)
          if (record != Record::kNothing) {
            std::array<double, kNumResources> started_work;
            for (int r = 0; r < kNumResources; ++r) started_work[r] = s.resources[r].started_work;
            if (record == Record::kBaseline) {
              KeepSnapshotsFrom(j, started_work, shift);
            } else {
              kept_.met = j;
              kept_.met_started_work = started_work;
              kept_.met_shift = shift;
            }
          }
          run_end_ = baseline_end_ + shift;
          const double result = run_end_ + forward;
          return result >= cutoff_us ? kAborted : result;
        }
      }
      if (record != Record::kNothing && j > from) RecordReady(record, s, j);
      // A bound from here: the work not started yet, and after the last change the tail
      // the caller knows for the baseline's choice.
      if (bound_work_ != nullptr && j > from) {
        double tail = 0;
        if (j > same_as_baseline_after && bound_tail_ != nullptr) tail = (*bound_tail_)[j];
        if (BoundFrom(s, *problem_, *bound_work_, tail) >= cutoff_us) return kAborted;
      }
      s.pending_ready = -1;
      ExpandTensor(s, j, choice[j], trace);
      all_ready = j + 1 == n_;
      if (j + 1 < n_) {
        Enqueue(s, kCompute, ~(j + 1), 0, static_cast<float>(problem_->tensors[j + 1].ready_gap_us),
                trace);
      }
      dispatch(kCompute);
    }
    if (s.events.empty()) break;
    if (s.events.back().time + forward >= cutoff_us) return kAborted;
    const Event e = s.events.back();
    s.events.pop_back();
    ++events_;
    s.now = e.time;
    const int32_t job = e.job();
    --s.resources[e.resource()].busy;
    if (job < 0) {
      s.pending_ready = ~job;  // dispatch after the tensor's own jobs are queued
      continue;
    }
    Partition& p = s.partitions[job];
    ++p.stage;
    if (p.stage < p.cost->num_stages) {
      EnqueueStage(s, job, trace);
    } else {
      --s.active_partitions;
      s.free_slots.push_back(job);
    }
    dispatch(e.resource());
    if (all_ready && bound_work_ != nullptr && --until_bound == 0) {
      until_bound = kBoundEvery;
      if (s.now >= bound_reaches_cutoff_at) {
        const double bound = RunningBound(s, *problem_, *bound_work_, 0);
        if (bound >= cutoff_us) return kAborted;
        bound_reaches_cutoff_at = s.now + (cutoff_us - bound);
      }
    }
  }
  run_end_ = s.now;
  return s.now + forward;
}

bool TimelineSimulator::SameCounts(const State& a, const State& b) {
  if (a.events.size() != b.events.size()) return false;
  for (int r = 0; r < kNumResources; ++r) {
    if (a.resources[r].queue.size() != b.resources[r].queue.size()) return false;
  }
  return true;
}

uint64_t TimelineSimulator::SnapshotHash(int tensor, bool relative) {
  const int at = 2 * tensor + (relative ? 1 : 0);
  if (!snapshot_hash_valid_[at]) {
    snapshot_hash_[at] = StateHash(snapshots_[tensor], relative);
    snapshot_hash_valid_[at] = 1;
  }
  return snapshot_hash_[at];
}

uint64_t TimelineSimulator::StateHash(const State& s, bool relative) const {
  auto job_key = [&](int32_t job) -> uint64_t {
    if (job < 0) return 0xC0FFEEULL ^ (static_cast<uint64_t>(~job) << 20);
    const Partition& p = s.partitions[job];
    return (static_cast<uint64_t>(p.tensor) << 40) ^ (static_cast<uint64_t>(p.option) << 24) ^
           (static_cast<uint64_t>(p.part) << 8) ^ static_cast<uint64_t>(p.stage);
  };
  uint64_t h = relative ? 0x7e1a71e5ULL : Mix(Bits(s.now));
  for (const Event& e : s.events) {
    const uint64_t time = Bits(relative ? e.time - s.now : e.time);  // (exact on the grid)
    h += Mix(time ^ Mix(job_key(e.job()) + e.resource()));
  }
  for (int r = 0; r < kNumResources; ++r) {
    for (const Waiting& w : s.resources[r].queue) {
      h += Mix(0x5151ULL + r + Mix(job_key(w.job) ^ 0xABCDEFULL));
    }
  }
  return h;
}

double TimelineSimulator::Simulate(const std::vector<int>& choice, std::vector<TraceSpan>* trace,
                                   double cutoff_us) {
  ++simulations_;
  State s;
  Reset(s);
  if (trace != nullptr) trace->clear();
  // Reset queued segment 0 without a trace; record it by hand.
  if (trace != nullptr) {
    trace->push_back(TraceSpan{kCompute, 255, 0, 0, 0, problem_->tensors[0].ready_gap_us});
  }
  return Run(s, choice, n_, Record::kNothing, cutoff_us, trace, n_);
}

double TimelineSimulator::Rebase(const std::vector<int>& choice, int from, int last_changed) {
  ++simulations_;
  run_memo_.clear();
  scratch_ = snapshots_[Checkpoint(from)];
  kept_.complete = false;
  Run(scratch_, choice, n_, Record::kBaseline, kAborted, nullptr,
      last_changed < 0 ? n_ : last_changed);
  baseline_end_ = run_end_;
  return baseline_us();
}

bool TimelineSimulator::AdoptEvaluated() {
  if (!kept_.complete) return false;
  kept_.complete = false;
  run_memo_.clear();
  const int end = kept_.met >= 0 ? kept_.met : n_;
  for (int j = kept_.from + 1; j < end; ++j) {
    summaries_[j] = kept_.summaries[j];
    idle_before_[j] = kept_.idle_before[j];
    if (j % stride_ == 0) {
      std::swap(snapshots_[j], kept_.snapshots[j / stride_]);
      snapshot_hash_valid_[2 * j] = snapshot_hash_valid_[2 * j + 1] = 0;
    }
  }
  if (kept_.met >= 0) KeepSnapshotsFrom(kept_.met, kept_.met_started_work, kept_.met_shift);
  baseline_end_ = kept_.end;
  return true;
}

double TimelineSimulator::Evaluate(const std::vector<int>& choice, int from, double cutoff_us,
                                   int last_changed,
                                   const std::array<double, kNumResources>* total_work,
                                   const std::vector<double>* tail_us) {
  scratch_ = snapshots_[Checkpoint(from)];  // the baseline's choice up to tensor `from`
  return EvaluateScratch(choice, cutoff_us, last_changed < 0 ? from : last_changed, total_work,
                         tail_us);
}

bool TimelineSimulator::RunUntilReady(const std::vector<int>& choice, int from, int stop,
                                      double cutoff_us,
                                      const std::array<double, kNumResources>& least_work,
                                      State* state) {
  ++simulations_;
  *state = snapshots_[Checkpoint(from)];
  bound_work_ = &least_work;
  const double result = Run(*state, choice, stop, Record::kNothing, cutoff_us, nullptr, n_);
  bound_work_ = nullptr;
  return result != kAborted;
}

double TimelineSimulator::EvaluateFrom(const State& state, const std::vector<int>& choice,
                                       double cutoff_us, int last_changed,
                                       const std::array<double, kNumResources>* total_work,
                                       const std::vector<double>* tail_us) {
  // Run checks the bound at the ready times after the one it starts at; a run from a
  // snapshot before this one checked it here.
  const int ready = state.pending_ready;
  if (total_work != nullptr) {
    const double tail = ready > last_changed && tail_us != nullptr ? (*tail_us)[ready] : 0;
    if (BoundFrom(state, *problem_, *total_work, tail) >= cutoff_us) return kAborted;
  }
  scratch_ = state;
  return EvaluateScratch(choice, cutoff_us, last_changed, total_work, tail_us);
}

double TimelineSimulator::EvaluateScratch(const std::vector<int>& choice, double cutoff_us,
                                          int last_changed,
                                          const std::array<double, kNumResources>* total_work,
                                          const std::vector<double>* tail_us) {
  ++simulations_;
  bound_work_ = total_work;
  bound_tail_ = tail_us;
  run_memo_on_ = run_memo_wanted_;
  run_keys_.clear();
  const int64_t memo_hits = memo_hits_;
  Record record = Record::kNothing;
  if (keep_evaluated_) {
    record = Record::kKept;
    if (kept_.summaries.empty()) {
      kept_.snapshots.resize((n_ + stride_ - 1) / stride_);
      kept_.summaries.resize(n_);
      kept_.idle_before.resize(n_);
    }
    kept_.from = scratch_.pending_ready;
    kept_.met = -1;
  }
  double result = Run(scratch_, choice, n_, record, cutoff_us, nullptr, last_changed);
  kept_.complete = keep_evaluated_ && result != kAborted && memo_hits_ == memo_hits;
  kept_.end = run_end_;
  run_memo_on_ = false;
  RecordRunOutcome(result, cutoff_us);
  bound_work_ = nullptr;
  bound_tail_ = nullptr;
  return result;
}

void TimelineSimulator::RecordRunOutcome(double result, double cutoff_us) {
  // A run that ended gives its end; one that was cut (by the cutoff, a bound, or the
  // baseline's shifted end), that the end is at least the cutoff.
  for (uint64_t key : run_keys_) {
    RunOutcome& known = run_memo_[key];
    if (result != kAborted) {
      known = {result, true};
    } else if (!known.exact) {
      known.us = std::max(known.us, cutoff_us);
    }
  }
  run_keys_.clear();
}

std::array<double, kNumResources> TimelineSimulator::TotalWork(
    const std::vector<int>& choice) const {
  std::array<double, kNumResources> work{};
  for (int i = 0; i < n_; ++i) {
    const auto& t = problem_->tensors[i];
    work[kCompute] += static_cast<float>(t.ready_gap_us);
    const auto& w = t.options[choice[i]].work_us;
    for (int r = 0; r < kNumResources; ++r) work[r] += w[r];
  }
  return work;
}

namespace {
template <typename StartedWork>
double BoundFrom(double now, StartedWork started_work, const SimProblem& problem,
                 const std::array<double, kNumResources>& total_work, double tail_us) {
  double lb = now + tail_us;
  for (int r = 0; r < kNumResources; ++r) {
    double remaining = total_work[r] - started_work(r);
    if (remaining > 0) lb = std::max(lb, now + remaining / problem.slots[r]);
  }
  // Float rounding of durations must not make the bound exceed the true time.
  return (lb + problem.forward_us) * (1 - 1e-9) - 1e-6;
}
}  // namespace

double TimelineSimulator::LowerBound(int from, const std::array<double, kNumResources>& total_work,
                                     double tail_us) const {
  const Summary& s = summaries_[from];
  return BoundFrom(
      s.now, [&](int r) { return s.started_work[r]; }, *problem_, total_work, tail_us);
}

double TimelineSimulator::StackLowerBound(int depth,
                                          const std::array<double, kNumResources>& total_work,
                                          double tail_us) const {
  return BoundFrom(stack_[depth], *problem_, total_work, tail_us);
}

double StreamUs(const OptionCost& cost) {
  return cost.num_stages > 0 && cost.stages[0].resource == kCompute
             ? static_cast<double>(cost.stages[0].duration_us) * cost.partitions
             : 0;
}

void ComputeTailBounds(const SimProblem& problem, const std::vector<int>& choice,
                       TailBounds* bounds, int last_changed, int first) {
  const int n = static_cast<int>(problem.tensors.size());
  auto stream = [&](int k) { return StreamUs(problem.tensors[k].options[choice[k]]); };
  // Tensors computed again: all, or those up to the last changed one when the bounds are of a
  // choice that differs from `choice` only there, with the same stream times (the offsets
  // stay; the bounds of later tensors depend on later tensors only).
  int top = n - 1;
  if (last_changed >= 0 && last_changed < n - 1 && static_cast<int>(bounds->stream.size()) == n) {
    bool same = true;
    for (int k = 0; k <= last_changed && same; ++k) same = stream(k) == bounds->stream[k];
    if (same) top = last_changed;
  }
  if (top == n - 1) {
    bounds->offset.resize(n);
    bounds->latest.assign(n + 1, -1e300);
    bounds->after.resize(n);
    bounds->stream.resize(n);
    bounds->suffix.resize(n + 1);
    // (Gaps as the simulator adds them: float durations.)
    bounds->gaps.assign(n, 0);
    double offset = 0;
    for (int k = 0; k < n; ++k) {
      if (k > 0) {
        const float gap = static_cast<float>(problem.tensors[k].ready_gap_us);
        bounds->gaps[k] = bounds->gaps[k - 1] + gap;
        offset += gap;
      }
      bounds->offset[k] = offset;
      bounds->stream[k] = stream(k);
      offset += bounds->stream[k];
    }
    TailBounds::Suffix& none = bounds->suffix[n];
    none.work.fill(0);
    none.least_before.fill(1e300);
    none.least_after.fill(1e300);
  }
  const std::vector<double>& gaps = bounds->gaps;
  TailBounds::Suffix acc = bounds->suffix[top + 1];
  auto& [suffix, least_before, least_after] = acc;
  for (int k = top; k >= first; --k) {
    const OptionCost& cost = problem.tensors[k].options[choice[k]];
    double bound = cost.span_us;
    for (int r = 0; r < kNumResources; ++r) {
      if (cost.work_us[r] <= 0) continue;
      suffix[r] += cost.work_us[r];
      least_before[r] = std::min(least_before[r], cost.before_us[r]);
      least_after[r] = std::min(least_after[r], cost.after_us[r]);
    }
    bounds->suffix[k] = acc;
    for (int r = 0; r < kNumResources; ++r) {
      if (suffix[r] <= 0) continue;
      if (r == kCompute) {
        // The stream's own work after tensor k is ready: the later backward segments and
        // the compute stages of tensors >= k.
        bound = std::max(bound, gaps[n - 1] - gaps[k] + suffix[r]);
        continue;
      }
      // (x / 1 is x: one slot needs no division.)
      const double per_slot = problem.slots[r] == 1 ? suffix[r] : suffix[r] / problem.slots[r];
      bound = std::max(bound, least_before[r] + per_slot + least_after[r]);
    }
    bounds->latest[k] = std::max(bounds->latest[k + 1], bounds->offset[k] + bound);
    bounds->after[k] = bounds->latest[k] - bounds->offset[k];
  }
}

double TimelineSimulator::ready_time_us(int tensor) const { return summaries_[tensor].now; }
bool TimelineSimulator::idle_before(int tensor) const { return idle_before_[tensor] != 0; }

double TimelineSimulator::ExtendStack(const std::vector<int>& choice, int depth) {
  stack_[depth + 1] = stack_[depth];
  const int stop = depth + 1 < n_ ? depth + 1 : n_;
  if (stop == n_) ++simulations_;
  return Run(stack_[depth + 1], choice, stop, Record::kNothing, kAborted, nullptr, n_);
}

std::string ChromeTraceJson(const SimProblem& problem, const std::vector<TraceSpan>& spans) {
  std::vector<TraceSpan> sorted = spans;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const TraceSpan& a, const TraceSpan& b) { return a.start_us < b.start_us; });
  std::array<std::vector<double>, kNumResources> lane_end;
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  std::vector<std::pair<int, int>> lanes_used;
  bool first = true;
  for (const TraceSpan& span : sorted) {
    auto& ends = lane_end[span.resource];
    size_t lane = 0;
    while (lane < ends.size() && ends[lane] > span.start_us + 1e-9) ++lane;
    if (lane == ends.size()) {
      ends.push_back(0);
      lanes_used.push_back({span.resource, static_cast<int>(lane)});
    }
    ends[lane] = span.start_us + span.duration_us;
    const std::string& tensor = problem.tensors[span.tensor].name;
    std::string name = span.kind == 255 ? absl::StrCat("backward ", tensor)
                                        : absl::StrCat(StageKindName(span.kind), " ", tensor, "[",
                                                       span.partition, "]");
    if (!first) out += ",\n";
    first = false;
    out += "{\"name\":";
    AppendJsonString(out, name);
    absl::StrAppend(&out, ",\"cat\":\"", span.kind == 255 ? "backward" : StageKindName(span.kind),
                    "\",\"ph\":\"X\",\"pid\":0,\"tid\":", span.resource * 100 + lane,
                    ",\"ts\":", span.start_us, ",\"dur\":", span.duration_us,
                    ",\"args\":{\"tensor\":", span.tensor, "}}");
  }
  for (auto [resource, lane] : lanes_used) {
    if (!first) out += ",\n";
    first = false;
    absl::StrAppend(
        &out, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":", resource * 100 + lane,
        ",\"args\":{\"name\":\"", ResourceName(resource), " ", lane, "\"}}");
  }
  out += "\n]}\n";
  return out;
}

}  // namespace bytecomp::planner
