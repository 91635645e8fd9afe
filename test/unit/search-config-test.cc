// search-config-test.cc — the per-directory subdirectory list (glibc-hwcaps
// and legacy hwcap names) and the system directories must be the ones the
// real ld.so of this machine uses. The oracle is `LD_DEBUG=libs`, which
// prints the expanded search path of a missing LD_LIBRARY_PATH directory.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "loader/loader.h"
#include "run-command.h"

using namespace mld;

namespace {

std::string run(const std::string& cmd) { return mld::test::run_command(cmd).out; }

// The directories ld.so would search for LD_LIBRARY_PATH=/mld-nonexistent.
std::vector<std::string> real_subdirs() {
  std::string out = run("LD_DEBUG=libs LD_LIBRARY_PATH=/mld-nonexistent /bin/true 2>&1");
  size_t pos = out.find("search path=");
  std::vector<std::string> dirs;
  if (pos == std::string::npos) return dirs;
  size_t end = out.find("\t", pos);
  std::string list = out.substr(pos + 12, end - pos - 12);
  size_t i = 0;
  while (i <= list.size()) {
    size_t j = list.find(':', i);
    if (j == std::string::npos) j = list.size();
    std::string d = list.substr(i, j - i);
    std::string prefix = "/mld-nonexistent";
    if (d.rfind(prefix, 0) == 0) {
      d = d.substr(prefix.size());
      if (!d.empty() && d[0] == '/') d = d.substr(1);
      dirs.push_back(d);
    }
    i = j + 1;
  }
  return dirs;
}

}  // namespace

TEST(SearchConfig, SubdirectoriesMatchRealLoader) {
  host::Host h = host::Host::live();
  std::optional<loader::GlibcVersion> g =
      loader::detect_glibc_version(h, {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu"});
  ASSERT_TRUE(g.has_value());
  loader::SearchConfig c = loader::SearchConfig::for_host(h, elf::EM_X86_64, true, *g);
  std::vector<std::string> model;
  for (const std::string& s : c.hwcaps_subdirs) model.push_back("glibc-hwcaps/" + s);
  for (const std::string& s : c.legacy_subdirs) model.push_back(s);
  model.push_back("");
  std::vector<std::string> real = real_subdirs();
  ASSERT_FALSE(real.empty()) << "LD_DEBUG=libs printed no search path";
  EXPECT_EQ(model, real);
}

TEST(SearchConfig, SystemDirectoriesMatchRealLoader) {
  host::Host h = host::Host::live();
  loader::SearchConfig c = loader::SearchConfig::for_host(h, elf::EM_X86_64, true, {2, 36});
  // ld.so --help lists "DIR (system search path)" lines in order.
  std::string out = run("/lib64/ld-linux-x86-64.so.2 --help");
  std::vector<std::string> real;
  size_t pos = 0;
  while ((pos = out.find("(system search path)", pos)) != std::string::npos) {
    size_t start = out.rfind('\n', pos) + 1;
    std::string line = out.substr(start, pos - start);
    line.erase(0, line.find_first_not_of(' '));
    line.erase(line.find_last_not_of(' ') + 1);
    real.push_back(line);
    pos++;
  }
  EXPECT_EQ(c.system_dirs, real);
  EXPECT_EQ(c.dst_lib, "lib/x86_64-linux-gnu");
}

TEST(SearchConfig, DetectsGlibcOfThisMachine) {
  host::Host h = host::Host::live();
  std::optional<loader::GlibcVersion> g =
      loader::detect_glibc_version(h, {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu"});
  ASSERT_TRUE(g.has_value());
  std::string ldd = run("ldd --version 2>&1 | head -1");
  std::string want = std::to_string(g->major) + "." + std::to_string(g->minor);
  EXPECT_NE(ldd.find(" " + want), std::string::npos) << ldd;
}

TEST(SearchConfig, LdPreloadSeparators) {
  host::Host h("/", {{"LD_PRELOAD", "liba.so:libb.so libc.so\tlibd.so"}});
  loader::SearchConfig c = loader::SearchConfig::for_host(h, elf::EM_X86_64, true, {2, 36});
  EXPECT_EQ(c.preload, (std::vector<std::string>{"liba.so", "libb.so", "libc.so", "libd.so"}));
}
