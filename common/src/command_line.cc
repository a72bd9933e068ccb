#include "bytecomp/common/command_line.h"

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace bytecomp {
namespace {

// Abseil's own flags (--flagfile, --fromenv, ...) stay under --helpfull.
bool DefinedByUs(absl::string_view file) { return !absl::StrContains(file, "absl/"); }

}  // namespace

std::vector<char*> ParseCommandLine(int argc, char** argv, absl::string_view usage) {
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  config.contains_help_flags = DefinedByUs;
  config.contains_helpshort_flags = DefinedByUs;
  absl::SetFlagsUsageConfig(config);
  return absl::ParseCommandLine(argc, argv);
}

}  // namespace bytecomp
