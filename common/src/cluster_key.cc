#include "bytecomp/common/cluster_key.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "zmq.h"

namespace bytecomp {
namespace {

constexpr size_t kZ85KeyChars = 40;

// The public key that belongs to a Z85 secret key, or nullopt when it is not a valid key.
std::optional<std::string> PublicKeyOf(const std::string& secret_z85) {
  if (secret_z85.size() != kZ85KeyChars) return std::nullopt;
  char public_z85[kZ85KeyChars + 1] = {};
  if (zmq_curve_public(public_z85, secret_z85.c_str()) != 0) return std::nullopt;
  return std::string(public_z85);
}

bool IsZ85Key(const std::string& text) {
  if (text.size() != kZ85KeyChars) return false;
  uint8_t decoded[32];
  return zmq_z85_decode(decoded, text.c_str()) != nullptr;
}

std::string ErrnoText() { return std::strerror(errno); }

}  // namespace

absl::StatusOr<ClusterKey> NewClusterKey() {
  if (!zmq_has("curve")) {
    return absl::FailedPreconditionError(
        "this libzmq was built without CURVE (libsodium): it cannot make or use a cluster key");
  }
  char public_z85[kZ85KeyChars + 1] = {};
  char secret_z85[kZ85KeyChars + 1] = {};
  if (zmq_curve_keypair(public_z85, secret_z85) != 0) {
    return absl::InternalError(absl::StrCat("zmq_curve_keypair: ", zmq_strerror(zmq_errno())));
  }
  return ClusterKey{public_z85, secret_z85};
}

std::string ClusterKeyText(const ClusterKey& key) {
  return absl::StrCat(
      "# ByteComp cluster key (bytecomp-keygen): the job's ZeroMQ CURVE keypair.\n"
      "# Whoever can read this file can join the job (register, push, pull, stop it): keep it\n"
      "# mode 0600, and give it only to the job's scheduler, servers and workers.\n",
      "public_key: \"", key.public_key, "\"\n", "secret_key: \"", key.secret_key, "\"\n");
}

absl::StatusOr<ClusterKey> ParseClusterKey(absl::string_view text, absl::string_view source) {
  std::optional<std::string> public_key, secret_key;
  int public_line = 0;
  int line_number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_number;
    const absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line[0] == '#') continue;
    // The line may hold the secret: errors describe it, never quote it.
    const size_t colon = line.find(':');
    const std::string name(absl::StripAsciiWhitespace(line.substr(0, colon)));
    absl::string_view value =
        colon == absl::string_view::npos ? "" : absl::StripAsciiWhitespace(line.substr(colon + 1));
    const bool quoted = value.size() >= 2 && value.front() == '"' && value.back() == '"';
    if (colon == absl::string_view::npos || (name != "public_key" && name != "secret_key") ||
        !quoted) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", line_number,
                       ": not a cluster key line: expected public_key: \"<40 Z85 characters>\" or "
                       "secret_key: \"<40 Z85 characters>\" (bytecomp-keygen writes this file)"));
    }
    value = value.substr(1, value.size() - 2);
    std::optional<std::string>& slot = name == "public_key" ? public_key : secret_key;
    if (slot.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", line_number, ": ", name, " is given a second time"));
    }
    slot = std::string(value);
    if (!IsZ85Key(*slot)) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", line_number, ": ", name,
                       " is not a CURVE key: expected 40 Z85 characters, got ", slot->size(),
                       slot->size() == kZ85KeyChars ? " characters that are not Z85" : ""));
    }
    if (name == "public_key") public_line = line_number;
  }
  if (!secret_key.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source,
        ": no secret_key line: this is not a cluster key file (bytecomp-keygen writes one)"));
  }
  const std::optional<std::string> derived = PublicKeyOf(*secret_key);
  if (!derived.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": secret_key is not a CURVE secret key"));
  }
  if (public_key.has_value() && *public_key != *derived) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", public_line,
                     ": public_key does not belong to secret_key (the file was edited "
                     "or pieced together from two keys; make a new one with bytecomp-keygen)"));
  }
  return ClusterKey{*derived, *secret_key};
}

absl::StatusOr<LoadedClusterKey> ReadClusterKeyFile(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("cluster key file '", path, "': ", ErrnoText(),
                     errno == ENOENT ? " (bytecomp-keygen writes one)" : ""));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster key file '", path, "' is not a regular file"));
  }
  const unsigned mode = st.st_mode & 07777;
  if (mode & 0007) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "cluster key file '%s' has mode %04o: others may %s it, and whoever reads it can join "
        "the job; run chmod 600 '%s'",
        path, mode, (mode & 0004) ? "read" : "change", path));
  }
  LoadedClusterKey loaded;
  if (mode & 0060) {
    loaded.warning = absl::StrFormat(
        "cluster key file '%s' has mode %04o: every member of group %d can %s it (fine for a "
        "Kubernetes Secret mounted with fsGroup; elsewhere chmod 600 it)",
        path, mode, static_cast<int>(st.st_gid), (mode & 0040) ? "read" : "change");
  }
  std::ifstream in(path);
  if (!in) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot read cluster key file '", path, "': ", ErrnoText()));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().size() > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster key file '", path, "' holds ", text.str().size(),
                     " bytes; a key file is about 300 bytes (is this the right file?)"));
  }
  absl::StatusOr<ClusterKey> key = ParseClusterKey(text.str(), path);
  if (!key.ok()) return key.status();
  loaded.key = *std::move(key);
  return loaded;
}

absl::Status WriteClusterKeyFile(const std::string& path, const ClusterKey& key, bool overwrite) {
  // With overwrite, a new file beside it is renamed over the old one: a reader never sees half
  // a key, and a failure leaves the old key in place.
  const std::string target = overwrite ? absl::StrCat(path, ".new-", getpid()) : path;
  const int fd = open(target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST && !overwrite) {
      return absl::AlreadyExistsError(
          absl::StrCat("cluster key file '", path,
                       "' exists; pass --force to replace it (every node of a "
                       "running job must then get the new key)"));
    }
    return absl::UnavailableError(absl::StrCat("cannot create '", target, "': ", ErrnoText()));
  }
  const std::string text = ClusterKeyText(key);
  bool ok = fchmod(fd, 0600) == 0;  // exact, whatever the umask
  size_t written = 0;
  while (ok && written < text.size()) {
    const ssize_t n = write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) written += static_cast<size_t>(n);
  }
  ok = ok && fsync(fd) == 0;
  const std::string error = ok ? "" : ErrnoText();
  ok = close(fd) == 0 && ok;
  if (ok && overwrite && rename(target.c_str(), path.c_str()) != 0) ok = false;
  if (!ok) {
    const std::string why = error.empty() ? ErrnoText() : error;
    unlink(target.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot write cluster key file '", path, "': ", why));
  }
  return absl::OkStatus();
}

absl::Status ApplyClusterKeyEnv(proto::ClusterConfig* config) {
  if (const char* v = std::getenv("BYTECOMP_KEY_FILE"); v != nullptr && *v != '\0') {
    config->set_key_file(v);
  }
  if (const char* v = std::getenv("BYTECOMP_ALLOW_INSECURE"); v != nullptr && *v != '\0') {
    const std::string value = v;
    if (value != "0" && value != "1") {
      return absl::InvalidArgumentError(absl::StrCat(
          "environment variable BYTECOMP_ALLOW_INSECURE='", value, "' must be 0 or 1"));
    }
    config->set_allow_insecure(value == "1");
  }
  if (const char* v = std::getenv("BYTECOMP_DATA_PROTECTION"); v != nullptr && *v != '\0') {
    proto::ClusterConfig::DataProtection protection;
    if (!proto::ClusterConfig::DataProtection_Parse(v, &protection) ||
        protection == proto::ClusterConfig::data_protection_default) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment variable BYTECOMP_DATA_PROTECTION='", v,
                       "' must be encrypt, authenticate or curve"));
    }
    config->set_data_protection(protection);
  }
  return absl::OkStatus();
}

}  // namespace bytecomp
