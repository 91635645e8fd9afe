// dlopen-test.cc — simulate_dlopen_sequence against real dlopen() calls.
//
// Fixture libraries are built with gcc into a temporary directory, together
// with a runner that dlopen()s its arguments in order and prints "ok LIB" or
// "fail LIB: <dlerror()>". The real run is the oracle for glibc 2.36 (this
// machine); the glibc 2.21 and 2.31 cases follow the release sources
// (elf/dl-open.c of 2.21, elf/dl-tls.c of 2.31) and are worked by hand.
// The broad randomised comparison is test/e2e/tls-differential.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "loader/loader.h"
#include "run-command.h"

using namespace mld;
using namespace mld::loader;

namespace {

std::string capture(const std::string& cmd) { return mld::test::run_command(cmd).out; }

const char* kRunner = R"(#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    if (h) printf("ok %s\n", argv[i]); else printf("fail %s: %s\n", argv[i], dlerror());
  }
  return 0;
}
)";

class DlopenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/mld-dlopen-XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::ofstream(dir_ + "/runner.c") << kRunner;
    ASSERT_EQ(sh("gcc -o " + dir_ + "/runner " + dir_ + "/runner.c"), 0);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  static int sh(const std::string& cmd) { return std::system(cmd.c_str()); }

  // Builds lib<name>.so from `source` (C); returns its path.
  std::string lib(const std::string& name, const std::string& source,
                  const std::string& flags = "") {
    std::string path = dir_ + "/lib" + name + ".so";
    std::ofstream(dir_ + "/" + name + ".c") << source;
    EXPECT_EQ(sh("gcc -shared -fPIC -o " + path + " " + dir_ + "/" + name + ".c " + flags), 0);
    return path;
  }
  // An initial-exec TLS array of `size` bytes.
  std::string ie_lib(const std::string& name, int size, int align = 16) {
    std::ostringstream s;
    s << "__attribute__((tls_model(\"initial-exec\"))) __thread char v_" << name << "[" << size
      << "] __attribute__((aligned(" << align << ")));\nchar *get_" << name << "(void) { return v_"
      << name << "; }\n";
    return lib(name, s.str());
  }

  // (ok, error) per call of the real runner.
  std::vector<std::pair<bool, std::string>> real(const std::vector<std::string>& libs,
                                                 const std::string& tunables = "") {
    std::string cmd =
        (tunables.empty() ? "env -u GLIBC_TUNABLES " : "GLIBC_TUNABLES=" + tunables + " ") + dir_ +
        "/runner";
    for (const std::string& l : libs) cmd += " " + l;
    std::vector<std::pair<bool, std::string>> out;
    std::istringstream in(capture(cmd));
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("ok ", 0) == 0) {
        out.push_back({true, ""});
      } else if (line.rfind("fail ", 0) == 0) {
        size_t colon = line.find(": ");
        out.push_back({false, colon == std::string::npos ? line : line.substr(colon + 2)});
      }
    }
    return out;
  }

  DlopenSequence model(const std::vector<std::string>& libs, GlibcVersion g = {2, 36},
                       bool threads = false) {
    host_ = std::make_unique<host::Host>(host::Host::live());
    host_->unsetenv("GLIBC_TUNABLES");
    host_->unsetenv("LD_LIBRARY_PATH");
    host_->unsetenv("LD_PRELOAD");
    loader_ =
        std::make_unique<Loader>(*host_, SearchConfig::for_host(*host_, elf::EM_X86_64, true, g));
    process_ = loader_->load_program(dir_ + "/runner");
    EXPECT_TRUE(process_.errors.empty());
    StaticTlsParams params = *StaticTlsParams::for_machine(elf::EM_X86_64, g);
    params.threads_running = threads;
    return simulate_dlopen_sequence(*loader_, process_, libs, params);
  }

  void expect_same(const std::vector<std::string>& libs) {
    std::vector<std::pair<bool, std::string>> r = real(libs);
    DlopenSequence m = model(libs);
    ASSERT_EQ(r.size(), libs.size());
    ASSERT_EQ(m.steps.size(), libs.size());
    for (size_t i = 0; i < libs.size(); i++) {
      EXPECT_EQ(m.steps[i].ok, r[i].first) << libs[i];
      EXPECT_EQ(m.steps[i].error, r[i].second) << libs[i];
    }
  }

  std::string dir_;
  std::unique_ptr<host::Host> host_;
  std::unique_ptr<Loader> loader_;
  Process process_;
};

TEST_F(DlopenTest, Seed001FifthLibraryFails) {
  std::vector<std::string> libs;
  for (int i = 1; i <= 6; i++) libs.push_back(ie_lib("t" + std::to_string(i), 400));
  expect_same(libs);
  DlopenSequence m = model(libs);
  ASSERT_FALSE(m.steps[4].ok);
  EXPECT_EQ(m.steps[4].tls_module, libs[4]);
  EXPECT_EQ(m.steps[4].bytes_needed, 400u);
  EXPECT_EQ(m.steps[4].bytes_left, 1712u - 4 * 400);
  EXPECT_EQ(m.startup_used, 144u);
  // The fix must really work, and be the smallest multiple of 64 that does.
  ASSERT_TRUE(m.tunables_fix.has_value());
  for (const auto& [ok, err] : real(libs, *m.tunables_fix)) EXPECT_TRUE(ok) << err;
  std::string value = m.tunables_fix->substr(m.tunables_fix->find('=') + 1);
  std::string smaller = "glibc.rtld.optional_static_tls=" + std::to_string(std::stoul(value) - 64);
  bool all = true;
  for (const auto& step : real(libs, smaller)) all &= step.first;
  EXPECT_FALSE(all) << smaller;
}

TEST_F(DlopenTest, DefiningModuleIsNamed) {
  // libdef's variable is reached through TLSDESC only (no static TLS of its
  // own); libref's initial-exec reference must place it and fails naming
  // libdef once the surplus is gone.
  std::string def = lib("def",
                        "__thread char v_def[600] __attribute__((aligned(32)));\n"
                        "char *get_def(void) { return v_def; }\n",
                        "-mtls-dialect=gnu2");
  std::string ref =
      lib("ref",
          "extern __thread char v_def[600] __attribute__((tls_model(\"initial-exec\")));\n"
          "char *ref_def(void) { return v_def; }\n",
          "-Wl,-rpath,'$ORIGIN' -L" + dir_ + " -Wl,--no-as-needed -ldef");
  std::string big = ie_lib("big", 1500);
  expect_same({big, ref});
  DlopenSequence m = model({big, ref});
  ASSERT_EQ(m.steps.size(), 2u);
  EXPECT_FALSE(m.steps[1].ok);
  EXPECT_EQ(m.steps[1].tls_module, def);
  EXPECT_EQ(m.steps[1].loaded, (std::vector<std::string>{ref, def}));
  // Loaded the other way round, everything fits... except big, now.
  expect_same({ref, big});
  expect_same({def, ref, big});
}

TEST_F(DlopenTest, MissingLibraryAndRetry) {
  std::string a = ie_lib("a", 1000);
  std::string b = ie_lib("b", 1000);
  expect_same({dir_ + "/libnope.so", a, b, b, a});
}

TEST_F(DlopenTest, Glibc231HasNoTunableFix) {
  std::vector<std::string> libs;
  for (int i = 1; i <= 5; i++) libs.push_back(ie_lib("l" + std::to_string(i), 400));
  DlopenSequence m = model(libs, {2, 31});
  EXPECT_EQ(m.surplus, 1664u);
  EXPECT_FALSE(m.steps[4].ok);
  EXPECT_FALSE(m.tunables_fix.has_value());
}

TEST_F(DlopenTest, Glibc221DtvSurplusWithThreads) {
  // glibc 2.21 dl_open_worker: with a thread running, a module given static
  // TLS before it is relocated must have l_tls_modid <= DTV_SURPLUS (14).
  // libc holds module id 1, so the 14th dlopened TLS module (id 15) fails;
  // its id is freed and the next module gets 15 again.
  std::vector<std::string> libs;
  for (int i = 1; i <= 15; i++) libs.push_back(ie_lib("m" + std::to_string(i), 8, 8));
  DlopenSequence threaded = model(libs, {2, 21}, true);
  ASSERT_EQ(threaded.steps.size(), 15u);
  for (int i = 0; i < 13; i++) EXPECT_TRUE(threaded.steps[i].ok) << i;
  for (int i = 13; i < 15; i++) {
    EXPECT_FALSE(threaded.steps[i].ok);
    EXPECT_EQ(threaded.steps[i].error, "dlopen: cannot load any more object with static TLS");
  }
  DlopenSequence single = model(libs, {2, 21}, false);
  for (const DlopenStep& st : single.steps) EXPECT_TRUE(st.ok) << st.error;
  // The check was removed in 2.22.
  DlopenSequence later = model(libs, {2, 22}, true);
  for (const DlopenStep& st : later.steps) EXPECT_TRUE(st.ok) << st.error;
}

}  // namespace
