// Discrete-event simulation of one training iteration over the machine's resources.
//
// The backward pass is a chain of compute segments on kCompute (segment i ends when tensor
// i's gradient is ready). A ready tensor's partitions then walk their stages (OptionCost);
// each resource serves `slots` jobs at a time. kCompute is one in-order stream (a GPU
// encode queued when tensor i is ready delays segment i+1); every other resource serves the
// waiting job nearest the input layer first (BytePS priorities). The iteration ends when
// the last job ends, plus the forward pass.
//
// Incremental use: what happens before tensor i is ready cannot depend on the options of
// tensors >= i, so the simulator keeps a snapshot of its state at the ready time of every
// stride-th tensor (1 up to 127 tensors, n / 64 above: a change of the baseline copies
// n / stride states) and of every tensor its time and work started, and evaluates a change to
// tensor i by resuming from the snapshot at or before i.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include "bytecomp/planner/decision_tree.h"

namespace bytecomp::planner {

// The planning problem in numbers: per tensor its gap and its options' costs.
struct SimTensor {
  std::string name;
  int64_t bytes = 0;
  double ready_gap_us = 0;
  std::vector<OptionCost> options;
  int tree_options = 0;  // leaves of the decision tree, before dropping dominated ones
};
struct SimProblem {
  // Durations (ready gaps, stages) on the time grid (OnTimeGrid), as Prepare makes them.
  std::vector<SimTensor> tensors;  // backprop order
  double forward_us = 0;
  std::array<int, kNumResources> slots{};  // jobs a resource runs at once
};

struct TraceSpan {
  uint8_t resource;
  uint8_t kind;  // StageKind, or 255 for a backward compute segment
  int32_t tensor;
  int32_t partition;
  double start_us;
  double duration_us;
};

class TimelineSimulator {
 public:
  static constexpr double kAborted = std::numeric_limits<double>::infinity();

  explicit TimelineSimulator(const SimProblem* problem);

  // Full simulation of `choice` (option index per tensor); optional trace. Returns kAborted
  // as soon as the result is known to be >= cutoff_us.
  double Simulate(const std::vector<int>& choice, std::vector<TraceSpan>* trace = nullptr,
                  double cutoff_us = kAborted);

  // Makes `choice` the baseline: simulates from snapshot `from` (0: from the start) and
  // refreshes the snapshots of tensors after it. Snapshots before `from` must still hold,
  // i.e. `choice` equals the previous baseline on tensors < from. Returns the iteration time.
  // With `last_changed` (the last tensor where `choice` differs from the previous baseline):
  // once the run, after it, reaches a checkpoint in the previous baseline's state (or that
  // shifted in time), the rest and its snapshots are the previous baseline's (shifted).
  double Rebase(const std::vector<int>& choice, int from = 0, int last_changed = -1);
  double baseline_us() const { return baseline_end_ + problem_->forward_us; }

  // Iteration time of `choice`, which equals the baseline on tensors < from, resuming from
  // snapshot `from`. Returns kAborted as soon as the result is known to be >= cutoff_us.
  // `last_changed` (default `from`): the last tensor where `choice` differs from the
  // baseline; once the run, after it, reaches a checkpoint in the same state as the baseline
  // did, or that state shifted in time, the rest is the baseline's (shifted by as much) and
  // is not simulated again.
  // With `total_work` (the whole iteration's work per resource under `choice`), the run
  // also stops at any ready time where LowerBound's bound reaches the cutoff; `tail_us[j]`,
  // when given, bounds what must still happen after tensor j is ready under the baseline's
  // choice (used only after the last change).
  double Evaluate(const std::vector<int>& choice, int from, double cutoff_us = kAborted,
                  int last_changed = -1,
                  const std::array<double, kNumResources>* total_work = nullptr,
                  const std::vector<double>* tail_us = nullptr);

  struct State;
  // For changes of two tensors a < b, evaluated for one option of a with many of b: the state
  // when tensor `stop` (b) is ready under `choice`, resumed from snapshot `from` (a), which
  // nothing before it depends on b's option. False when the run is known to end at or after
  // cutoff_us: an event past it, or at a ready time the bound on the work not started yet
  // of `least_work` (per resource at most the whole iteration's work of any choice that
  // follows). EvaluateFrom then resumes from it for each option of b.
  bool RunUntilReady(const std::vector<int>& choice, int from, int stop, double cutoff_us,
                     const std::array<double, kNumResources>& least_work, State* state);
  // Evaluate, resumed from `state` (RunUntilReady's, of a choice that equals `choice` before
  // its ready tensor) instead of a snapshot: the same result.
  double EvaluateFrom(const State& state, const std::vector<int>& choice, double cutoff_us,
                      int last_changed,
                      const std::array<double, kNumResources>* total_work = nullptr,
                      const std::vector<double>* tail_us = nullptr);

  // A lower bound on Evaluate(choice, from): the time of snapshot `from` plus the larger of
  // the work not yet started on the busiest resource and `tail_us` (a bound, from the
  // caller, on what must still happen after snapshot `from`). `total_work` is the whole
  // iteration's work per resource under `choice`.
  double LowerBound(int from, const std::array<double, kNumResources>& total_work,
                    double tail_us = 0) const;
  // Total work per resource of `choice` (compute segments included).
  std::array<double, kNumResources> TotalWork(const std::vector<int>& choice) const;

  // Time tensor i became ready in the baseline, and whether every earlier tensor's
  // communication had finished by then (a communication bubble before tensor i).
  double ready_time_us(int tensor) const;
  bool idle_before(int tensor) const;

  // For the exhaustive search: run state `depth`'s snapshot with choice[depth] until tensor
  // depth+1 is ready (or to the end when depth is the last tensor). Uses a private stack.
  double ExtendStack(const std::vector<int>& choice, int depth);
  // Lower bound from the stacked state at `depth` (depth tensors expanded already).
  double StackLowerBound(int depth, const std::array<double, kNumResources>& total_work,
                         double tail_us = 0) const;

  // Evaluate remembers, per baseline, each run's end (or that it was cut) at some of its
  // checkpoint states after its change, and a run that reaches one of those states takes that
  // end (the same state and the same choice from there: the same rest). It pays when many
  // single changes of one baseline are tried whose runs meet after their changes
  // (PreferLessLoss: changes of same-shaped tensors that leave the same backlog); elsewhere
  // the hashing costs more than it saves, so it is off unless asked for.
  void UseRunMemo(bool on) { run_memo_wanted_ = on; }
  // Evaluate runs that took their end from the memo.
  int64_t memo_hits() const { return memo_hits_; }

  // Evaluate also keeps what Rebase would record of its run (the states at the checkpoints
  // and the summaries after its start), so that a change found good becomes the baseline
  // without being simulated again (AdoptEvaluated). It copies the state at every checkpoint
  // the runs pass, so it pays where many evaluated changes are kept (PreferLessLoss).
  void KeepEvaluatedRuns(bool on) { keep_evaluated_ = on; }
  // Makes the `choice` of the last Evaluate the baseline, as Rebase(choice, from,
  // last_changed) with that Evaluate's arguments would, from what its run kept. False, and
  // nothing changed, when that run did not end (cut at its cutoff, or its end taken from the
  // run memo).
  bool AdoptEvaluated();

  int64_t simulations() const { return simulations_; }
  int64_t events_processed() const { return events_; }

 public:
  // 16 bytes, moved often: the job and its resource share one word.
  static_assert(kNumResources <= 16);
  struct Event {
    double time;
    uint32_t seq;          // ties at one time: the earlier started first
    int32_t job_resource;  // job * 16 + resource; job >= 0: partition slot; < 0: segment ~job
    int32_t job() const { return job_resource >> 4; }
    int resource() const { return job_resource & 15; }
  };
  struct Waiting {
    uint64_t order;  // priority << 32 | seq: the lowest first
    int32_t job;
    float duration;
  };
  struct ResourceState {
    int busy = 0;
    double started_work = 0;
    std::vector<Waiting> queue;  // the lowest priority first: the next job is the last
  };
  struct Partition {
    const OptionCost* cost;  // the tensor's option, for its stages
    int32_t tensor;
    int32_t priority;  // off the compute stream: the tensor nearest the input first, then part
    int16_t option;
    int16_t part;
    int8_t stage;
  };
  // Of the baseline's state at a tensor's ready time: what bounds and checks need.
  struct Summary {
    double now = 0;
    int active_partitions = 0;
    std::array<double, kNumResources> started_work{};
  };
  struct State {
    double now = 0;
    uint64_t seq = 0;
    int pending_ready = -1;  // tensor whose ready handling is due (state is its snapshot)
    int active_partitions = 0;
    std::vector<Event> events;  // the latest first: the next event is the last
    std::array<ResourceState, kNumResources> resources;
    std::vector<Partition> partitions;
    std::vector<int32_t> free_slots;
  };

 private:
  void Reset(State& state) const;
  // Evaluate's run from scratch_ (a snapshot, or EvaluateFrom's state).
  double EvaluateScratch(const std::vector<int>& choice, double cutoff_us, int last_changed,
                         const std::array<double, kNumResources>* total_work,
                         const std::vector<double>* tail_us);
  static void Summarize(const State& state, Summary* summary);
  // A new baseline in the previous one's state at tensor's ready time, `shift` later, where
  // the work started so far is `started_work`: the snapshots and summaries from there on stay,
  // their times moved by `shift` and their work started by the difference.
  void KeepSnapshotsFrom(int tensor, const std::array<double, kNumResources>& started_work,
                         double shift);
  // What a run records of the tensors in (from, n) it passes: nothing, the new baseline's
  // snapshots and summaries (Rebase), or the same kept aside (Evaluate, KeepEvaluatedRuns).
  enum class Record { kNothing, kBaseline, kKept };
  // Runs until tensor `stop_tensor` is ready (its snapshot) or to the end (returns the end).
  double Run(State& state, const std::vector<int>& choice, int stop_tensor, Record record,
             double cutoff_us, std::vector<TraceSpan>* trace, int same_as_baseline_after);
  void RecordReady(Record record, const State& s, int tensor);
  void Enqueue(State& s, int resource, int32_t job, int32_t priority, float duration,
               std::vector<TraceSpan>* trace);
  void Start(State& s, int resource, int32_t job, float duration, std::vector<TraceSpan>* trace);
  void ExpandTensor(State& s, int tensor, int option, std::vector<TraceSpan>* trace);
  void EnqueueStage(State& s, int32_t slot, std::vector<TraceSpan>* trace);

  const SimProblem* problem_;
  int n_;
  // `relative`: of the pending events' times less the state's time (exact: times are on the
  // grid, OnTimeGrid), so that a state equals another shifted in time.
  uint64_t StateHash(const State& s, bool relative) const;
  uint64_t SnapshotHash(int tensor, bool relative);  // computed when first needed
  // As many pending events and waiting jobs per resource: states whose hashes may be equal
  // (a cheaper test first).
  static bool SameCounts(const State& a, const State& b);

  // Every duration of the problem on the time grid (OnTimeGrid; Prepare puts them there): a
  // state met shifted in time runs as the baseline's shifted, to the bit. Otherwise only
  // states met at the same time end runs early.
  bool on_time_grid_ = true;
  int Checkpoint(int tensor) const { return tensor - tensor % stride_; }
  int stride_ = 1;
  // snapshots_[i]: the state when tensor i becomes ready, for i a multiple of stride_.
  std::vector<State> snapshots_;
  std::vector<Summary> summaries_;       // of every tensor
  std::vector<uint64_t> snapshot_hash_;  // [2 * tensor + relative]
  std::vector<uint8_t> snapshot_hash_valid_;
  std::vector<uint8_t> idle_before_;
  std::vector<State> stack_;  // exhaustive search
  State scratch_;
  // What Evaluate runs of the current baseline found from a checkpoint's state on (after their
  // changes, where the rest of the choice is the baseline's): the same state at the same
  // checkpoint has the same rest, so the same end. Keyed by (checkpoint, StateHash); the end
  // exactly, or a lower bound (the cutoff that cut the run). Cleared by Rebase.
  struct RunOutcome {
    double us = -1e300;
    bool exact = false;
  };
  std::unordered_map<uint64_t, RunOutcome> run_memo_;
  std::vector<uint64_t> run_keys_;  // the current Evaluate run's checkpoint keys
  bool run_memo_wanted_ = false;    // UseRunMemo
  bool run_memo_on_ = false;        // during Evaluate, where wanted
  int memo_every_ = 1;              // the memo's checkpoints: every memo_every_-th one
  int64_t memo_hits_ = 0;
  void RecordRunOutcome(double result, double cutoff_us);
  // The last Evaluate's run, kept (KeepEvaluatedRuns): what Rebase would have recorded of the
  // tensors in (from, end), where it ended or met the previous baseline's state.
  struct KeptRun {
    bool complete = false;  // ran to its end or to the previous baseline's state
    int from = 0;
    int met = -1;  // the tensor where it met the previous baseline's state, or -1
    std::array<double, kNumResources> met_started_work{};
    double met_shift = 0;          // how much later than the previous baseline's state it met
    double end = 0;                // the last job's end (the forward pass not added)
    std::vector<State> snapshots;  // [tensor / stride_]
    std::vector<Summary> summaries;
    std::vector<uint8_t> idle_before;
  };
  KeptRun kept_;
  bool keep_evaluated_ = false;
  const std::array<double, kNumResources>* bound_work_ = nullptr;
  const std::vector<double>* bound_tail_ = nullptr;
  double baseline_end_ = 0;  // the baseline's last job's end (baseline_us less the forward)
  double run_end_ = 0;       // of the last Run that ended: its last job's end
  int64_t simulations_ = 0;
  int64_t events_ = 0;
};

// Lower bounds on what must still happen after each tensor is ready, for a choice (the
// search's baseline), valid for any choice equal to it on the tensors they cover:
//  - tensor j is ready no earlier than tensor k < j plus offset[j] - offset[k]: the backward
//    segments between them and the encodes the choice queues on the compute stream ahead of
//    them (StreamUs);
//  - tensor j's last partition is done no earlier than its readiness plus its span_us;
//  - per resource, none of the work of tensors >= j starts before tensor j is ready plus the
//    least time their partitions spend before reaching it, it takes at least that work over
//    the slots, and the last of it is followed by the least time they spend after it (on a
//    communication-bound timeline the end is close to this bound, where chains alone are far
//    from it).
// latest[k]: the largest of offset[j] plus these bounds over tensors j >= k (-1e300 past the
// last tensor); after[k] = latest[k] - offset[k], the bound from tensor k's ready time to the
// last job's end, the forward pass excluded (Evaluate's tail_us).
// With `last_changed`, `bounds` holds (from this function) the bounds of a choice that
// differs from `choice` at most on tensors <= last_changed: where those tensors' stream times
// are the same, only the bounds of tensors <= last_changed are computed again, from what the
// later ones' left (the same numbers as computing them all).
// With `first`, the bounds of tensors before it are not computed (the offsets are): they stay
// as they were until a later call, whose last_changed is at least first - 1, computes them.
struct TailBounds {
  std::vector<double> offset;
  std::vector<double> latest;  // n + 1 entries
  std::vector<double> after;
  // Of the choice, for a later update: each tensor's stream time, the gaps before it, and per
  // resource the work, least time before and least time after of tensors >= k (n + 1).
  struct Suffix {
    std::array<double, kNumResources> work, least_before, least_after;
  };
  std::vector<double> stream;
  std::vector<double> gaps;
  std::vector<Suffix> suffix;
};
void ComputeTailBounds(const SimProblem& problem, const std::vector<int>& choice,
                       TailBounds* bounds, int last_changed = -1, int first = 0);
// The compute-stream time an option queues ahead of the next backward segment when its tensor
// is ready: its partitions' GPU encodes (their first stage).
double StreamUs(const OptionCost& cost);

// Chrome trace JSON (chrome://tracing, Perfetto) of simulated spans; one row per resource
// slot, names from the tensors.
std::string ChromeTraceJson(const SimProblem& problem, const std::vector<TraceSpan>& spans);

}  // namespace bytecomp::planner
