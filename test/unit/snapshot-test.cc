// snapshot-test.cc — the archive writer on an access log built here: what
// goes in (and what stays out), a link that files were read through becoming
// a directory, the environment's masking; the oracle for the archive is
// GNU tar's listing of it.
#include "snapshot/snapshot.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "ld-cache-builder.h"
#include "run-command.h"

using namespace mld;

TEST(SnapshotMask, SecretsByNameUrlsAndTokenShapes) {
  EXPECT_EQ(snapshot::masked_value("HF_TOKEN", "abc"), "<masked>");
  EXPECT_EQ(snapshot::masked_value("AWS_SECRET_ACCESS_KEY", "x"), "<masked>");
  EXPECT_EQ(snapshot::masked_value("WANDB_API_KEY", "x"), "<masked>");
  EXPECT_EQ(snapshot::masked_value("DB_PASSWORD", "x"), "<masked>");
  EXPECT_EQ(snapshot::masked_value("MY_VAR", "ghp_0123456789abcdefghij"), "<masked>");
  EXPECT_EQ(snapshot::masked_value("PIP_INDEX_URL", "https://u:p4ss@pypi.example/simple"),
            "https://u:***@pypi.example/simple");
  EXPECT_EQ(snapshot::masked_value("OMP_NUM_THREADS", "4"), "4");
  EXPECT_EQ(snapshot::masked_value("KMP_AFFINITY", "granularity=fine"), "granularity=fine");
  EXPECT_EQ(snapshot::masked_value("LD_LIBRARY_PATH", "/usr/lib"), "/usr/lib");
}

TEST(SnapshotArchive, WhatGoesInAndWhatStaysOut) {
  test::TempDir dir;
  host::AccessLog log;
  log.files["/proc/meminfo"] = "MemTotal: 1 kB\n";
  log.files["/proc/4242/comm"] = "python3\n";           // another process: out
  log.files["/proc/1/cgroup"] = "0::/\n";               // container detection: in
  log.links["/proc/1/fd/3"] = "/home/u/.cache/x/lock";  // its descriptors: out
  log.files["/dev/kmsg"] = "6,1,2,-;x";                 // devices other than /dev/shm: out
  log.links["/sys/class/net/eth0"] = "../../devices/virtual/net/eth0";
  log.files["/sys/class/net/eth0/operstate"] = "up\n";  // read through the link
  log.links["/sys/class/infiniband/mlx5_0/device"] = "../../../0000:17:00.0";
  log.directories["/sys/class/net"] = {"eth0"};
  log.stats["/.dockerenv"] = host::FileStat{host::FileKind::Regular};
  const std::string out = dir.path() + "/snap.tar.gz";
  snapshot::Written w = snapshot::write_snapshot(
      log, {{"HF_TOKEN", "hf_x"}, {"OMP_NUM_THREADS", "2"}}, {{"glibc", "2.36"}}, out);
  EXPECT_EQ(w.masked, 1u);
  test::CommandResult r = test::run_command("tar -tvzf " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  auto has = [&](const std::string& s) { return r.out.find(s) != std::string::npos; };
  EXPECT_TRUE(has(" proc/meminfo\n"));
  EXPECT_TRUE(has(" proc/1/cgroup\n"));
  EXPECT_FALSE(has("proc/4242"));
  EXPECT_FALSE(has("proc/1/fd"));
  EXPECT_FALSE(has("dev/kmsg"));
  EXPECT_TRUE(has(" sys/class/net/eth0/operstate\n"));
  EXPECT_FALSE(has("sys/class/net/eth0 ->"));  // the directory, not the link
  EXPECT_TRUE(has("sys/class/infiniband/mlx5_0/device -> ../../../0000:17:00.0"));
  EXPECT_TRUE(has(" .dockerenv\n"));
  EXPECT_TRUE(has(" .mldoctor/environ\n"));
  EXPECT_TRUE(has(" .mldoctor/glibc\n"));
  test::CommandResult env =
      test::run_command("tar -xzOf " + out + " .mldoctor/environ | tr '\\0' '\\n'");
  EXPECT_EQ(env.out, "HF_TOKEN=<masked>\nOMP_NUM_THREADS=2\n");
  // Never overwrites.
  EXPECT_THROW(snapshot::write_snapshot(log, {}, {}, out), IoError);
}

// A library the loader model read by ranges goes in as those ranges over a
// file of its real size; its other names (a /lib path, a link the checks
// read) lead to the same inode after GNU tar unpacks it; an unrecorded link
// in a chain is filled in; entries of a listed directory that nothing read
// are present and empty. Oracle: GNU tar's extraction and stat(2).
TEST(SnapshotArchive, ObjectsAsTheRangesReadHardLinkedUnderEveryName) {
  test::TempDir dir;
  host::AccessLog log;
  const u64 big = (u64{9} << 30) + 17;  // past the 8 GiB of 11 octal digits: base-256
  host::FileStat lib{host::FileKind::Regular, {1, 100}, big};
  lib.mode = 0100755;
  lib.mtime = 1700000000;
  host::AccessLog::Pieces& p = log.pieces["/lib/x86_64-linux-gnu/libgomp.so.1"];
  p.stat = lib;
  p.real_path = "/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0";
  p.ranges[0] = std::string(
                    "\x7f"
                    "ELF",
                    4) +
                std::string(1020, 'h');
  p.ranges[512] = std::string(512, 'h') + std::string(88, 'o');  // overlaps the first
  p.ranges[big - 5] = "tail!";
  log.stats["/usr/lib/x86_64-linux-gnu/libgomp.so.1"] = lib;
  log.real_paths["/usr/lib/x86_64-linux-gnu/libgomp.so.1"] = p.real_path;
  // A Debian-style link inside a package, read by the checks, whose target
  // is itself a link nothing named.
  log.links["/pkg/lib/libgomp.so"] = "/usr/lib/x86_64-linux-gnu/libgomp.so.1";
  log.stats["/pkg/lib/libgomp.so"] = lib;
  log.real_paths["/pkg/lib/libgomp.so"] = p.real_path;
  // Metadata read whole.
  host::FileStat meta{host::FileKind::Regular, {1, 200}, 12};
  log.files["/site/torch-1.13.egg-info"] = "Name: torch\n";
  log.stats["/site/torch-1.13.egg-info"] = meta;
  log.real_paths["/site/torch-1.13.egg-info"] = "/site/torch-1.13.egg-info";
  log.directories["/site"] = {"torch-1.13.egg-info", "six.py", "yaml"};
  log.facts["python-probe/usr/bin/python3"] = "{\"mldoctor_probe\": 1}\n";
  const std::string out = dir.path() + "/snap.tar.gz";
  snapshot::Written w = snapshot::write_snapshot(log, {}, {}, out);
  EXPECT_EQ(w.sparse_files, 1u);
  EXPECT_EQ(w.sparse_bytes, 1536u + 17u);  // whole blocks: [0, 1536) and the last 17 bytes
  EXPECT_EQ(w.placeholders, 2u);
  const std::string root = dir.path() + "/root";
  test::CommandResult x =
      test::run_command("mkdir " + root + " && tar -xzf " + out + " -C " + root + " 2>&1");
  ASSERT_EQ(x.status, 0) << x.out;
  auto stat_of = [&](const std::string& p) {
    struct stat st {};
    EXPECT_EQ(::stat((root + p).c_str(), &st), 0) << p;
    return st;
  };
  const struct stat real = stat_of("/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0");
  EXPECT_EQ(static_cast<u64>(real.st_size), big);
  EXPECT_LT(static_cast<u64>(real.st_blocks) * 512, u64{1} << 20);  // holes, not 9 GiB
  EXPECT_EQ(real.st_mode & 07777, 0755u);
  EXPECT_EQ(real.st_mtime, 1700000000);
  // (The link's absolute target resolves inside the tree under --root.)
  for (const char* name :
       {"/lib/x86_64-linux-gnu/libgomp.so.1", "/usr/lib/x86_64-linux-gnu/libgomp.so.1"})
    EXPECT_EQ(stat_of(name).st_ino, real.st_ino) << name;
  test::CommandResult link = test::run_command("readlink " + root + "/pkg/lib/libgomp.so");
  EXPECT_EQ(link.out, "/usr/lib/x86_64-linux-gnu/libgomp.so.1\n");
  test::CommandResult bytes = test::run_command(
      "od -An -c -j 1020 -N 8 " + root + "/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0 | tr -d ' '");
  EXPECT_EQ(bytes.out, "hhhhoooo\n");
  test::CommandResult tail =
      test::run_command("tail -c 5 " + root + "/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0");
  EXPECT_EQ(tail.out, "tail!");
  test::CommandResult meta_text = test::run_command("cat " + root + "/site/torch-1.13.egg-info");
  EXPECT_EQ(meta_text.out, "Name: torch\n");
  EXPECT_EQ(stat_of("/site/six.py").st_size, 0);
  test::CommandResult probe =
      test::run_command("cat " + root + "/.mldoctor/python-probe/usr/bin/python3");
  EXPECT_EQ(probe.out, "{\"mldoctor_probe\": 1}\n");
}
