// loader-layout-test.cc — the loader model on symlinked, relative and damaged
// layouts: the main program's $ORIGIN under exec() and under `ld.so PATH`,
// the names and file ids the main program and ld.so have (none), open(2)
// failures that pass a candidate over or end one search list, open_verify's
// messages, dlopen()'s first failure ending the call, and section headers
// that ld.so never reads. Objects are synthetic (elf-builder.h) in a
// temporary tree read through the live host; the real ld.so on the same
// kinds of layouts is the oracle of test/e2e/loader-layouts.py.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <type_traits>

#include "elf-builder.h"
#include "loader/loader.h"
#include "other-user.h"

using namespace mld;
using namespace mld::loader;

namespace {

class LoaderLayout : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/mld-loader-layout-XXXXXX";
    dir_ = mkdtemp(tmpl);
    char buf[4096];
    ASSERT_NE(getcwd(buf, sizeof buf), nullptr);
    old_cwd_ = buf;
    // A private ld.so, so that nothing here depends on the machine's.
    test::ElfSpec ld;
    ld.soname = "ld-fixture.so.2";
    write(dir_ + "/rtld/ld-fixture.so.2", test::build_elf(ld));
    link(dir_ + "/rtld/ld-fixture.so.2", dir_ + "/lib64/ld-fixture.so.2");
  }
  void TearDown() override {
    if (chdir(old_cwd_.c_str()) != 0) ADD_FAILURE() << "chdir back";
    std::system(("chmod -R u+rwx " + dir_ + " && rm -rf " + dir_).c_str());
  }

  static void mkdirs(const std::string& path) { std::system(("mkdir -p " + path).c_str()); }
  static std::string parent(const std::string& p) { return p.substr(0, p.rfind('/')); }
  static void write(const std::string& path, const std::vector<u8>& bytes) {
    mkdirs(parent(path));
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }
  static void write(const std::string& path, const std::string& text) {
    write(path, std::vector<u8>(text.begin(), text.end()));
  }
  static void link(const std::string& target, const std::string& at) {
    mkdirs(parent(at));
    ASSERT_EQ(symlink(target.c_str(), at.c_str()), 0) << at;
  }
  // A library with the given soname, needs and RUNPATH.
  std::string lib(const std::string& path, const std::vector<std::string>& needed = {},
                  std::optional<std::string> runpath = std::nullopt) {
    test::ElfSpec s;
    s.soname = path.substr(path.rfind('/') + 1);
    s.needed = needed;
    s.runpath = runpath;
    write(path, test::build_elf(s));
    return path;
  }
  // A PIE program using the fixture's ld.so, which it needs last (as libc
  // needs ld.so: rtld.c keeps its map in the list only when needed).
  std::string program(const std::string& path, const std::vector<std::string>& needed,
                      std::optional<std::string> runpath = std::nullopt) {
    test::ElfSpec s;
    s.interp = dir_ + "/lib64/ld-fixture.so.2";
    s.flags_1 = elf::DF_1_PIE;
    s.needed = needed;
    s.needed.push_back("ld-fixture.so.2");
    s.runpath = runpath;
    write(path, test::build_elf(s));
    return path;
  }

  Loader loader() {
    SearchConfig c = SearchConfig::for_host(host_, elf::EM_X86_64, true, GlibcVersion{2, 36});
    c.ld_library_path.reset();
    c.preload.clear();
    c.inhibit_cache = true;
    c.system_dirs = {dir_ + "/nosys"};
    c.hwcaps_subdirs.clear();
    c.legacy_subdirs.clear();
    return Loader(host_, c);
  }
  // (name, path or "not found") of every object after the main program.
  static std::vector<std::pair<std::string, std::string>> listing(const Process& p) {
    std::vector<std::pair<std::string, std::string>> out;
    for (size_t i = 1; i < p.objects.size(); i++) {
      const Object& o = p.objects[i];
      if (o.removed) continue;
      out.emplace_back(o.names.front(), o.faked ? "not found" : o.path);
    }
    return out;
  }
  std::string rtld() const { return dir_ + "/lib64/ld-fixture.so.2"; }

  host::Host host_ = host::Host::live();
  std::string dir_, old_cwd_;
};

using Listing = std::vector<std::pair<std::string, std::string>>;

// A venv's bin/python is a symlink to the real interpreter: run by exec(),
// its $ORIGIN is the real directory; `ld.so --list` takes the link's.
// The search state refers to the Loader's own config: a copy would dangle.
static_assert(!std::is_copy_constructible_v<mld::loader::Loader> &&
              !std::is_copy_assignable_v<mld::loader::Loader>);

TEST_F(LoaderLayout, MainOriginResolvedUnderExecAsGivenUnderLdSo) {
  lib(dir_ + "/store/lib/libpy.so");
  lib(dir_ + "/venv/lib/libpy.so");
  program(dir_ + "/store/bin/python", {"libpy.so"}, "$ORIGIN/../lib");
  link(dir_ + "/store/bin/python", dir_ + "/venv/bin/python");
  Loader l = loader();
  EXPECT_EQ(listing(l.load_program(dir_ + "/venv/bin/python")),
            (Listing{{"libpy.so", dir_ + "/store/bin/../lib/libpy.so"}, {rtld(), rtld()}}));
  EXPECT_EQ(listing(l.load_program(dir_ + "/venv/bin/python", ProgramStart::LdSo)),
            (Listing{{"libpy.so", dir_ + "/venv/bin/../lib/libpy.so"}, {rtld(), rtld()}}));
  // Relative paths: the exec origin is resolved, `ld.so ./x` keeps "./".
  ASSERT_EQ(chdir((dir_ + "/store").c_str()), 0);
  Loader rel = loader();
  EXPECT_EQ(listing(rel.load_program("./bin/python")),
            (Listing{{"libpy.so", dir_ + "/store/bin/../lib/libpy.so"}, {rtld(), rtld()}}));
  EXPECT_EQ(listing(rel.load_program("./bin/python", ProgramStart::LdSo)),
            (Listing{{"libpy.so", dir_ + "/store/./bin/../lib/libpy.so"}, {rtld(), rtld()}}));
}

// dlopen("$ORIGIN/...") from the main program expands with its origin.
TEST_F(LoaderLayout, DlopenDstUsesTheMainProgramsOrigin) {
  lib(dir_ + "/store/lib/libx.so");
  program(dir_ + "/store/bin/prog", {});
  link(dir_ + "/store/bin/prog", dir_ + "/venv/bin/prog");
  Loader l = loader();
  Process p = l.load_program(dir_ + "/venv/bin/prog");
  std::string error;
  std::vector<size_t> added = l.dlopen(p, "$ORIGIN/../lib/libx.so", std::nullopt, &error);
  EXPECT_EQ(error, "");
  ASSERT_EQ(added.size(), 1u);
  EXPECT_EQ(p.objects[added[0]].path, dir_ + "/store/bin/../lib/libx.so");
}

// The main program has no l_file_id and, started by exec(), no name:
// dlopen() of its own file maps it and fails as glibc does. ld.so's own map
// has no file id either: another path to the same file is a second copy.
TEST_F(LoaderLayout, MainProgramAndLdSoNeverMatchByInode) {
  std::string prog = program(dir_ + "/bin/prog", {});
  Loader l = loader();
  Process p = l.load_program(prog);
  std::string error;
  EXPECT_TRUE(l.dlopen(p, prog, std::nullopt, &error).empty());
  EXPECT_EQ(error, prog + ": cannot dynamically load position-independent executable");
  // Under `ld.so PATH` the main map answers to PATH: nothing to load.
  Process q = l.load_program(prog, ProgramStart::LdSo);
  error.clear();
  EXPECT_TRUE(l.dlopen(q, prog, std::nullopt, &error).empty());
  EXPECT_EQ(error, "");
  // ld.so by its PT_INTERP name is the loaded one; by its real path, a copy.
  error.clear();
  EXPECT_TRUE(l.dlopen(p, rtld(), std::nullopt, &error).empty());
  EXPECT_EQ(error, "");
  std::vector<size_t> added = l.dlopen(p, dir_ + "/rtld/ld-fixture.so.2", std::nullopt, &error);
  EXPECT_EQ(error, "");
  ASSERT_EQ(added.size(), 1u);
  EXPECT_EQ(p.objects[added[0]].path, dir_ + "/rtld/ld-fixture.so.2");
  // A library under two names is one object (st_dev/st_ino).
  lib(dir_ + "/lib/liba.so");
  link("liba.so", dir_ + "/lib/libalias.so");
  EXPECT_EQ(l.dlopen(p, dir_ + "/lib/liba.so", std::nullopt, &error).size(), 1u);
  EXPECT_TRUE(l.dlopen(p, dir_ + "/lib/libalias.so", std::nullopt, &error).empty());
  EXPECT_EQ(error, "");
}

// open_path: an absolute search directory that is a regular file is skipped;
// a relative one is opened in and its ENOTDIR ends that list, as does a
// symlink loop (ELOOP) in any directory.
TEST_F(LoaderLayout, OddErrnoEndsOnlyThatList) {
  write(dir_ + "/afile", std::string("not a directory\n"));
  lib(dir_ + "/d2/libn.so");
  link("libn.so", dir_ + "/loop/libn.so");
  program(dir_ + "/bin/abs", {"libn.so"}, "$ORIGIN/../afile:$ORIGIN/../d2");
  program(dir_ + "/bin/rel", {"libn.so"}, "afile:d2");
  program(dir_ + "/bin/loop", {"libn.so"}, "$ORIGIN/../loop:$ORIGIN/../d2");
  ASSERT_EQ(chdir(dir_.c_str()), 0);
  Loader l = loader();
  EXPECT_EQ(listing(l.load_program(dir_ + "/bin/abs")),
            (Listing{{"libn.so", dir_ + "/bin/../d2/libn.so"}, {rtld(), rtld()}}));
  EXPECT_EQ(listing(l.load_program(dir_ + "/bin/rel")),
            (Listing{{rtld(), rtld()}, {"libn.so", "not found"}}));
  EXPECT_EQ(listing(l.load_program(dir_ + "/bin/loop")),
            (Listing{{rtld(), rtld()}, {"libn.so", "not found"}}));
  // The next list is still searched.
  SearchConfig c = l.config();
  c.ld_library_path = "afile:d2";
  Loader llp(host_, c);
  EXPECT_EQ(listing(llp.load_program(dir_ + "/bin/abs")),
            (Listing{{"libn.so", dir_ + "/bin/../d2/libn.so"}, {rtld(), rtld()}}));
}

// A candidate the user cannot open (EACCES) is passed over. Root reads any
// file, so as root the model runs in a child that became nobody.
TEST_F(LoaderLayout, UnreadableCandidateIsPassedOver) {
  lib(dir_ + "/d2/libu.so");
  lib(dir_ + "/d1/libu.so");
  ASSERT_EQ(chmod((dir_ + "/d1/libu.so").c_str(), 0), 0);
  program(dir_ + "/bin/prog", {"libu.so"}, "$ORIGIN/../d1:$ORIGIN/../d2");
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  auto check = [&]() -> std::string {
    Loader l = loader();
    Process p = l.load_program(dir_ + "/bin/prog");
    if (listing(p) != Listing{{"libu.so", dir_ + "/bin/../d2/libu.so"}, {rtld(), rtld()}})
      return "libu.so was not found in d2: " +
             (p.errors.empty() ? listing(p).front().second : p.errors.front());
    std::string error;
    l.dlopen(p, dir_ + "/d1/libu.so", std::nullopt, &error);
    if (error != dir_ + "/d1/libu.so: cannot open shared object file: Permission denied")
      return "dlopen of the unreadable file: " + error;
    return "";
  };
  std::optional<std::string> why = test::as_unprivileged_user(check);
  if (!why) GTEST_SKIP() << "cannot become user 65534";
  EXPECT_EQ(*why, "");
}

// open_verify's verdicts and messages; the first failure ends a dlopen().
TEST_F(LoaderLayout, DamagedFilesAndDlopenMessages) {
  std::vector<u8> good = test::build_elf([] {
    test::ElfSpec s;
    s.soname = "libg.so";
    return s;
  }());
  write(dir_ + "/bad/short.so", std::vector<u8>(good.begin(), good.begin() + 40));
  write(dir_ + "/bad/phdrs.so", std::vector<u8>(good.begin(), good.begin() + 100));
  write(dir_ + "/bad/text.so", std::string(100, 'x'));
  std::vector<u8> other = good;
  other[4] = 1;  // ELFCLASS32
  write(dir_ + "/only/libw.so", other);
  lib(dir_ + "/lib/libneeds.so", {"libmissing.so", "libw.so"}, "$ORIGIN/../only");
  Loader l = loader();
  Process p = l.load_program(program(dir_ + "/bin/prog", {}));
  auto fails = [&](const std::string& name) {
    std::string error;
    EXPECT_TRUE(l.dlopen(p, name, std::nullopt, &error).empty()) << name;
    return error;
  };
  EXPECT_EQ(fails(dir_ + "/bad/short.so"), dir_ + "/bad/short.so: file too short");
  EXPECT_EQ(fails(dir_ + "/bad/phdrs.so"), dir_ + "/bad/phdrs.so: cannot read file data");
  EXPECT_EQ(fails(dir_ + "/bad/text.so"), dir_ + "/bad/text.so: invalid ELF header");
  EXPECT_EQ(fails(dir_ + "/only/libw.so"), dir_ + "/only/libw.so: wrong ELF class: ELFCLASS32");
  EXPECT_EQ(fails(dir_ + "/nowhere/libz.so"),
            dir_ + "/nowhere/libz.so: cannot open shared object file: No such file or directory");
  // The first missing dependency ends the call, with its own message.
  EXPECT_EQ(fails(dir_ + "/lib/libneeds.so"),
            "libmissing.so: cannot open shared object file: No such file or directory");
  EXPECT_EQ(p.objects.back().removed, true);
}

// ld.so reads the ELF header and program headers, never the section header
// table: garbage there (e_shoff past the end, a wild e_shnum) still loads.
TEST_F(LoaderLayout, GarbageSectionHeadersStillLoad) {
  test::ElfSpec s;
  s.soname = "libsh.so";
  std::vector<u8> b = test::build_elf(s);
  test::put_u64(b, 40, b.size() + 0x100000, false);
  test::put_u16(b, 60, 0xfff0, false);
  write(dir_ + "/lib/libsh.so", b);
  Loader l = loader();
  Process p = l.load_program(program(dir_ + "/bin/prog", {"libsh.so"}, "$ORIGIN/../lib"));
  EXPECT_TRUE(p.errors.empty()) << p.errors.front();
  EXPECT_EQ(listing(p), (Listing{{"libsh.so", dir_ + "/bin/../lib/libsh.so"}, {rtld(), rtld()}}));
}

}  // namespace
