// The cluster key file: generation, the text format, its errors (file and line, never the
// secret), permissions, writing without replacing, and the environment variables.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "bytecomp/common.h"

namespace bytecomp {
namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/bytecomp-key-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(absl::StrCat("rm -rf '", path_, "'").c_str()); }
  std::string File(const std::string& name) const { return absl::StrCat(path_, "/", name); }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0);
  return st.st_mode & 07777;
}

bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

TEST(ClusterKeyTest, NewKeysAreZ85PairsAndDiffer) {
  absl::StatusOr<ClusterKey> a = NewClusterKey();
  absl::StatusOr<ClusterKey> b = NewClusterKey();
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->public_key.size(), 40u);
  EXPECT_EQ(a->secret_key.size(), 40u);
  EXPECT_NE(a->secret_key, b->secret_key);
  EXPECT_NE(a->public_key, a->secret_key);
}

TEST(ClusterKeyTest, TextRoundTrips) {
  absl::StatusOr<ClusterKey> key = NewClusterKey();
  ASSERT_TRUE(key.ok());
  const std::string text = ClusterKeyText(*key);
  EXPECT_NE(text.find("# ByteComp cluster key"), std::string::npos);
  absl::StatusOr<ClusterKey> parsed = ParseClusterKey(text, "k.key");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->public_key, key->public_key);
  EXPECT_EQ(parsed->secret_key, key->secret_key);
}

TEST(ClusterKeyTest, PublicKeyFollowsFromTheSecretWhenLeftOut) {
  absl::StatusOr<ClusterKey> key = NewClusterKey();
  ASSERT_TRUE(key.ok());
  absl::StatusOr<ClusterKey> parsed =
      ParseClusterKey(absl::StrCat("\n  secret_key: \"", key->secret_key, "\"  \n"), "k.key");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->public_key, key->public_key);
}

TEST(ClusterKeyTest, MalformedContentNamesFileAndLineButNeverTheSecret) {
  absl::StatusOr<ClusterKey> key = NewClusterKey();
  ASSERT_TRUE(key.ok());
  const std::string good = ClusterKeyText(*key);  // comments on lines 1-3, keys on 4 and 5
  struct Case {
    std::string text;
    std::string expect;
  };
  const std::string cut = key->secret_key.substr(0, 39);
  const Case cases[] = {
      {absl::StrCat(good, "colour: \"blue\"\n"), "k.key:6: not a cluster key line"},
      {absl::StrReplaceAll(good, {{"secret_key: \"", "secret_key: "}}),
       "k.key:5: not a cluster key line"},
      {absl::StrReplaceAll(good, {{key->secret_key, cut}}),
       "k.key:5: secret_key is not a CURVE key: expected 40 Z85 characters, got 39"},
      {absl::StrReplaceAll(good, {{key->secret_key, std::string(40, '~')}}),
       "k.key:5: secret_key is not a CURVE key"},
      {absl::StrCat(good, "secret_key: \"", key->secret_key, "\"\n"),
       "k.key:6: secret_key is given a second time"},
      {"# nothing\n", "k.key: no secret_key line"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ClusterKey> parsed = ParseClusterKey(c.text, "k.key");
    ASSERT_FALSE(parsed.ok()) << c.expect;
    EXPECT_TRUE(Contains(parsed.status(), c.expect)) << parsed.status();
    EXPECT_FALSE(Contains(parsed.status(), cut)) << "the secret leaked: " << parsed.status();
  }
}

TEST(ClusterKeyTest, PublicKeyOfAnotherPairIsRefused) {
  absl::StatusOr<ClusterKey> a = NewClusterKey();
  absl::StatusOr<ClusterKey> b = NewClusterKey();
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<ClusterKey> parsed = ParseClusterKey(
      absl::StrCat("public_key: \"", b->public_key, "\"\nsecret_key: \"", a->secret_key, "\"\n"),
      "k.key");
  ASSERT_FALSE(parsed.ok());
  EXPECT_TRUE(Contains(parsed.status(), "k.key:1: public_key does not belong to secret_key"))
      << parsed.status();
}

TEST(ClusterKeyTest, WriteMakesMode0600AndRefusesToReplaceWithoutOverwrite) {
  TempDir dir;
  const std::string path = dir.File("cluster.key");
  absl::StatusOr<ClusterKey> first = NewClusterKey();
  absl::StatusOr<ClusterKey> second = NewClusterKey();
  ASSERT_TRUE(first.ok() && second.ok());
  const mode_t old_umask = umask(0);  // a permissive umask must not loosen the file
  ASSERT_TRUE(WriteClusterKeyFile(path, *first, false).ok());
  umask(old_umask);
  EXPECT_EQ(ModeOf(path), 0600u);
  absl::Status again = WriteClusterKeyFile(path, *second, false);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(Contains(again, "--force")) << again;
  absl::StatusOr<LoadedClusterKey> read = ReadClusterKeyFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->key.secret_key, first->secret_key);
  EXPECT_TRUE(read->warning.empty());

  ASSERT_TRUE(WriteClusterKeyFile(path, *second, true).ok());
  EXPECT_EQ(ModeOf(path), 0600u);
  read = ReadClusterKeyFile(path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->key.secret_key, second->secret_key);
}

TEST(ClusterKeyTest, ReadRefusesMissingFilesOthersAccessAndWarnsForGroup) {
  TempDir dir;
  absl::StatusOr<LoadedClusterKey> missing = ReadClusterKeyFile(dir.File("none.key"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(missing.status(), "none.key")) << missing.status();
  EXPECT_TRUE(Contains(missing.status(), "bytecomp-keygen")) << missing.status();

  absl::StatusOr<ClusterKey> key = NewClusterKey();
  ASSERT_TRUE(key.ok());
  const std::string open = dir.File("open.key");
  WriteFile(open, ClusterKeyText(*key), 0644);
  absl::StatusOr<LoadedClusterKey> refused = ReadClusterKeyFile(open);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(Contains(refused.status(), "mode 0644: others may read it")) << refused.status();
  EXPECT_TRUE(Contains(refused.status(), "chmod 600")) << refused.status();

  const std::string group = dir.File("group.key");
  WriteFile(group, ClusterKeyText(*key), 0640);
  absl::StatusOr<LoadedClusterKey> warned = ReadClusterKeyFile(group);
  ASSERT_TRUE(warned.ok()) << warned.status();
  EXPECT_NE(warned->warning.find("mode 0640"), std::string::npos) << warned->warning;

  const std::string broken = dir.File("broken.key");
  WriteFile(broken, "public_key: \"x\"\n", 0600);
  absl::StatusOr<LoadedClusterKey> bad = ReadClusterKeyFile(broken);
  EXPECT_TRUE(Contains(bad.status(), absl::StrCat(broken, ":1: public_key"))) << bad.status();

  EXPECT_FALSE(ReadClusterKeyFile(dir.File("")).ok());  // a directory
}

TEST(ClusterKeyTest, EnvironmentSetsKeyFileAndAllowInsecure) {
  proto::ClusterConfig config;
  setenv("BYTECOMP_KEY_FILE", "/etc/bytecomp/cluster.key", 1);
  setenv("BYTECOMP_ALLOW_INSECURE", "1", 1);
  ASSERT_TRUE(ApplyClusterKeyEnv(&config).ok());
  EXPECT_EQ(config.key_file(), "/etc/bytecomp/cluster.key");
  EXPECT_TRUE(config.allow_insecure());
  setenv("BYTECOMP_ALLOW_INSECURE", "yes", 1);
  absl::Status s = ApplyClusterKeyEnv(&config);
  EXPECT_TRUE(Contains(s, "BYTECOMP_ALLOW_INSECURE='yes' must be 0 or 1")) << s;
  unsetenv("BYTECOMP_KEY_FILE");
  unsetenv("BYTECOMP_ALLOW_INSECURE");
}

}  // namespace
}  // namespace bytecomp
