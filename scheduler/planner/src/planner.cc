#include "bytecomp/planner/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <tuple>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/strategy.h"
#include "bytecomp/planner/allowed_codecs.h"

namespace bytecomp::planner {
namespace {

using Work = std::array<double, kNumResources>;

Work WithSwap(Work total, const Work& old_work, const Work& new_work) {
  for (int r = 0; r < kNumResources; ++r) total[r] += new_work[r] - old_work[r];
  return total;
}

int FindOption(const SimTensor& tensor, const TensorOption& wanted) {
  for (size_t o = 0; o < tensor.options.size(); ++o) {
    if (tensor.options[o].option == wanted) return static_cast<int>(o);
  }
  return -1;
}

bool HasGpu(const PlannerInputs& in) {
  return in.cluster.gpus_per_machine() > 0 && !in.options.disable_gpu();
}

// A choice's key: the sum over tensors of a 64-bit mix of (tensor, option), updated in O(1)
// when a tensor's option changes.
uint64_t OptionKey(int tensor, int option) {
  uint64_t x =
      (static_cast<uint64_t>(tensor) << 24) + static_cast<uint64_t>(option) + 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// What simulations found, by the choice's key, for every search of one plan (the main one
// and the other starts): a choice's time does not depend on which baseline it was simulated
// from. A run that ended gives the exact time; a run cut off at a cutoff, that the time is
// at least the cutoff. Refinement passes, pairs and the other starts try many choices
// again.
class Memo {
 public:
  // The answer of Evaluate(choice, cutoff) when it is known: the time, or kAborted.
  bool Find(uint64_t key, double cutoff, double* result) const {
    auto it = known_.find(key);
    if (it == known_.end()) return false;
    if (it->second.exact) {
      *result = it->second.us < cutoff ? it->second.us : TimelineSimulator::kAborted;
      return true;
    }
    if (it->second.us < cutoff) return false;
    *result = TimelineSimulator::kAborted;
    return true;
  }
  void Store(uint64_t key, double cutoff, double result) {
    Known& known = known_[key];
    if (result != TimelineSimulator::kAborted) {
      known = {result, true};
    } else if (!known.exact) {
      known.us = std::max(known.us, cutoff);
    }
  }

 private:
  struct Known {
    double us = -1e300;  // exact, else a lower bound
    bool exact = false;
  };
  std::unordered_map<uint64_t, Known> known_;
};

// The search state shared by the algorithm's steps: the current choice, its simulated
// iteration time (the simulator's baseline) and its total work per resource.
class Search {
 public:
  Search(const PreparedProblem& problem, Memo* memo)
      : keep_(1 - problem.inputs.options.min_relative_gain()),
        problem_(problem),
        memo_(memo),
        sim_(&problem.sim),
        choice_(problem.none_index) {
    const int n = static_cast<int>(problem.sim.tensors.size());
    gaps_.resize(n);
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      if (i > 0) sum += static_cast<float>(problem.sim.tensors[i].ready_gap_us);
      gaps_[i] = sum;
    }
    time_ = sim_.Rebase(choice_, 0);
    total_ = sim_.TotalWork(choice_);
    for (int i = 0; i < n; ++i) key_ += OptionKey(i, choice_[i]);
    RefreshTails();
  }

  const std::vector<int>& choice() const { return choice_; }
  double time() const { return time_; }
  // A change must beat this to be kept.
  double target() const { return time_ * keep_; }
  TimelineSimulator& sim() { return sim_; }

  const Work& work(int tensor, int option) const {
    return problem_.sim.tensors[tensor].options[option].work_us;
  }

  // Best option for `tensor` among `allowed` with the others fixed; commits it if it is
  // better. Options are tried in order of their chain bound; the loop stops at the first
  // such bound that cannot beat the best time found, and skips (without simulating, but
  // counting it in max_simulations) an option whose tail bound (TailBounds) cannot.
  bool ImproveTensor(int tensor, const std::vector<int>& allowed, int max_simulations = 1 << 30) {
    const int current = choice_[tensor];
    candidates_.clear();
    const double later_tail = tail_max_[tensor + 1] - gaps_[tensor];
    // Later tensors keep their options; they are ready later by this one's stream time.
    const double later_bound =
        bounds_.latest[tensor + 1] - bounds_.offset[tensor] - Stream(tensor, current);
    for (int o : allowed) {
      if (o == current) continue;
      const Work total = WithSwap(total_, work(tensor, current), work(tensor, o));
      const double lb = sim_.LowerBound(tensor, total, std::max(later_tail, Chain(tensor, o)));
      if (lb >= time_ * keep_) continue;
      const double bound = sim_.LowerBound(
          tensor, total, std::max(later_bound + Stream(tensor, o), Span(tensor, o)));
      candidates_.push_back({lb, o, bound});
    }
    std::sort(candidates_.begin(), candidates_.end(), [](const Candidate& a, const Candidate& b) {
      return std::tie(a.lb, a.option) < std::tie(b.lb, b.option);
    });
    double best_time = time_ * keep_;
    int best = current;
    for (const auto& [lb, o, bound] : candidates_) {
      if (lb >= best_time || max_simulations-- == 0) break;
      if (bound >= best_time) continue;
      const uint64_t key = key_ - OptionKey(tensor, current) + OptionKey(tensor, o);
      double t;
      if (!memo_->Find(key, best_time, &t)) {
        choice_[tensor] = o;
        const Work total = WithSwap(total_, work(tensor, current), work(tensor, o));
        t = sim_.Evaluate(choice_, tensor, best_time, tensor, &total, &bounds_.after);
        memo_->Store(key, best_time, t);
      }
      if (t < best_time) {
        best_time = t;
        best = o;
      }
    }
    choice_[tensor] = current;
    if (best == current) return false;
    Commit({{tensor, best}});
    return true;
  }

  // The states when tensor b is ready with a's option x (the others the baseline's), for
  // the changes of a pair a < b: every option of b with x resumes from it (ImprovePair).
  struct PairPrefixes {
    int a = -1, b = -1;
    Work least_b{};                 // per resource, the least work of b's options
    std::vector<uint8_t> state_of;  // per x: kUnknown, kReady, kCut
    std::vector<TimelineSimulator::State> states;
    static constexpr uint8_t kUnknown = 0, kReady = 1, kCut = 2;
  };

  // Evaluates a change of several tensors; returns the time or kAborted if >= cutoff. With
  // `prefixes`, the change is {{a, x}, {b, y}} of their pair.
  double EvaluateChange(const std::vector<std::pair<int, int>>& change, double cutoff,
                        PairPrefixes* prefixes = nullptr) {
    if (change.empty()) return time_;
    int from = change[0].first, last = change[0].first;
    Work total = total_;
    uint64_t key = key_;
    std::vector<std::pair<int, int>> undo;
    for (auto [t, o] : change) {
      from = std::min(from, t);
      last = std::max(last, t);
      key += OptionKey(t, o) - OptionKey(t, choice_[t]);
      total = WithSwap(total, work(t, choice_[t]), work(t, o));
      undo.push_back({t, choice_[t]});
      choice_[t] = o;
    }
    // The changed tensors' spans; after the last of them, the baseline's tail bounds, later
    // by the change of stream time.
    double tail = bounds_.latest[last + 1] - bounds_.offset[from];
    for (auto [t, o] : undo) tail += Stream(t, choice_[t]) - Stream(t, o);
    for (int k = from; k <= last; ++k) {
      tail = std::max(tail, gaps_[k] - gaps_[from] + Span(k, choice_[k]));
    }
    double result = TimelineSimulator::kAborted;
    if (sim_.LowerBound(from, total, tail) < cutoff && !memo_->Find(key, cutoff, &result)) {
      if (prefixes == nullptr) {
        result = sim_.Evaluate(choice_, from, cutoff, last, &total, &bounds_.after);
      } else if (const TimelineSimulator::State* at = PairPrefix(*prefixes, undo, cutoff)) {
        result = sim_.EvaluateFrom(*at, choice_, cutoff, last, &total, &bounds_.after);
      }
      memo_->Store(key, cutoff, result);
    }
    for (auto [t, o] : undo) choice_[t] = o;
    return result;
  }

  // Best pair of options for two tensors, the others fixed; commits it if better. Pairs
  // are simulated in order of their lower bound until the bound cannot beat the best.
  bool ImprovePair(int a, int b) {
    if (a > b) std::swap(a, b);
    const int na = static_cast<int>(problem_.sim.tensors[a].options.size());
    const int nb = static_cast<int>(problem_.sim.tensors[b].options.size());
    const int n = static_cast<int>(choice_.size());
    // Tail bound pieces that do not depend on the pair: tensors after a other than b (the
    // chain bounds order the pairs; the spans and tail bounds skip simulations).
    double others = -1e300, others_span = -1e300;
    for (int k = a + 1; k < n; ++k) {
      if (k != b) others = std::max(others, gaps_[k] + Chain(k, choice_[k]));
      if (k < b) others_span = std::max(others_span, gaps_[k] + Span(k, choice_[k]));
    }
    const double after_b = bounds_.latest[b + 1] - bounds_.offset[a] + gaps_[a] -
                           Stream(a, choice_[a]) - Stream(b, choice_[b]);
    pair_candidates_.clear();
    for (int x = 0; x < na; ++x) {
      if (x == choice_[a]) continue;  // single moves are tried elsewhere
      const Work with_x = WithSwap(total_, work(a, choice_[a]), work(a, x));
      for (int y = 0; y < nb; ++y) {
        if (y == choice_[b]) continue;
        const Work total = WithSwap(with_x, work(b, choice_[b]), work(b, y));
        const double tail =
            std::max({others, gaps_[a] + Chain(a, x), gaps_[b] + Chain(b, y)}) - gaps_[a];
        const double lb = sim_.LowerBound(a, total, tail);
        if (lb >= target()) continue;
        const double bound_tail =
            std::max({others_span, gaps_[a] + Span(a, x), gaps_[b] + Span(b, y),
                      after_b + Stream(a, x) + Stream(b, y)}) -
            gaps_[a];
        pair_candidates_.push_back({lb, x, y, sim_.LowerBound(a, total, bound_tail)});
      }
    }
    std::sort(pair_candidates_.begin(), pair_candidates_.end());
    prefixes_.a = a;
    prefixes_.b = b;
    prefixes_.least_b = work(b, 0);
    for (int y = 1; y < nb; ++y) {
      for (int r = 0; r < kNumResources; ++r) {
        prefixes_.least_b[r] = std::min(prefixes_.least_b[r], work(b, y)[r]);
      }
    }
    prefixes_.state_of.assign(na, PairPrefixes::kUnknown);
    if (static_cast<int>(prefixes_.states.size()) < na) prefixes_.states.resize(na);
    double best_time = target();
    std::pair<int, int> best = {choice_[a], choice_[b]};
    for (const auto& [lb, x, y, bound] : pair_candidates_) {
      if (lb >= best_time) break;
      if (bound >= best_time) continue;
      double t = EvaluateChange({{a, x}, {b, y}}, best_time, &prefixes_);
      if (t < best_time) {
        best_time = t;
        best = {x, y};
      }
    }
    if (best.first == choice_[a]) return false;
    Commit({{a, best.first}, {b, best.second}});
    return true;
  }

  void SetChoice(const std::vector<int>& choice) {
    std::vector<std::pair<int, int>> change;
    for (size_t i = 0; i < choice.size(); ++i) {
      if (choice[i] != choice_[i]) change.push_back({static_cast<int>(i), choice[i]});
    }
    Commit(change);
  }

  // How many changes were committed: a move tried again with no commit since gives the same
  // answer.
  int64_t commits() const { return commits_; }

  void Commit(const std::vector<std::pair<int, int>>& change) {
    if (change.empty()) return;
    ++commits_;
    int from = change[0].first, last = change[0].first;
    for (auto [t, o] : change) {
      from = std::min(from, t);
      last = std::max(last, t);
      total_ = WithSwap(total_, work(t, choice_[t]), work(t, o));
      key_ += OptionKey(t, o) - OptionKey(t, choice_[t]);
      choice_[t] = o;
    }
    time_ = sim_.Rebase(choice_, from, last);
    RefreshTails(last);
  }

 private:
  double Chain(int tensor, int option) const {
    return problem_.sim.tensors[tensor].options[option].chain_us;
  }
  double Span(int tensor, int option) const {
    return problem_.sim.tensors[tensor].options[option].span_us;
  }
  double Stream(int tensor, int option) const {
    return StreamUs(problem_.sim.tensors[tensor].options[option]);
  }
  // The state when the pair's b is ready with a's option choice_[a] (`undo`: the change's
  // tensors with their baseline options), simulated for the first of its changes; nullptr
  // when that run was cut, at a cutoff no lower than this one (ImprovePair's only falls), so
  // the change ends at or after `cutoff` too.
  const TimelineSimulator::State* PairPrefix(PairPrefixes& prefixes,
                                             const std::vector<std::pair<int, int>>& undo,
                                             double cutoff) {
    const int a = prefixes.a, b = prefixes.b, x = choice_[a];
    uint8_t& state_of = prefixes.state_of[x];
    if (state_of == PairPrefixes::kUnknown) {
      int baseline_a = x, baseline_b = choice_[b];
      for (auto [t, o] : undo) (t == a ? baseline_a : baseline_b) = o;
      // Per resource at most the work of any option of b: a bound for all of them.
      const Work least = WithSwap(WithSwap(total_, work(a, baseline_a), work(a, x)),
                                  work(b, baseline_b), prefixes.least_b);
      state_of = sim_.RunUntilReady(choice_, a, b, cutoff, least, &prefixes.states[x])
                     ? PairPrefixes::kReady
                     : PairPrefixes::kCut;
    }
    return state_of == PairPrefixes::kReady ? &prefixes.states[x] : nullptr;
  }

  // tail_max_[k]: the latest, over tensors j >= k, of (gaps to j + j's chain bound), so that
  // a tensor j ready no earlier than snapshot k plus those gaps ends no earlier than that
  // (the order in which candidates are tried); bounds_: the tighter bounds that skip them.
  // After a change of tensors <= last_changed (-1: anything), the later ones' stay.
  void RefreshTails(int last_changed = -1) {
    const int n = static_cast<int>(choice_.size());
    int top = last_changed;
    if (top < 0 || static_cast<int>(tail_max_.size()) != n + 1) {
      tail_max_.assign(n + 1, -1e300);
      top = n - 1;
    }
    for (int k = top; k >= 0; --k) {
      tail_max_[k] = std::max(tail_max_[k + 1], gaps_[k] + Chain(k, choice_[k]));
    }
    ComputeTailBounds(problem_.sim, choice_, &bounds_, last_changed);
  }

  double keep_;               // 1 - min_relative_gain
  std::vector<double> gaps_;  // sum of ready gaps of tensors 1..k
  std::vector<double> tail_max_;
  TailBounds bounds_;
  const PreparedProblem& problem_;
  Memo* memo_;
  TimelineSimulator sim_;
  std::vector<int> choice_;
  double time_;
  int64_t commits_ = 0;
  uint64_t key_ = 0;  // of choice_
  Work total_;
  struct Candidate {
    double lb;  // the chain bound (the order)
    int option;
    double bound;  // the tail bound (skips)
  };
  std::vector<Candidate> candidates_;
  std::vector<std::tuple<double, int, int, double>> pair_candidates_;
  PairPrefixes prefixes_;
};

// Step 4: move GPU-compressed tensors to the CPU pool by groups of (size, option).
void OptimizeOffload(const PreparedProblem& problem, Search& search) {
  const auto& tensors = problem.sim.tensors;
  struct Group {
    std::vector<int> members;    // farthest from the output (highest index) first
    std::vector<int> offloaded;  // the CPU option of each member
  };
  std::map<std::tuple<int64_t, int, bool, bool, int>, Group> by_key;
  for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
    const TensorOption& o = tensors[i].options[search.choice()[i]].option;
    if (o.codec < 0 || o.encode_on != Where::kGpu) continue;
    TensorOption cpu = o;
    cpu.encode_on = Where::kCpu;
    cpu.decode_on = o.two_way ? Where::kCpu : Where::kNone;
    int index = FindOption(tensors[i], cpu);
    if (index < 0) continue;
    Group& g = by_key[{tensors[i].bytes, o.codec, o.two_way, o.hierarchical, o.partitions}];
    g.members.push_back(i);
    g.offloaded.push_back(index);
  }
  std::vector<Group> groups;
  for (auto& entry : by_key) {
    const Group& g = entry.second;  // (clang 14 cannot capture a structured binding)
    std::vector<int> order(g.members.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return g.members[a] > g.members[b]; });
    Group sorted;
    for (int k : order) {
      sorted.members.push_back(g.members[k]);
      sorted.offloaded.push_back(g.offloaded[k]);
    }
    groups.push_back(std::move(sorted));
  }
  if (groups.empty()) return;
  auto change_for = [&](const std::vector<int>& counts) {
    std::vector<std::pair<int, int>> change;
    for (size_t g = 0; g < groups.size(); ++g) {
      for (int k = 0; k < counts[g]; ++k) {
        change.push_back({groups[g].members[k], groups[g].offloaded[k]});
      }
    }
    return change;
  };
  double combinations = 1;
  for (const auto& g : groups) combinations *= static_cast<double>(g.members.size() + 1);
  std::vector<int> counts(groups.size(), 0);
  if (combinations <= problem.inputs.options.max_joint_offload_choices()) {
    // Every combination of counts (mixed radix).
    std::vector<int> best_counts = counts;
    double best_time = search.target();
    while (true) {
      size_t g = 0;
      while (g < groups.size() && counts[g] == static_cast<int>(groups[g].members.size())) {
        counts[g++] = 0;
      }
      if (g == groups.size()) break;
      ++counts[g];
      double t = search.EvaluateChange(change_for(counts), best_time);
      if (t < best_time) {
        best_time = t;
        best_counts = counts;
      }
    }
    search.Commit(change_for(best_counts));
    return;
  }
  // Too many combinations: one group at a time, the others fixed.
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<int> only(groups.size(), 0);
    double best_time = search.target();
    int best_count = 0;
    for (int k = 1; k <= static_cast<int>(groups[g].members.size()); ++k) {
      only[g] = k;
      double t = search.EvaluateChange(change_for(only), best_time);
      if (t < best_time) {
        best_time = t;
        best_count = k;
      }
    }
    only[g] = best_count;
    search.Commit(change_for(only));
  }
}

// Every tensor takes the same kind of option (codec, placements, one/two-way, flat or
// hierarchical; default partitioning) where it has it, none elsewhere: the first `wanted` of
// those that beat no compression (`none_us`), best first, with their times. Kinds are
// simulated in order of their lower bound, each cut off where it could no longer be among
// the first `wanted` (behind `wanted` faster ones and past the tolerance of the fastest, or
// at no compression's time); once a kind's bound is there, no later one is simulated.
struct UniformChoice {
  double time_us;
  std::vector<int> choice;
};
std::vector<UniformChoice> UniformChoicesBestFirst(const PreparedProblem& problem,
                                                   TimelineSimulator& sim, double none_us,
                                                   size_t wanted) {
  const auto& tensors = problem.sim.tensors;
  // Each kind with its choice: per tensor its first option of the kind, -1 until found.
  std::vector<TensorOption> kinds;
  std::vector<std::vector<int>> choices;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int default_parts = tensors[i].options[problem.none_index[i]].option.partitions;
    for (size_t o = 0; o < tensors[i].options.size(); ++o) {
      TensorOption kind = tensors[i].options[o].option;
      // (An uncompressed collective is a kind too: every tensor allreduced.)
      if (kind.partitions != default_parts || (kind.codec < 0 && !kind.collective())) continue;
      kind.partitions = 0;
      const size_t k = std::find(kinds.begin(), kinds.end(), kind) - kinds.begin();
      if (k == kinds.size()) {
        kinds.push_back(kind);
        choices.emplace_back(tensors.size(), -1);
      }
      if (choices[k][i] < 0) choices[k][i] = static_cast<int>(o);
    }
  }
  struct Scored {
    double time;  // a lower bound until simulated
    int loss;     // LossClass of the kind's codec
    int kind;     // order of first appearance (the cost table's order)
    std::vector<int> choice;
  };
  std::vector<Scored> bounded;
  for (size_t k = 0; k < kinds.size(); ++k) {
    const TensorOption& kind = kinds[k];
    std::vector<int>& choice = choices[k];
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (choice[i] < 0) choice[i] = problem.none_index[i];
    }
    const double lb = sim.LowerBound(0, sim.TotalWork(choice));
    if (lb >= none_us) continue;
    const int loss =
        kind.codec < 0 ? proto::LOSS_NONE : LossOf(problem.inputs.costs.codecs(kind.codec));
    bounded.push_back({lb, loss, static_cast<int>(k), std::move(choice)});
  }
  auto faster = [](const Scored& a, const Scored& b) {
    return std::tie(a.time, a.kind) < std::tie(b.time, b.kind);
  };
  std::sort(bounded.begin(), bounded.end(), faster);
  // Kinds within min_relative_gain of the fastest count as equal and go less lossy first,
  // then in the table's order, so that noise in measured inputs below the tolerance does not
  // decide between codecs; behind them the others, fastest first.
  const double keep = 1 - problem.inputs.options.min_relative_gain();
  std::vector<Scored> scored;  // simulated, fastest first
  for (Scored& candidate : bounded) {
    // A kind ending after both the wanted-th fastest found so far and the tolerance of the
    // fastest is not among the first `wanted`.
    double cutoff = none_us;
    if (scored.size() >= wanted) {
      const double last_wanted = std::max(scored[0].time / keep, scored[wanted - 1].time);
      cutoff = std::min(cutoff, std::nextafter(last_wanted, TimelineSimulator::kAborted));
    }
    if (candidate.time >= cutoff) break;
    candidate.time = sim.Simulate(candidate.choice, nullptr, cutoff);
    if (candidate.time >= cutoff) continue;
    scored.insert(std::upper_bound(scored.begin(), scored.end(), candidate, faster),
                  std::move(candidate));
  }
  if (!scored.empty()) {
    const double tied = scored[0].time / keep;
    auto end =
        std::find_if(scored.begin(), scored.end(), [&](const Scored& s) { return s.time > tied; });
    std::sort(scored.begin(), end, [](const Scored& a, const Scored& b) {
      return std::tie(a.loss, a.kind) < std::tie(b.loss, b.kind);
    });
  }
  std::vector<UniformChoice> best;
  for (Scored& s : scored) {
    if (best.size() == wanted) break;
    best.push_back({s.time, std::move(s.choice)});
  }
  return best;
}

// a dominates b: the same stages on the same resources, none longer (ties: the earlier).
bool Dominates(const OptionCost& a, const OptionCost& b) {
  if (a.partitions != b.partitions || a.num_stages != b.num_stages) return false;
  for (int k = 0; k < a.num_stages; ++k) {
    if (a.stages[k].resource != b.stages[k].resource ||
        a.stages[k].duration_us > b.stages[k].duration_us) {
      return false;
    }
  }
  return true;
}

// Drops options another option dominates and that is no lossier (a faster codec does not
// replace a less lossy one); the first option (uncompressed, default partitioning) always
// stays first.
void DropDominated(std::vector<OptionCost>& options, const proto::CostTable& costs) {
  const size_t m = options.size();
  std::vector<int> loss(m);
  for (size_t o = 0; o < m; ++o) {
    const int codec = options[o].option.codec;
    loss[o] = codec < 0 ? proto::LOSS_NONE : LossOf(costs.codecs(codec));
  }
  std::vector<uint8_t> keep(m);
  for (size_t b = 0; b < m; ++b) {
    bool dominated = false;
    for (size_t a = 0; a < m && !dominated; ++a) {
      if (a == b || loss[a] > loss[b] || !Dominates(options[a], options[b])) continue;
      // Equal options: keep the less lossy, else the first of them.
      dominated = !Dominates(options[b], options[a]) || loss[a] < loss[b] || a < b;
    }
    keep[b] = !dominated || b == 0;
  }
  size_t kept = 0;
  for (size_t b = 0; b < m; ++b) {
    if (!keep[b]) continue;
    if (kept != b) options[kept] = options[b];
    ++kept;
  }
  options.resize(kept);
}

}  // namespace

absl::StatusOr<PreparedProblem> Prepare(const PlannerInputs& raw) {
  PreparedProblem p;
  p.inputs = raw;
  proto::ClusterDescription cluster = raw.cluster;
  if (cluster.server_sum_gbytes_per_s() <= 0 && raw.costs.sum_gbytes_per_s() > 0) {
    cluster.set_server_sum_gbytes_per_s(raw.costs.sum_gbytes_per_s());  // measured here
  }
  p.inputs.cluster = WithDefaults(cluster);
  p.inputs.options = WithDefaults(raw.options);
  // Each codec's loss class once: LossOf returns a table's class at once, where it would
  // otherwise look the codec's facts up at every call (dominance, the less-lossy passes).
  for (proto::CodecCost& codec : *p.inputs.costs.mutable_codecs()) codec.set_loss(LossOf(codec));
  const auto& in = p.inputs;
  if (in.profile.tensors().empty()) return absl::InvalidArgumentError("profile has no tensors");
  if (in.cluster.colocated_servers() && in.cluster.servers() % in.cluster.machines() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("colocated_servers needs the servers spread evenly over the machines: ",
                     in.cluster.servers(), " servers on ", in.cluster.machines(), " machines"));
  }
  for (const auto& name : in.options.codecs()) {
    bool found = false;
    for (const auto& c : in.costs.codecs()) found = found || c.name() == name;
    if (!found) {
      return absl::InvalidArgumentError(
          absl::StrCat("options.codecs names '", name, "', which the cost table does not list"));
    }
  }
  p.sim.forward_us = ForwardOnHostUs(in.profile, in.cluster);
  // One host for the whole job: the pool resource is that host's cores, as one fluid slot.
  p.sim.slots = {1,
                 in.cluster.host_cores() > 0 ? 1 : in.cluster.cpu_pool_threads(),
                 1,
                 1,
                 1,
                 1,
                 in.cluster.servers() * in.cluster.server_threads(),
                 1};
  const std::vector<double> training_cpu = TrainingCpuUs(in.profile);
  p.sim.tensors.reserve(in.profile.tensors_size());
  p.none_index.reserve(in.profile.tensors_size());
  // A tensor's options and their costs follow from its size (elements, element bytes, block
  // density), its share of the training CPU and the user's allowance for its name: tensors
  // alike in these (a model's repeated layers) share them, computed once.
  // (Doubles by their bits: equal bits, equal costs.)
  using Alike =
      std::tuple<const proto::TensorAllowance*, int64_t, int32_t, bool, uint64_t, uint64_t>;
  auto bits = [](double v) {
    uint64_t b;
    std::memcpy(&b, &v, sizeof b);
    return b;
  };
  std::map<Alike, int> first_alike;
  for (int i = 0; i < in.profile.tensors_size(); ++i) {
    const proto::TensorProfile& t = in.profile.tensors(i);
    SimTensor st;
    st.name = t.name();
    st.bytes = TensorBytes(t);
    st.ready_gap_us = OnTimeGrid(t.ready_gap_us());
    const Alike alike{AllowanceFor(in.options, t.name()),
                      t.elements(),
                      t.element_bytes(),
                      t.has_block_density(),
                      bits(t.block_density()),
                      bits(training_cpu[i])};
    if (auto [it, first] = first_alike.emplace(alike, i); !first) {
      const SimTensor& same = p.sim.tensors[it->second];
      st.options = same.options;
      st.tree_options = same.tree_options;
      p.none_index.push_back(0);
      p.sim.tensors.push_back(std::move(st));
      continue;
    }
    const std::vector<TensorOption> tree = EnumerateOptions(t, in.cluster, in.costs, in.options);
    st.options.reserve(tree.size());
    for (const TensorOption& o : tree) {
      OptionCost cost = CostOf(o, t, in.cluster, in.costs, training_cpu[i]);
      double chain = 0, busiest = 0;
      for (int k = 0; k < cost.num_stages; ++k) {
        const Stage& stage = cost.stages[k];
        chain += stage.duration_us;
        if (p.sim.slots[stage.resource] == 1)
          busiest = std::max<double>(busiest, stage.duration_us);
      }
      cost.chain_us = chain + (cost.partitions - 1) * busiest;
      double turns = 0;
      std::array<bool, kNumResources> seen{};
      double before = 0;
      for (int k = 0; k < cost.num_stages; ++k) {
        const Stage& stage = cost.stages[k];
        const int slots = p.sim.slots[stage.resource];
        const int waves = (cost.partitions + slots - 1) / slots;
        turns = std::max(turns, (waves - 1) * static_cast<double>(stage.duration_us));
        if (!seen[stage.resource]) cost.before_us[stage.resource] = before;
        seen[stage.resource] = true;
        before += stage.duration_us;
      }
      cost.span_us = chain + turns;
      seen = {};
      double after = 0;
      for (int k = cost.num_stages - 1; k >= 0; --k) {
        const Stage& stage = cost.stages[k];
        if (!seen[stage.resource]) cost.after_us[stage.resource] = after;
        seen[stage.resource] = true;
        after += stage.duration_us;
      }
      st.options.push_back(cost);
    }
    st.tree_options = static_cast<int>(st.options.size());
    if (!in.options.keep_dominated()) DropDominated(st.options, in.costs);
    p.none_index.push_back(0);  // EnumerateOptions lists flat, default-partitioned none first
    p.sim.tensors.push_back(std::move(st));
  }
  return p;
}

PlanResult PlanByteComp(const PreparedProblem& problem) {
  const auto start = std::chrono::steady_clock::now();
  const auto& tensors = problem.sim.tensors;
  const int n = static_cast<int>(tensors.size());
  PlanResult result;
  Memo memo;
  Search search(problem, &memo);
  result.no_compression_us = search.time();
  int64_t simulations_elsewhere = 0, events_elsewhere = 0;

  // Step 2: tensors whose communication ends before a bubble of the uncompressed timeline.
  int first_kept = 0;
  for (int j = 1; j < n; ++j) {
    if (search.sim().idle_before(j)) first_kept = j;
  }
  result.dropped_before_bubble = first_kept;

  // Step 1: larger first, nearer the output first among equals.
  std::vector<int> order;
  for (int i = first_kept; i < n; ++i) {
    if (tensors[i].options.size() > 1) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return tensors[a].bytes > tensors[b].bytes; });

  // Ours: start from the best uniform assignment rather than from no compression (tensors
  // before the bubble stay uncompressed).
  // The uniform assignments, simulated once: the warm start and the refinement's other starts.
  std::vector<UniformChoice> uniform;
  const bool other_starts =
      !problem.inputs.options.skip_refinement() && problem.inputs.options.uniform_starts() > 0;
  if (!problem.inputs.options.start_uncompressed() || other_starts) {
    // The warm start, and the other starts (the first of them the warm start).
    const size_t wanted =
        other_starts ? static_cast<size_t>(std::max(1, problem.inputs.options.uniform_starts()))
                     : 1;
    uniform = UniformChoicesBestFirst(problem, search.sim(), result.no_compression_us, wanted);
  }
  std::vector<int> warm_start;
  if (!problem.inputs.options.start_uncompressed()) {
    if (!uniform.empty()) {
      warm_start = uniform[0].choice;
      for (int i = 0; i < first_kept; ++i) warm_start[i] = problem.none_index[i];
      search.SetChoice(warm_start);
    }
  }
  // Step 3: best GPU option per tensor (all options without a GPU).
  const bool gpu = HasGpu(problem.inputs);
  std::vector<int> allowed;
  for (int i : order) {
    allowed.clear();
    for (size_t o = 0; o < tensors[i].options.size(); ++o) {
      if (!gpu || !tensors[i].options[o].option.uses_cpu()) allowed.push_back(static_cast<int>(o));
    }
    search.ImproveTensor(i, allowed);
  }
  // Step 4: optimal offload to the CPU pool given the GPU result.
  if (gpu) OptimizeOffload(problem, search);
  // Ours: refinement passes over every option (mixed placements included), and for small
  // models over pairs of tensors, until a pass changes nothing; then the same from the best
  // uniform assignments (every tensor the same kind of option), which escapes local optima
  // that one-tensor moves cannot leave. The best result wins.
  if (!problem.inputs.options.skip_refinement()) {
    // Small models get pairs and unbounded passes; large ones the few options with the best
    // bounds per tensor, which keeps refinement about as cheap as the published steps.
    std::vector<int> compressible;
    for (int i : order) {
      for (const auto& o : tensors[i].options) {
        if (o.option.codec >= 0) {
          compressible.push_back(i);
          break;
        }
      }
    }
    const int pair_limit = problem.inputs.options.pairwise_max_tensors();
    const bool small = static_cast<int>(compressible.size()) <= pair_limit;
    // Pairs among every tensor with a choice when there are few, else among compressible ones.
    const std::vector<int>& paired =
        static_cast<int>(order.size()) <= pair_limit ? order : compressible;
    const bool pairwise = small;
    const int per_tensor = small ? 1 << 30 : 4;
    auto refine = [&](Search& s) {
      // A move is tried again only when something was committed since it was last tried
      // without success (the same state gives the same answer): the last pass, which only
      // confirms, skips every move that came after the last change.
      constexpr int64_t kNever = -1;
      std::vector<int64_t> single_tried(n, kNever);
      std::vector<int64_t> pair_tried(pairwise ? paired.size() * paired.size() : 0, kNever);
      auto try_move = [&](int64_t& tried, auto move) {
        if (tried == s.commits()) return false;
        const bool committed = move();
        tried = committed ? kNever : s.commits();
        return committed;
      };
      for (int pass = 0; pass < (small ? 4 : 2); ++pass) {
        bool changed = false;
        for (int i : order) {
          changed |= try_move(single_tried[i], [&] {
            allowed.resize(tensors[i].options.size());
            std::iota(allowed.begin(), allowed.end(), 0);
            return s.ImproveTensor(i, allowed, per_tensor);
          });
        }
        if (pairwise) {
          for (size_t a = 0; a < paired.size(); ++a) {
            for (size_t b = a + 1; b < paired.size(); ++b) {
              changed |= try_move(pair_tried[a * paired.size() + b],
                                  [&] { return s.ImprovePair(paired[a], paired[b]); });
            }
          }
        }
        if (!changed) break;
      }
    };
    refine(search);
    const size_t starts = std::min(
        uniform.size(), static_cast<size_t>(std::max(0, problem.inputs.options.uniform_starts())));
    for (size_t k = 0; k < starts; ++k) {
      std::vector<int> kept_start = uniform[k].choice;
      for (int i = 0; i < first_kept; ++i) kept_start[i] = problem.none_index[i];
      if (kept_start == warm_start) continue;  // the main search started there
      // On large models refining costs as much as the search itself: only for a start that
      // already beats the result (its time is known without a Search of its own).
      if (!small) {
        const double start_us = kept_start == uniform[k].choice
                                    ? uniform[k].time_us
                                    : search.sim().Simulate(kept_start, nullptr, search.time());
        if (start_us >= search.time()) continue;
      }
      Search other(problem, &memo);
      other.SetChoice(kept_start);
      refine(other);
      simulations_elsewhere += other.sim().simulations();
      events_elsewhere += other.sim().events_processed();
      // Another start must win by the tolerance too (ties keep the main search's result).
      if (other.time() < search.target()) search.SetChoice(other.choice());
    }
  }
  result.choice = search.choice();
  result.predicted_us = search.time();
  if (!problem.inputs.options.skip_less_loss()) {
    // The search's simulator has its choice as the baseline (its snapshots are reused).
    result.choice = PreferLessLoss(problem, result.choice, search.sim());
    result.predicted_us = search.sim().baseline_us();
  }
  result.simulations = search.sim().simulations() + simulations_elsewhere;
  result.events = search.sim().events_processed() + events_elsewhere;
  result.planning_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  result.compress_everything_choice = CompressEverythingChoice(problem);
  result.compress_everything_us = search.sim().Simulate(result.compress_everything_choice);
  return result;
}

proto::Strategy ToStrategy(const PreparedProblem& problem, const std::vector<int>& choice) {
  const auto& in = problem.inputs;
  proto::Strategy strategy;
  strategy.set_version(1);
  strategy.set_min_compress_bytes(in.options.min_compress_bytes());
  auto placement = [](Where w) {
    return w == Where::kGpu   ? proto::PLACEMENT_GPU
           : w == Where::kCpu ? proto::PLACEMENT_CPU_POOL
                              : proto::PLACEMENT_DEFAULT;
  };
  for (size_t i = 0; i < problem.sim.tensors.size(); ++i) {
    const SimTensor& t = problem.sim.tensors[i];
    const TensorOption& o = t.options[choice[i]].option;
    const TensorOption& none = t.options[problem.none_index[i]].option;
    proto::TensorStrategy* ts = strategy.add_tensors();
    ts->set_name_pattern(t.name);
    if (o.codec >= 0) {
      const proto::CodecCost& codec = in.costs.codecs(o.codec);
      proto::CodecConfig config;
      config.set_name(codec.name());
      config.mutable_params()->insert(codec.params().begin(), codec.params().end());
      config.set_memory(codec.memory());
      *ts->mutable_push_codec() = config;
      if (o.union_pull) {
        // The servers' sparse union: every non-zero of the sum (decision_tree.h).
        *ts->mutable_pull_codec() = compress::SparseUnionPullCodec();
      } else if (o.two_way) {
        *ts->mutable_pull_codec() = config;
      }
      ts->set_compress_on(placement(o.encode_on));
      ts->set_decompress_on(placement(o.decode_on));
    }
    ts->set_hierarchical(o.hierarchical);
    ts->set_scheme(static_cast<proto::Scheme>(o.scheme));
    if (o.partitions != none.partitions) {
      const int64_t element =
          t.bytes / std::max<int64_t>(1, in.profile.tensors(static_cast<int>(i)).elements());
      const int64_t elements_per_part =
          (in.profile.tensors(static_cast<int>(i)).elements() + o.partitions - 1) / o.partitions;
      ts->set_partition_bytes(elements_per_part * std::max<int64_t>(1, element));
    }
  }
  return strategy;
}

}  // namespace bytecomp::planner
