// The cluster key: one ZeroMQ CURVE keypair per job, in a small text file that bytecomp-keygen
// writes and every scheduler, server and worker of the job reads (ClusterConfig.key_file,
// BYTECOMP_KEY_FILE, --key_file). Whoever can read the file can join the job, so the file is
// refused when others may read it.
//
// The file, two lines besides comments (Z85 text, 40 characters each):
//   public_key: "..."
//   secret_key: "..."
// public_key may be left out (it follows from the secret key); when present it must match.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cluster_config.pb.h"

namespace bytecomp {

struct ClusterKey {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters
};

// A fresh keypair from libzmq (libsodium underneath). Fails when libzmq was built without CURVE.
absl::StatusOr<ClusterKey> NewClusterKey();

// The key file's text: a comment saying what it is, then both keys.
std::string ClusterKeyText(const ClusterKey& key);

// Parses a key file's text. Errors name `source` and the line, never the secret itself.
absl::StatusOr<ClusterKey> ParseClusterKey(absl::string_view text, absl::string_view source);

// What ReadClusterKeyFile found besides the key: a warning to log (e.g. group-readable), or empty.
struct LoadedClusterKey {
  ClusterKey key;
  std::string warning;
};

// Reads and parses a key file. Refuses a missing or unreadable file, one that is not a regular
// file, and one that others may read or write ("chmod 600" in the error); a group-readable file
// is accepted with a warning (Kubernetes' fsGroup makes Secret files so).
absl::StatusOr<LoadedClusterKey> ReadClusterKeyFile(const std::string& path);

// Writes a key file with mode 0600. An existing file is replaced only with `overwrite`, and
// then atomically (a new file renamed over it).
absl::Status WriteClusterKeyFile(const std::string& path, const ClusterKey& key, bool overwrite);

// BYTECOMP_KEY_FILE (a path), BYTECOMP_ALLOW_INSECURE (0 or 1) and BYTECOMP_DATA_PROTECTION
// (encrypt, authenticate or curve) into `config`.
absl::Status ApplyClusterKeyEnv(proto::ClusterConfig* config);

}  // namespace bytecomp
