// host-test.cc — the host layer: path helpers, and reading a tree under
// --root where absolute symlinks must stay inside the root.
#include "host/host.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

using namespace mld;
using namespace mld::host;

TEST(PathHelpers, NormalizeLexically) {
  EXPECT_EQ(normalize_path("/a//b/./c/../d"), "/a/b/d");
  EXPECT_EQ(normalize_path("/../x"), "/x");
  EXPECT_EQ(normalize_path("a/../../b"), "../b");
  EXPECT_EQ(normalize_path("/"), "/");
  EXPECT_EQ(normalize_path(""), ".");
}

TEST(PathHelpers, DirNameAsLoaderOrigin) {
  EXPECT_EQ(dir_name("/usr/lib/libc.so.6"), "/usr/lib");
  EXPECT_EQ(dir_name("/libc.so.6"), "/");
  EXPECT_EQ(dir_name("libc.so.6"), ".");
  EXPECT_EQ(join_path("/usr/lib/", "/x.so"), "/usr/lib/x.so");
  EXPECT_EQ(join_path("/", "x.so"), "/x.so");
}

class RootTree : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/mld-host-XXXXXX";
    root_ = mkdtemp(tmpl);
    mkdir((root_ + "/etc").c_str(), 0755);
    mkdir((root_ + "/opt").c_str(), 0755);
    std::ofstream(root_ + "/etc/os-release") << "ID=fixture\n";
    std::ofstream(root_ + "/opt/data") << "inside\n";
    // An absolute symlink: inside the root it must mean <root>/opt/data.
    symlink("/opt/data", (root_ + "/etc/link").c_str());
    symlink("/etc/loop2", (root_ + "/etc/loop1").c_str());
    symlink("/etc/loop1", (root_ + "/etc/loop2").c_str());
  }
  void TearDown() override { std::system(("rm -rf " + root_).c_str()); }
  std::string root_;
};

TEST_F(RootTree, ReadsFilesUnderRoot) {
  Host h(root_, {{"LD_LIBRARY_PATH", "/x"}});
  EXPECT_EQ(h.read_file("/etc/os-release").value_or(""), "ID=fixture\n");
  EXPECT_EQ(h.getenv("LD_LIBRARY_PATH").value_or(""), "/x");
  EXPECT_FALSE(h.getenv("HOME").has_value());
  EXPECT_EQ(h.stat("/etc").kind, FileKind::Directory);
  EXPECT_EQ(h.stat("/etc/missing").kind, FileKind::Missing);
  std::optional<std::vector<std::string>> names = h.list_dir("/etc");
  ASSERT_TRUE(names.has_value());
  EXPECT_EQ(*names, (std::vector<std::string>{"link", "loop1", "loop2", "os-release"}));
}

TEST_F(RootTree, AbsoluteSymlinksStayInsideRoot) {
  Host h(root_, {});
  EXPECT_EQ(h.read_file("/etc/link").value_or("(none)"), "inside\n");
  EXPECT_EQ(h.stat("/etc/link").kind, FileKind::Regular);
  MappedFile m = h.map("/etc/link");
  EXPECT_EQ(m.view().as_string_view(), "inside\n");
}

TEST_F(RootTree, SymlinkLoopIsAnErrorNotAHang) {
  Host h(root_, {});
  FileStat st = h.stat("/etc/loop1");
  EXPECT_EQ(st.kind, FileKind::Error);
  EXPECT_EQ(st.error, ELOOP);
  EXPECT_FALSE(h.read_file("/etc/loop1").has_value());
  EXPECT_THROW(h.map("/etc/loop1"), IoError);
}

TEST(LiveHost, SeesProcessEnvironment) {
  setenv("MLD_HOST_TEST", "1", 1);
  Host h = Host::live();
  EXPECT_EQ(h.getenv("MLD_HOST_TEST").value_or(""), "1");
  EXPECT_TRUE(h.is_live_root());
  EXPECT_EQ(h.stat("/proc/self").kind, FileKind::Directory);
}

// openat2(RESOLVE_IN_ROOT) fails a ".." step with EAGAIN whenever a rename
// or mount happens anywhere on the system meanwhile (the kernel cannot prove
// the step stayed inside the root); a sysfs tree is all "../../devices"
// links, and under a loaded test run (pip, .pyc writes, tar) renames never
// stop, so reads of a fixture host came back short — a golden lost two of
// its eight GPUs now and then. Renames in a loop beside reads through such
// a link: every read must succeed.
TEST_F(RootTree, DotDotStepsSurviveRenamesElsewhere) {
  mkdir((root_ + "/sys").c_str(), 0755);
  mkdir((root_ + "/sys/devices").c_str(), 0755);
  mkdir((root_ + "/sys/class").c_str(), 0755);
  std::ofstream(root_ + "/sys/devices/vendor") << "0x10de\n";
  symlink("../devices", (root_ + "/sys/class/gpu").c_str());
  char tmpl[] = "/tmp/mld-rename-XXXXXX";
  const std::string spin = mkdtemp(tmpl);
  std::ofstream(spin + "/a") << "x";
  std::atomic<bool> stop{false};
  std::thread renamer([&] {
    for (bool flip = false; !stop.load(); flip = !flip)
      std::rename((spin + (flip ? "/b" : "/a")).c_str(), (spin + (flip ? "/a" : "/b")).c_str());
  });
  Host h(root_, {});
  int failed = 0;
  for (int i = 0; i < 20000; i++)
    if (h.read_file("/sys/class/gpu/../devices/vendor").value_or("") != "0x10de\n") failed++;
  stop = true;
  renamer.join();
  std::system(("rm -rf " + spin).c_str());
  EXPECT_EQ(failed, 0) << "reads through '..' lost to concurrent renames";
}
