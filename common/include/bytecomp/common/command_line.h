// Command-line parsing for every ByteComp binary: Abseil flags whose --help lists the flags the
// program defines. (Abseil's --help shows only flags defined in a file named after the program,
// e.g. bytecomp-scheduler.cc; ours live in main.cc and the like, so it printed "No flags
// matched" and only --helpfull listed them.) Target bytecomp_command_line, apart from
// bytecomp_common so that the worker library does not carry Abseil's flag parser.
#pragma once

#include <vector>

#include "absl/strings/string_view.h"

namespace bytecomp {

// Sets the usage message (shown by --help above the flags), makes --help and --helpshort list
// every flag defined outside Abseil's own sources, and parses argv as absl::ParseCommandLine
// does (unknown flags end the program with an error; returns the positional arguments).
std::vector<char*> ParseCommandLine(int argc, char** argv, absl::string_view usage);

}  // namespace bytecomp
