#include "bytecomp/compress/registry.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/compress/params.h"

namespace bytecomp::compress {

const CodecRegistry& CodecRegistry::Global() {
  // Built once, thread-safe (C++11 magic static); read-only afterwards.
  static const CodecRegistry* const registry = [] {
    auto* r = new CodecRegistry;
    RegisterBasicCodecs(*r);
    RegisterSparsificationCodecs(*r);
    return r;
  }();
  return *registry;
}

absl::Status CodecRegistry::Register(CodecSpec spec) {
  if (spec.name.empty() || !spec.factory) {
    return absl::InvalidArgumentError("a codec spec needs a name and a factory");
  }
  if (Find(spec.name) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat("codec '", spec.name, "' is already registered"));
  }
  for (const auto& p : spec.params) {
    // Defaults must pass the spec's own validation, or every Create would fail.
    auto checked = ValidateParams(absl::StrCat("codec '", spec.name, "' default"), spec.params,
                                  {{p.name, p.default_value}});
    if (!checked.ok()) return checked.status();
  }
  specs_.push_back(std::move(spec));
  return absl::OkStatus();
}

const CodecSpec* CodecRegistry::Find(absl::string_view name) const {
  for (const auto& s : specs_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::vector<std::string> CodecRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& s : specs_) names.push_back(s.name);
  return names;
}

absl::StatusOr<std::unique_ptr<Codec>> CodecRegistry::Create(absl::string_view name,
                                                             const CodecParams& params) const {
  const CodecSpec* spec = Find(name);
  if (spec == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown codec '", name, "'; valid codecs: ",
                                                   absl::StrJoin(Names(), ", ")));
  }
  auto filled = ValidateParams(absl::StrCat("codec '", name, "'"), spec->params, params);
  if (!filled.ok()) return filled.status();
  return spec->factory(*filled);
}

void MustRegister(CodecRegistry& registry, CodecSpec spec) {
  const std::string name = spec.name;
  const absl::Status status = registry.Register(std::move(spec));
  if (!status.ok()) {
    std::fprintf(stderr, "registering codec '%s' failed: %s\n", name.c_str(),
                 status.ToString().c_str());
    std::abort();
  }
}

absl::StatusOr<std::unique_ptr<Codec>> CreateCodec(absl::string_view name,
                                                   const CodecParams& params) {
  return CodecRegistry::Global().Create(name, params);
}

}  // namespace bytecomp::compress
