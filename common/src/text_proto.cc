#include "bytecomp/common/text_proto.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/tokenizer.h"

namespace bytecomp {
namespace {

class CollectingErrors : public google::protobuf::io::ErrorCollector {
 public:
  explicit CollectingErrors(absl::string_view source) : source_(source) {}
  void AddError(int line, int column, const std::string& message) override {
    errors_.push_back(absl::StrCat(source_, ":", line + 1, ":", column + 1, ": ", message));
  }
  void AddWarning(int line, int column, const std::string& message) override {
    AddError(line, column, message);
  }
  std::string Joined() const { return absl::StrJoin(errors_, "; "); }
  bool empty() const { return errors_.empty(); }

 private:
  std::string source_;
  std::vector<std::string> errors_;
};

const google::protobuf::FieldDescriptor* FieldOf(const google::protobuf::Message& message,
                                                 absl::string_view field, int index) {
  const google::protobuf::FieldDescriptor* fd =
      message.GetDescriptor()->FindFieldByName(std::string(field));
  return fd != nullptr && fd->is_repeated() == (index >= 0) ? fd : nullptr;
}

}  // namespace

absl::Status ParseTextProto(absl::string_view text, absl::string_view source_name,
                            google::protobuf::Message* out, TextProtoTree* tree) {
  CollectingErrors errors(source_name);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.AllowUnknownField(false);
  if (tree != nullptr) parser.WriteLocationsTo(tree);
  if (!parser.ParseFromString(std::string(text), out) || !errors.empty()) {
    return absl::InvalidArgumentError(
        errors.empty() ? absl::StrCat(source_name, ": could not parse as ", out->GetTypeName())
                       : errors.Joined());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadTextFile(const std::string& path, absl::string_view what) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", what, " '", path, "'"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

absl::Status ParseTextProtoFile(const std::string& path, google::protobuf::Message* out) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  return ParseTextProto(*text, path, out);
}

TextPosition PositionOf(const TextProtoTree* tree, const google::protobuf::Message& message,
                        absl::string_view field, int index, TextPosition fallback) {
  const google::protobuf::FieldDescriptor* fd = FieldOf(message, field, index);
  if (tree == nullptr || fd == nullptr) return fallback;
  const google::protobuf::TextFormat::ParseLocation at = tree->GetLocation(fd, index);
  return at.line >= 0 ? TextPosition{at.line, at.column} : fallback;
}

const TextProtoTree* NestedTree(const TextProtoTree* tree, const google::protobuf::Message& message,
                                absl::string_view field, int index) {
  const google::protobuf::FieldDescriptor* fd = FieldOf(message, field, index);
  if (tree == nullptr || fd == nullptr) return nullptr;
  return tree->GetTreeForNested(fd, index);
}

std::string Located(absl::string_view source, TextPosition at) {
  if (at.line < 0) return absl::StrCat(source, ": ");
  return absl::StrCat(source, ":", at.line + 1, ":", at.column + 1, ": ");
}

void TextProtoProblems::Add(TextPosition at, absl::string_view path, absl::string_view what) {
  // An unknown place is the file's start, so that every problem reads file:line:column.
  if (at.line < 0) at = TextPosition{0, 0};
  problems_.push_back(absl::StrCat(Located(source_, at), path, ": ", what));
}

absl::Status TextProtoProblems::ToStatus() const {
  if (problems_.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(problems_, "\n"));
}

}  // namespace bytecomp
