// bytecomp-keygen: writes a new cluster key file (cluster_key.h), mode 0600, and prints where
// and its public half. Every scheduler, server and worker of a job gets the same file
// (key_file, BYTECOMP_KEY_FILE or --key_file); only processes holding it take part.
// Exit status: 0 written; 1 not written (the file exists without --force, or an I/O error);
// 2 bad usage.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "bytecomp/common/cluster_key.h"

ABSL_FLAG(bool, force, false, "replace an existing key file (atomically)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "bytecomp-keygen [--force] FILE\n"
      "Writes a new ByteComp cluster key (the job's CURVE keypair) to FILE with mode 0600.");
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    std::fprintf(stderr,
                 "usage: bytecomp-keygen [--force] FILE (e.g. /etc/bytecomp/cluster.key)\n");
    return 2;
  }
  const std::string path = args[1];
  absl::StatusOr<bytecomp::ClusterKey> key = bytecomp::NewClusterKey();
  if (!key.ok()) {
    std::fprintf(stderr, "bytecomp-keygen: %s\n", std::string(key.status().message()).c_str());
    return 1;
  }
  if (absl::Status s = bytecomp::WriteClusterKeyFile(path, *key, absl::GetFlag(FLAGS_force));
      !s.ok()) {
    std::fprintf(stderr, "bytecomp-keygen: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf("wrote cluster key %s (mode 0600)\npublic key: %s\n", path.c_str(),
              key->public_key.c_str());
  return 0;
}
