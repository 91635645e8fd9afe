// snapshot-test.cc — the archive writer on an access log built here: what
// goes in (and what stays out), a link that files were read through becoming
// a directory, the environment's masking; the oracle for the archive is
// GNU tar's listing of it.
#include "snapshot/snapshot.h"

#include <gtest/gtest.h>

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
  log.files["/home/u/secret.txt"] = "no";               // outside the trees: out
  log.links["/sys/class/net/eth0"] = "../../devices/virtual/net/eth0";
  log.files["/sys/class/net/eth0/operstate"] = "up\n";  // read through the link
  log.links["/sys/class/infiniband/mlx5_0/device"] = "../../../0000:17:00.0";
  log.directories["/sys/class/net"] = {"eth0"};
  log.stats.insert("/.dockerenv");
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
  EXPECT_FALSE(has("home/"));
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
