// host-test.cc — the host layer: path helpers, reading a tree under --root
// where absolute symlinks must stay inside the root, and the one way files
// are opened (regular files only: a FIFO, a socket or a device is refused).
#include "host/host.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "other-user.h"

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

// ─── Files that are not regular files ──────────────────────────────────────
// A FIFO in site-packages made `check` wait forever in open(2); a device's
// driver runs at open. Every reading primitive refuses what is not a regular
// file without opening it for reading, says what it is, and never waits.

namespace {

// A tree holding one of each kind of non-regular file, and a regular one.
class Oddities : public ::testing::Test {
 protected:
  void SetUp() override {
    // A test that waits in open(2) fails here instead of hanging ctest.
    alarm(60);
    char tmpl[] = "/tmp/mld-odd-XXXXXX";
    root_ = mkdtemp(tmpl);
    chmod(root_.c_str(), 0755);  // user 65534 may look inside
    mkdir((root_ + "/d").c_str(), 0755);
    std::ofstream(root_ + "/d/plain") << "regular\n";
    ASSERT_EQ(mkfifo((root_ + "/d/fifo").c_str(), 0644), 0);
    symlink("fifo", (root_ + "/d/to-fifo").c_str());
    symlink("loop-b", (root_ + "/d/loop-a").c_str());
    symlink("loop-a", (root_ + "/d/loop-b").c_str());
    symlink("/dev/zero", (root_ + "/d/zero").c_str());  // live only: a device
    std::ofstream(root_ + "/d/secret") << "no\n";
    chmod((root_ + "/d/secret").c_str(), 0);
    sock_ = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const std::string sock = root_ + "/d/sock";
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", sock.c_str());
    ASSERT_EQ(bind(sock_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  }
  void TearDown() override {
    close(sock_);
    std::system(("rm -rf " + root_).c_str());
    alarm(0);
  }
  std::string root_;
  int sock_ = -1;
};

std::string refusal(const std::string& path) {
  std::string why = "(read)";
  read_regular_file(path, 4096, &why);
  return why;
}

}  // namespace

TEST_F(Oddities, BaseRefusesEachKindByName) {
  const std::string d = root_ + "/d/";
  EXPECT_EQ(read_regular_file(d + "plain", 4096).value_or(""), "regular\n");
  EXPECT_EQ(refusal(d + "fifo"), "not a regular file (a FIFO)");
  EXPECT_EQ(refusal(d + "to-fifo"), "not a regular file (a FIFO)");
  EXPECT_EQ(refusal(d + "sock"), "not a regular file (a socket)");
  EXPECT_EQ(refusal(root_ + "/d"), "not a regular file (a directory)");
  EXPECT_EQ(refusal("/dev/zero"), "not a regular file (a character device)");
  EXPECT_EQ(refusal(d + "zero"), "not a regular file (a character device)");
  EXPECT_EQ(refusal(d + "loop-a"), errno_text(ELOOP));
  EXPECT_EQ(refusal(d + "missing"), errno_text(ENOENT));
  // The mapping and range readers refuse the same way, with the path.
  try {
    MappedFile::open(d + "fifo");
    ADD_FAILURE() << "a FIFO was mapped";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), d + "fifo: not a regular file (a FIFO)");
  }
  EXPECT_THROW(SparseFile::open(d + "sock"), IoError);
  EXPECT_THROW(SparseFile::open("/dev/zero"), IoError);
  // What is refused was never opened for reading: a FIFO opened for reading
  // would have let a writer in; a non-blocking writer finds no reader.
  int w = ::open((d + "fifo").c_str(), O_WRONLY | O_NONBLOCK);
  EXPECT_EQ(w, -1);
  EXPECT_EQ(errno, ENXIO);
  if (w >= 0) close(w);
}

TEST_F(Oddities, UnreadableIsTheErrnoNotAType) {
  const std::string secret = root_ + "/d/secret";
  std::optional<std::string> why = test::as_unprivileged_user([&]() -> std::string {
    std::string w = refusal(secret);
    return w == errno_text(EACCES) ? "" : "unreadable file: " + w;
  });
  if (!why) GTEST_SKIP() << "cannot become user 65534";
  EXPECT_EQ(*why, "");
}

TEST_F(Oddities, HostRefusesAndRemembersUnderARootAndLive) {
  for (const bool live : {false, true}) {
    Host h = live ? Host::live() : Host(root_, {});
    const std::string d = live ? root_ + "/d/" : "/d/";
    std::string why;
    EXPECT_EQ(h.read_file(d + "plain", 4096, &why).value_or(""), "regular\n");
    EXPECT_FALSE(h.read_file(d + "fifo", 4096, &why));
    EXPECT_EQ(why, "not a regular file (a FIFO)");
    EXPECT_FALSE(h.read_file(d + "sock", 4096, &why));
    EXPECT_EQ(why, "not a regular file (a socket)");
    EXPECT_FALSE(h.read_file(live ? root_ + "/d" : "/d", 4096, &why));
    EXPECT_EQ(why, "not a regular file (a directory)");
    EXPECT_FALSE(h.read_file(d + "loop-a", 4096, &why));
    EXPECT_EQ(why, errno_text(ELOOP));
    EXPECT_THROW(h.map(d + "to-fifo"), IoError);
    EXPECT_THROW(h.open_sparse(d + "fifo"), IoError);
    if (live) {
      EXPECT_FALSE(h.read_file("/dev/zero", 4096, &why));
      EXPECT_EQ(why, "not a regular file (a character device)");
    }
    // Every FIFO, socket and device refused is kept for the report, once
    // per path; a directory is no news; copies of the Host share the list.
    const Host copy = h;
    std::vector<std::string> refused;
    for (const RefusedFile& f : copy.refused_files()) refused.push_back(f.path + ": " + f.why);
    std::vector<std::string> want = {d + "fifo: not a regular file (a FIFO)",
                                     d + "sock: not a regular file (a socket)",
                                     d + "to-fifo: not a regular file (a FIFO)"};
    if (live) want.insert(want.begin(), "/dev/zero: not a regular file (a character device)");
    EXPECT_EQ(refused, want) << (live ? "live" : "under a root");
  }
}
