// The shape every registry of compress/ shares (codecs, memories, and compress/cuda's GPU
// codecs): named specs, each with declared parameters and a factory; Create validates the
// parameters against the spec (unknown name, wrong type, out of range: an error listing the
// valid ones), fills in defaults and calls the factory. A Spec has `name`, `params` (a
// std::vector<CodecParamSpec>) and `factory(const CodecParams&, extra...)`.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "bytecomp/compress/codec.h"
#include "bytecomp/compress/params.h"

namespace bytecomp::compress {

template <typename Spec>
class SpecRegistry {
 public:
  // kind and kinds name what is registered in messages: "codec", "codecs".
  SpecRegistry(std::string kind, std::string kinds)
      : kind_(std::move(kind)), kinds_(std::move(kinds)) {}

  // A duplicate name, a spec without name or factory, or a default that fails its own
  // validation (every Create would fail) is an error.
  absl::Status Register(Spec spec) {
    if (spec.name.empty() || !spec.factory) {
      return absl::InvalidArgumentError(
          absl::StrCat("a ", kind_, " spec needs a name and a factory"));
    }
    if (Find(spec.name) != nullptr) {
      return absl::AlreadyExistsError(
          absl::StrCat(kind_, " '", spec.name, "' is already registered"));
    }
    for (const auto& p : spec.params) {
      auto checked = ValidateParams(absl::StrCat(kind_, " '", spec.name, "' default"), spec.params,
                                    {{p.name, p.default_value}});
      if (!checked.ok()) return checked.status();
    }
    specs_.push_back(std::move(spec));
    return absl::OkStatus();
  }

  // nullptr if unknown.
  const Spec* Find(absl::string_view name) const {
    for (const auto& s : specs_) {
      if (s.name == name) return &s;
    }
    return nullptr;
  }

  // In registration order.
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const auto& s : specs_) names.push_back(s.name);
    return names;
  }

  // Validates params, fills defaults, builds with factory(filled, extra...). An unknown name
  // is an error listing every valid name.
  template <typename... Extra>
  auto Create(absl::string_view name, const CodecParams& params, const Extra&... extra) const
      -> decltype(std::declval<const Spec&>().factory(params, extra...)) {
    const Spec* spec = Find(name);
    if (spec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown ", kind_, " '", name, "'; valid ",
                                                     kinds_, ": ", absl::StrJoin(Names(), ", ")));
    }
    auto filled = ValidateParams(absl::StrCat(kind_, " '", name, "'"), spec->params, params);
    if (!filled.ok()) return filled.status();
    return spec->factory(*filled, extra...);
  }

  // Register, aborting with the error on failure: a duplicate name or a bad default is a
  // programming error, found by the first test that runs.
  void MustRegister(Spec spec) {
    const std::string name = spec.name;
    const absl::Status status = Register(std::move(spec));
    if (!status.ok()) {
      std::fprintf(stderr, "registering %s '%s' failed: %s\n", kind_.c_str(), name.c_str(),
                   status.ToString().c_str());
      std::abort();
    }
  }

 private:
  std::string kind_;
  std::string kinds_;
  std::vector<Spec> specs_;
};

// A new Registry filled by each registration hook in turn, for a Global() that builds it once
// (a function-local static: thread-safe, read-only afterwards). Explicit hooks rather than
// static initialisers, which a static library would drop.
template <typename Registry>
Registry* BuildRegistry(std::initializer_list<void (*)(Registry&)> hooks) {
  auto* registry = new Registry;
  for (auto hook : hooks) hook(*registry);
  return registry;
}

}  // namespace bytecomp::compress
