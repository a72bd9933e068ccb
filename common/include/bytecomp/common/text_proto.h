// The one loader of the project's protobuf text-format files (cluster configs, strategies, the
// planner's profiles, clusters, cost tables and options). Parsing is strict (an unknown field is
// an error), and every error, of syntax or of a value found afterwards, names the file, the
// line and column, and the field: "strategy.pbtxt:3:7: tensors[0].push_codec: unknown codec".
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "google/protobuf/text_format.h"

namespace bytecomp {

// Where each field of a parsed file was set.
using TextProtoTree = google::protobuf::TextFormat::ParseInfoTree;

// A place in a text file, 0-based; line -1: not known.
struct TextPosition {
  int line = -1;
  int column = -1;
};

// Parses text format into `out`. `source_name` (a path) prefixes every error:
// "strategy.pbtxt:3:7: Message type \"X\" has no field named \"codek\"". With `tree`, records
// where each field was set, for the errors found after parsing.
absl::Status ParseTextProto(absl::string_view text, absl::string_view source_name,
                            google::protobuf::Message* out, TextProtoTree* tree = nullptr);
// A whole file's text; "cannot open <what> '<path>'" when it cannot be read.
absl::StatusOr<std::string> ReadTextFile(const std::string& path, absl::string_view what = "file");
absl::Status ParseTextProtoFile(const std::string& path, google::protobuf::Message* out);

// Where `field` (index -1: a singular field) of `message`, whose tree is `tree` (may be null),
// was set; `fallback` when it was not (an absent field is reported at its enclosing message).
TextPosition PositionOf(const TextProtoTree* tree, const google::protobuf::Message& message,
                        absl::string_view field, int index, TextPosition fallback = {});
// The tree of a nested message field, or null.
const TextProtoTree* NestedTree(const TextProtoTree* tree, const google::protobuf::Message& message,
                                absl::string_view field, int index);
// "source:line:column: ", or "source: " where the position is not known.
std::string Located(absl::string_view source, TextPosition at);

// Problems found in a parsed file, each "source:line:column: path: what", reported together.
class TextProtoProblems {
 public:
  explicit TextProtoProblems(absl::string_view source) : source_(source) {}
  void Add(TextPosition at, absl::string_view path, absl::string_view what);
  // At `field` of `message` (see PositionOf), else at `fallback`.
  void Add(const TextProtoTree* tree, const google::protobuf::Message& message,
           absl::string_view field, int index, TextPosition fallback, absl::string_view path,
           absl::string_view what) {
    Add(PositionOf(tree, message, field, index, fallback), path, what);
  }
  bool empty() const { return problems_.empty(); }
  // InvalidArgument with one problem a line; OK when there is none.
  absl::Status ToStatus() const;

 private:
  std::string source_;
  std::vector<std::string> problems_;
};

}  // namespace bytecomp
