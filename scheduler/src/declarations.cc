#include "bytecomp/scheduler/declarations.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/common/dtype.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/partition.h"
#include "bytecomp/common/refusal_log.h"
#include "log_format.h"

namespace bytecomp {
namespace {

constexpr int kMaxShapeDimensions = 32;

std::string DescribeDeclaration(const proto::DeclareTensor& d) {
  return absl::StrCat(d.element_count(), " elements of ",
                      IsValidDType(d.dtype())
                          ? std::string(DTypeName(static_cast<DType>(d.dtype())))
                          : absl::StrCat("dtype ", d.dtype()));
}

proto::ControlMessage ReplyMessage(const proto::DeclareReply& reply) {
  proto::ControlMessage message;
  *message.mutable_declare_reply() = reply;
  return message;
}

// "tensor 'w' declared with 100 elements by workers 0, 2 and 200 elements by worker 1": the
// workers grouped by what they declared, in rank order of first appearance, saying only
// what differs.
std::string DescribeMismatch(const std::string& name,
                             const std::map<int, proto::DeclareTensor>& by_worker,
                             bool counts_agree, bool dtypes_agree) {
  auto describe = [&](const proto::DeclareTensor& d) -> std::string {
    if (!dtypes_agree && !counts_agree) return DescribeDeclaration(d);
    if (!dtypes_agree) return absl::StrCat("dtype ", DTypeName(static_cast<DType>(d.dtype())));
    return absl::StrCat(d.element_count(), " elements");
  };
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (const auto& [rank, d] : by_worker) {
    const std::string what = describe(d);
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const auto& group) { return group.first == what; });
    if (g == groups.end()) {
      groups.push_back({what, {rank}});
    } else {
      g->second.push_back(rank);
    }
  }
  std::vector<std::string> parts;
  for (const auto& [what, ranks] : groups) {
    parts.push_back(absl::StrCat(what, ranks.size() == 1 ? " by worker " : " by workers ",
                                 absl::StrJoin(ranks, ", ")));
  }
  return absl::StrCat("tensor '", name, "' declared with ", absl::StrJoin(parts, " and "));
}

// The row length of the tensor's matrix view (DeclareReply.row_elements): when every worker
// declared the same shape of two or more dimensions and a row fits in a partition; else 0
// (workers that give no shape, or shapes that differ, make it a flat tensor).
int64_t RowElements(const std::map<int, proto::DeclareTensor>& by_worker,
                    int64_t partition_elements) {
  const proto::DeclareTensor& first = by_worker.begin()->second;
  if (first.shape_size() < 2) return 0;
  for (const auto& [rank, d] : by_worker) {
    if (!std::equal(d.shape().begin(), d.shape().end(), first.shape().begin(),
                    first.shape().end())) {
      return 0;
    }
  }
  const int64_t row = first.element_count() / first.shape(0);
  return row <= partition_elements ? row : 0;
}

}  // namespace

Declarations::Declarations(const proto::ClusterConfig& config, const NodeTable& nodes)
    : config_(config),
      nodes_(nodes),
      assigner_(config.num_servers(), config.partition_bytes()),
      budget_(config) {}

bool Declarations::Remap(proto::DeclareReply* reply) {
  bool moved = false;
  for (int p = 0; p < reply->partition_server_size(); ++p) {
    // A survivor may itself have moved off later: follow until a server that holds keys.
    for (auto it = moved_off_.find(reply->partition_server(p)); it != moved_off_.end();
         it = moved_off_.find(reply->partition_server(p))) {
      reply->set_partition_server(p, it->second[next_survivor_++ % it->second.size()]);
      moved = true;
    }
  }
  return moved;
}

std::vector<proto::DeclareReply> Declarations::MoveOff(int lost,
                                                       const std::vector<int>& survivors) {
  moved_off_[lost] = survivors;
  std::vector<proto::DeclareReply> changed;
  for (auto& [name, decl] : declarations_) {
    if (decl.reply.has_value() && decl.reply->ok() && Remap(&*decl.reply)) {
      changed.push_back(*decl.reply);
    }
  }
  std::sort(changed.begin(), changed.end(),
            [](const proto::DeclareReply& a, const proto::DeclareReply& b) {
              return a.tensor_id() < b.tensor_id();
            });
  return changed;
}

std::vector<proto::DeclareReply> Declarations::Decided() const {
  std::vector<proto::DeclareReply> out;
  for (const auto& [name, decl] : declarations_) {
    if (decl.reply.has_value() && decl.reply->ok()) out.push_back(*decl.reply);
  }
  std::sort(out.begin(), out.end(), [](const proto::DeclareReply& a, const proto::DeclareReply& b) {
    return a.tensor_id() < b.tensor_id();
  });
  return out;
}

absl::Status Declarations::Restore(const std::vector<proto::DeclareReply>& decided) {
  PartitionAssigner assigner(config_.num_servers(), config_.partition_bytes());
  DeclarationBudget budget(config_);
  std::map<std::string, Declaration> restored;
  uint32_t next_id = 0;
  for (const proto::DeclareReply& reply : decided) {
    const std::string name = Printable(reply.name(), 64);
    if (!reply.ok() || reply.name().empty() || restored.contains(reply.name())) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "': not a decided declaration, or reported twice"));
    }
    if (reply.tensor_id() < next_id) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "': id ", reply.tensor_id(), " is out of order"));
    }
    if (!IsValidDType(reply.dtype())) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "': unknown dtype ", reply.dtype()));
    }
    const DType dtype = static_cast<DType>(reply.dtype());
    const int64_t partitions =
        NumPartitions(reply.element_count(),
                      PartitionAssigner::PartitionElements(config_.partition_bytes(), dtype));
    if (absl::Status fits =
            budget.CheckTensor(reply.name(), reply.element_count(), dtype, partitions);
        !fits.ok()) {
      return fits;
    }
    absl::StatusOr<PartitionAssignment> again =
        assigner.Assign(reply.element_count(), dtype, reply.row_elements());
    if (!again.ok()) return again.status();
    if (again->partition_elements != reply.partition_elements() ||
        !std::equal(again->partition_server.begin(), again->partition_server.end(),
                    reply.partition_server().begin(), reply.partition_server().end())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tensor '", name, "' (id ", reply.tensor_id(),
          ") was placed on other servers than this "
          "scheduler places it: is its config (num_servers, partition_bytes) the job's?"));
    }
    budget.Take(reply.element_count(), dtype, again->partition_server.size());
    restored[reply.name()].reply = reply;
    next_id = reply.tensor_id() + 1;
  }
  assigner_ = std::move(assigner);
  budget_ = std::move(budget);
  declarations_ = std::move(restored);
  undecided_.clear();
  next_tensor_id_ = next_id;
  return absl::OkStatus();
}

void Declarations::Handle(const RegisteredNode& node, const proto::DeclareTensor& declare,
                          int64_t now_ms, Outbox* out) {
  auto reply_error = [&](const std::string& error) {
    proto::ControlMessage reply;
    reply.mutable_declare_reply()->set_name(declare.name());
    reply.mutable_declare_reply()->set_ok(false);
    reply.mutable_declare_reply()->set_error(error);
    out->Refuse(node.identity, std::move(reply),
                absl::StrCat("declaration from ", NodeTable::Name(node), " rejected: ", error));
  };
  const std::string name = Printable(declare.name(), 64);  // for errors and logs
  if (node.role != proto::ROLE_WORKER) {
    return reply_error(absl::StrCat("only workers declare tensors; ", NodeTable::Name(node),
                                    " declared '", name, "'"));
  }
  if (absl::Status s = budget_.CheckName(declare.name()); !s.ok()) {
    return reply_error(std::string(s.message()));
  }
  if (!IsValidDType(declare.dtype())) {
    return reply_error(absl::StrCat("tensor '", name, "' declared with unknown dtype ",
                                    declare.dtype(), " by worker ", node.rank));
  }
  if (declare.element_count() < 1) {
    return reply_error(absl::StrCat("tensor '", name, "' declared with ", declare.element_count(),
                                    " elements by worker ", node.rank,
                                    "; a tensor needs at least 1 element"));
  }
  // Every name is kept until the job ends: their number is bounded like the tensors'.
  if (!declarations_.contains(declare.name()) &&
      static_cast<int64_t>(declarations_.size()) >= budget_.max_tensors()) {
    return reply_error(absl::StrCat("tensor '", name, "': the job has declared ",
                                    declarations_.size(),
                                    " tensor names, its limit (ClusterConfig.max_tensors)"));
  }
  Declaration& decl = declarations_[declare.name()];
  if (decl.by_worker.empty()) {
    decl.first_ms = now_ms;
    undecided_.insert(declare.name());
  }
  if (declare.shape_size() > kMaxShapeDimensions) {
    return reply_error(absl::StrCat("tensor '", declare.name(), "' declared by worker ", node.rank,
                                    " with ", declare.shape_size(), " dimensions; at most ",
                                    kMaxShapeDimensions));
  }
  if (!declare.shape().empty() &&
      !ShapeHolds(absl::MakeConstSpan(declare.shape().data(), declare.shape_size()),
                  declare.element_count())) {
    return reply_error(absl::StrCat("tensor '", declare.name(), "' declared by worker ", node.rank,
                                    " with shape [", absl::StrJoin(declare.shape(), ", "),
                                    "], which does not hold ", declare.element_count(),
                                    " elements"));
  }
  auto mine = decl.by_worker.find(node.rank);
  if (mine != decl.by_worker.end()) {
    const bool same = mine->second.element_count() == declare.element_count() &&
                      mine->second.dtype() == declare.dtype() &&
                      std::equal(mine->second.shape().begin(), mine->second.shape().end(),
                                 declare.shape().begin(), declare.shape().end());
    if (!same) {
      return reply_error(absl::StrCat("tensor '", declare.name(), "' re-declared by worker ",
                                      node.rank, " with ", DescribeDeclaration(declare), " after ",
                                      DescribeDeclaration(mine->second)));
    }
    // Identical re-declaration: answer again once decided, else keep waiting.
    if (decl.reply.has_value()) out->Send(node.identity, ReplyMessage(*decl.reply));
    return;
  }
  decl.by_worker[node.rank] = declare;
  if (decl.reply.has_value()) {
    // Decided without this worker (it timed out): it gets the same verdict as the others.
    out->Send(node.identity, ReplyMessage(*decl.reply));
    return;
  }
  if (static_cast<int>(decl.by_worker.size()) == config_.num_workers()) {
    Complete(declare.name(), decl, out);
  }
}

void Declarations::Complete(const std::string& name, Declaration& decl, Outbox* out) {
  proto::DeclareReply reply;
  reply.set_name(name);
  const proto::DeclareTensor& first = decl.by_worker.begin()->second;
  const bool counts_agree = std::all_of(
      decl.by_worker.begin(), decl.by_worker.end(),
      [&](const auto& kv) { return kv.second.element_count() == first.element_count(); });
  const bool dtypes_agree =
      std::all_of(decl.by_worker.begin(), decl.by_worker.end(),
                  [&](const auto& kv) { return kv.second.dtype() == first.dtype(); });
  if (!counts_agree || !dtypes_agree) {
    reply.set_ok(false);
    reply.set_error(DescribeMismatch(name, decl.by_worker, counts_agree, dtypes_agree));
  } else if (absl::Status fits = budget_.CheckTensor(
                 name, first.element_count(), static_cast<DType>(first.dtype()),
                 NumPartitions(first.element_count(),
                               PartitionAssigner::PartitionElements(
                                   config_.partition_bytes(), static_cast<DType>(first.dtype()))));
             !fits.ok()) {
    // Before anything is allocated for its partitions.
    reply.set_ok(false);
    reply.set_error(std::string(fits.message()));
  } else {
    const int64_t row_elements = RowElements(
        decl.by_worker,
        assigner_.PartitionElements(config_.partition_bytes(), static_cast<DType>(first.dtype())));
    absl::StatusOr<PartitionAssignment> assignment =
        assigner_.Assign(first.element_count(), static_cast<DType>(first.dtype()), row_elements);
    if (!assignment.ok()) {
      reply.set_ok(false);
      reply.set_error(absl::StrCat("tensor '", name, "': ", assignment.status().message()));
    } else {
      reply.set_ok(true);
      budget_.Take(first.element_count(), static_cast<DType>(first.dtype()),
                   assignment->partition_server.size());
      reply.set_tensor_id(next_tensor_id_++);
      reply.set_element_count(first.element_count());
      reply.set_dtype(first.dtype());
      reply.set_partition_elements(assignment->partition_elements);
      reply.set_row_elements(row_elements);
      for (int32_t server : assignment->partition_server) reply.add_partition_server(server);
      Remap(&reply);
      BC_LOG_DEBUG("tensor '", name, "' id ", reply.tensor_id(), ": ", DescribeDeclaration(first),
                   " in ", reply.partition_server_size(), " partitions");
    }
  }
  undecided_.erase(name);
  Decide(decl, std::move(reply), out);
}

void Declarations::Decide(Declaration& decl, proto::DeclareReply reply, Outbox* out) {
  if (!reply.ok()) BC_LOG_WARNING("declaration failed: ", Printable(reply.error(), 1024));
  decl.reply = std::move(reply);
  const proto::ControlMessage message = ReplyMessage(*decl.reply);
  // Servers first: they validate every data message against the declaration, and a worker
  // may push the moment it has its reply.
  if (decl.reply->ok()) {
    for (const std::string& id : nodes_.ServerIdentities()) out->Send(id, message);
  }
  for (const std::string& id : nodes_.WorkerIdentities()) out->Send(id, message);
}

std::optional<int64_t> Declarations::NextDeadline() const {
  std::optional<int64_t> next;
  for (const std::string& name : undecided_) {
    const int64_t due = declarations_.at(name).first_ms + config_.declare_timeout_ms();
    if (!next.has_value() || due < *next) next = due;
  }
  return next;
}

void Declarations::OnTime(int64_t now_ms, Outbox* out) {
  std::vector<std::string> expired;
  for (const std::string& name : undecided_) {
    if (now_ms - declarations_.at(name).first_ms >= config_.declare_timeout_ms()) {
      expired.push_back(name);
    }
  }
  for (const std::string& name : expired) {
    Declaration& decl = declarations_.at(name);
    undecided_.erase(name);
    std::vector<int> missing;
    std::vector<int> declared;
    for (int r = 0; r < config_.num_workers(); ++r) {
      (decl.by_worker.count(r) > 0 ? declared : missing).push_back(r);
    }
    proto::DeclareReply reply;
    reply.set_name(name);
    reply.set_ok(false);
    reply.set_error(absl::StrCat("tensor '", name, "' was not declared by worker",
                                 missing.size() == 1 ? " " : "s ", absl::StrJoin(missing, ", "),
                                 " within ", Seconds(config_.declare_timeout_ms()),
                                 " (declared by worker", declared.size() == 1 ? " " : "s ",
                                 absl::StrJoin(declared, ", "), ")"));
    Decide(decl, std::move(reply), out);
  }
}

}  // namespace bytecomp
