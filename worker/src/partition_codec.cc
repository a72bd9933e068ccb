#include "partition_codec.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/registry.h"
#include "bytecomp/compress/strategy.h"

namespace bytecomp::worker {

namespace {

// Whether a one-way sum comes back in the push codec's format (blocksparse: the block-sparse
// sum), which the host decodes with the push codec.
bool OneWaySumInPushFormat(const compress::TensorPlan& plan) {
  const compress::CodecFacts* facts = compress::CodecFactsOf(plan.push.name());
  return !plan.two_way() && facts != nullptr &&
         facts->exchange == compress::CodecExchange::kBlockSparse;
}

// The push codec's name, its memory and memory parameters, and the partition's length.
std::string MemoryIdentity(const proto::CodecConfig& push, size_t elements) {
  if (push.memory().empty()) return "";
  std::map<std::string, std::string> params(push.memory_params().begin(),
                                            push.memory_params().end());
  std::string id = absl::StrCat(push.name(), "|", push.memory(), "|", elements);
  for (const auto& [key, value] : params) absl::StrAppend(&id, "|", key, "=", value);
  return id;
}

}  // namespace

absl::Status EnsureCodecs(const Operation& op, int64_t partition) {
  PartitionCodec& pc = op.codecs()->partitions[partition];
  std::string& restored = op.codecs()->restored_state[partition];
  const compress::TensorPlan& plan = op.plan();
  const bool encode_on_device = op.device != nullptr && op.device->encode_on_device;
  const bool decode_on_device = op.device != nullptr && op.device->decode_on_device;
  const std::string memory_identity =
      MemoryIdentity(plan.push, static_cast<size_t>(op.layout().range(partition).count));
  if (pc.version != plan.version) {
    // New codec objects for the new version. The error-feedback memory stays when only the
    // push codec's parameters changed (the adaptive ratio): what was not sent is not lost.
    std::unique_ptr<compress::Memory> memory;
    if (pc.memory != nullptr && pc.memory_identity == memory_identity)
      memory = std::move(pc.memory);
    pc = PartitionCodec{};
    pc.version = plan.version;
    pc.memory = std::move(memory);
  }
  if (!encode_on_device && pc.push == nullptr) {
    absl::StatusOr<std::unique_ptr<compress::Codec>> push =
        compress::CreateCodec(plan.push.name(), compress::ParamsOf(plan.push));
    if (!push.ok()) return push.status();
    pc.push = *std::move(push);
    pc.memory_identity = memory_identity;
    if (!plan.push.memory().empty() && pc.memory == nullptr) {
      absl::StatusOr<std::unique_ptr<compress::Memory>> memory =
          compress::CreateMemory(plan.push.memory(), compress::MemoryParamsOf(plan.push));
      if (!memory.ok()) return memory.status();
      pc.memory = *std::move(memory);
      if (!restored.empty()) {
        absl::Status loaded = compress::LoadMemoryState(*pc.memory, restored);
        restored.clear();
        if (!loaded.ok()) return loaded;
      }
    }
  }
  if (encode_on_device && pc.push == nullptr && OneWaySumInPushFormat(plan)) {
    // Decodes the pulled sum only: the device encodes, with the device's memory.
    absl::StatusOr<std::unique_ptr<compress::Codec>> push =
        compress::CreateCodec(plan.push.name(), compress::ParamsOf(plan.push));
    if (!push.ok()) return push.status();
    pc.push = *std::move(push);
  }
  if (encode_on_device && pc.device_push == nullptr) {
    if (!restored.empty()) {
      return absl::UnimplementedError(
          "a checkpoint's error-feedback state cannot be loaded into a device codec yet; place "
          "the tensor's compression on the CPU pool to resume it");
    }
    absl::StatusOr<std::unique_ptr<DeviceCodec>> push = op.device->backend->CreateCodec(
        op.device->device, plan.push.name(), compress::ParamsOf(plan.push), plan.push.memory(),
        compress::MemoryParamsOf(plan.push));
    if (!push.ok()) return push.status();
    pc.device_push = *std::move(push);
    pc.device_memory = !compress::IsNoneName(plan.push.memory());
  }
  if (plan.two_way() && !decode_on_device && pc.pull == nullptr) {
    absl::StatusOr<std::unique_ptr<compress::Codec>> pull =
        compress::CreateCodec(plan.pull.name(), compress::ParamsOf(plan.pull));
    if (!pull.ok()) return pull.status();
    pc.pull = *std::move(pull);
  }
  if (plan.two_way() && decode_on_device && pc.device_pull == nullptr) {
    absl::StatusOr<std::unique_ptr<DeviceCodec>> pull = op.device->backend->CreateCodec(
        op.device->device, plan.pull.name(), compress::ParamsOf(plan.pull), "", {});
    if (!pull.ok()) return pull.status();
    pc.device_pull = *std::move(pull);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> SaveCodecStates(const std::string& tensor,
                                                         const TensorCodecs& codecs,
                                                         size_t partitions) {
  std::vector<std::string> states(partitions);
  for (size_t p = 0; p < partitions; ++p) {
    if (p < codecs.partitions.size() && codecs.partitions[p].device_memory) {
      return absl::FailedPreconditionError(
          absl::StrCat("tensor '", tensor,
                       "' is encoded on the device, whose error-feedback state cannot be "
                       "saved yet; place its compression on the CPU pool to checkpoint it"));
    }
    if (p < codecs.partitions.size() && codecs.partitions[p].memory != nullptr) {
      states[p] = compress::SaveMemoryState(*codecs.partitions[p].memory);
    } else if (p < codecs.restored_state.size()) {
      states[p] = codecs.restored_state[p];
    }
  }
  return states;
}

absl::Status LoadCodecStates(TensorCodecs& codecs, std::vector<std::string> states) {
  codecs.Resize(states.size());
  for (size_t p = 0; p < states.size(); ++p) {
    if (codecs.partitions[p].memory != nullptr && !states[p].empty()) {
      if (absl::Status s = compress::LoadMemoryState(*codecs.partitions[p].memory, states[p]);
          !s.ok()) {
        return s;
      }
    } else {
      codecs.restored_state[p] = std::move(states[p]);
    }
  }
  return absl::OkStatus();
}

}  // namespace bytecomp::worker
