#include "bytecomp/server/catalog.h"

#include "absl/strings/str_cat.h"
#include "bytecomp/common/dtype.h"

namespace bytecomp::server {

absl::Status Catalog::AddTensor(const proto::DeclareReply& declared) {
  if (tensors_.contains(declared.tensor_id())) {
    return absl::AlreadyExistsError(
        absl::StrCat("tensor id ", declared.tensor_id(), " is declared already"));
  }
  if (absl::Status s = budget_.CheckTensor(declared.name(), declared.element_count(),
                                           static_cast<DType>(declared.dtype()),
                                           declared.partition_server_size());
      !s.ok()) {
    return s;
  }
  absl::StatusOr<TensorLayout> layout = LayoutFromDeclareReply(declared, num_servers_);
  if (!layout.ok()) return layout.status();
  budget_.Take(layout->element_count, layout->dtype, layout->num_partitions());
  for (int64_t p = 0; p < layout->num_partitions(); ++p) {
    elements_on_[layout->partition_server[p]] += layout->range(p).count;
  }
  tensors_[layout->tensor_id] = DeclaredTensor{declared.name(), *std::move(layout)};
  return absl::OkStatus();
}

std::vector<uint64_t> Catalog::MoveTensor(const proto::DeclareReply& moved, int from_rank,
                                          int my_rank) {
  std::vector<uint64_t> mine;
  auto it = tensors_.find(moved.tensor_id());
  if (it == tensors_.end()) return mine;
  TensorLayout& layout = it->second.layout;
  if (moved.partition_server_size() != layout.num_partitions()) return mine;
  for (int32_t s : moved.partition_server()) {
    if (s < 0 || s >= num_servers_) return mine;
  }
  for (int p = 0; p < moved.partition_server_size(); ++p) {
    if (layout.partition_server[p] == from_rank && moved.partition_server(p) == my_rank) {
      mine.push_back(MakeKey(layout.tensor_id, static_cast<uint32_t>(p)));
    }
    elements_on_[layout.partition_server[p]] -= layout.range(p).count;
    elements_on_[moved.partition_server(p)] += layout.range(p).count;
    layout.partition_server[p] = moved.partition_server(p);
  }
  return mine;
}

bool Catalog::OnLostServer(uint64_t key) const {
  if (lost_servers_.empty()) return false;
  const DeclaredTensor* tensor = Tensor(KeyTensor(key));
  const int64_t p = KeyPartition(key);
  return tensor != nullptr && p < tensor->layout.num_partitions() &&
         lost_servers_.contains(tensor->layout.partition_server[p]);
}

absl::Status Catalog::AddStrategy(const proto::Strategy& strategy) {
  if (history_.Version(strategy.version()) != nullptr) return absl::OkStatus();
  return history_.Add(strategy);
}

const DeclaredTensor* Catalog::Tensor(uint32_t tensor_id) const {
  auto it = tensors_.find(tensor_id);
  return it == tensors_.end() ? nullptr : &it->second;
}

compress::TensorPlan Catalog::Plan(const DeclaredTensor& tensor, uint64_t version) const {
  const proto::Strategy* strategy = history_.Version(version);
  if (strategy == nullptr) return compress::TensorPlan{};
  return compress::PlanFor(
      *strategy, tensor.name,
      tensor.layout.element_count * static_cast<int64_t>(DTypeSize(tensor.layout.dtype)),
      tensor.layout.row_elements);
}

}  // namespace bytecomp::server
