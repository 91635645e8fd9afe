// jit-test.cc — extension build caches on trees built here, read through a
// rooted host: the cache's tag level, TORCH_EXTENSIONS_DIR's flat layout and
// Megatron's single build directory; lock holders from a fake /proc whose
// fd links name the lock; a network filesystem from the mount table; the
// toolchain from a fake CUDA toolkit's headers; caches linked to scratch
// storage, followed for diagnosis, with links that dangle or loop reported;
// and --fix's removals, which go only to a checked real path and never to a
// link's target.
#include "jit/jit.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "detect/detect.h"
#include "ld-cache-builder.h"

using namespace mld;

namespace {

using mld::test::make_dirs;
using mld::test::TempDir;
using mld::test::write_file;

const jit::Extension* find(const jit::JitReport& r, const std::string& name) {
  for (const jit::Extension& e : r.extensions)
    if (e.name == name) return &e;
  return nullptr;
}

// The first finding of `rule` the detectors report from the scan's facts.
std::optional<Finding> finding(const jit::JitReport& r, const std::string& rule) {
  detect::Facts facts;
  facts.jit = &r;
  for (Finding& f : detect::findings(detect::run_detectors(facts), rules::RuleSet()))
    if (f.rule == rule) return f;
  return std::nullopt;
}

// A tree with a cache of two builds (one locked), a TORCH_EXTENSIONS_DIR
// build held by pid 4242, a Megatron build dir on NFS, and a mount table.
struct Tree {
  TempDir dir;
  std::string root() const { return dir.path(); }
  void file(const std::string& p, const std::string& text = "") {
    make_dirs(root() + p.substr(0, p.rfind('/')));
    write_file(root() + p, text);
  }
  void link(const std::string& p, const std::string& target) {
    make_dirs(root() + p.substr(0, p.rfind('/')));
    ASSERT_EQ(symlink(target.c_str(), (root() + p).c_str()), 0) << p;
  }
  Tree() {
    file("/home/u/.cache/torch_extensions/py311_cpu/fused_adam/lock");
    file("/home/u/.cache/torch_extensions/py311_cpu/fused_adam/build.ninja", "rule cxx\n");
    file("/home/u/.cache/torch_extensions/py311_cpu/cpu_adam/cpu_adam.so",
         "\x7f"
         "ELF");
    file("/ext/x2/lock");
    file("/proc/4242/comm", "python3\n");
    link("/proc/4242/fd/7", "/ext/x2/lock");
    link("/proc/4242/fd/0", "/dev/null");
    file("/proc/1/comm", "init\n");
    make_dirs(root() + "/proc/1/fd");
    file("/job/megatron/fused_kernels/build/lock");
    file("/proc/self/mountinfo",
         "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
         "40 22 0:45 / /job rw,relatime - nfs4 server:/export rw,vers=4.2\n");
  }
  host::Host host() const {
    return host::Host(
        root(), {{"HOME", "/home/u"}, {"TORCH_EXTENSIONS_DIR", "/ext"}, {"PATH", "/usr/bin"}});
  }
};

}  // namespace

TEST(JitScan, FindsEveryRootAndLayout) {
  Tree t;
  jit::JitOptions o;
  o.cwd = "/job";
  jit::JitReport r = jit::scan(t.host(), o);
  ASSERT_EQ(r.roots.size(), 3u);
  EXPECT_EQ(r.roots[0].kind, "TORCH_EXTENSIONS_DIR");
  EXPECT_EQ(r.roots[1].path, "/home/u/.cache/torch_extensions");
  EXPECT_EQ(r.roots[2].path, "/job/megatron/fused_kernels/build");

  const jit::Extension* adam = find(r, "fused_adam");
  ASSERT_TRUE(adam);
  EXPECT_EQ(adam->tag, "py311_cpu");
  EXPECT_TRUE(adam->has_build_ninja);
  ASSERT_TRUE(adam->lock);
  EXPECT_EQ(adam->lock->filesystem, "ext4");
  const jit::Extension* cpu_adam = find(r, "cpu_adam");
  ASSERT_TRUE(cpu_adam);
  EXPECT_FALSE(cpu_adam->lock);
  EXPECT_EQ(cpu_adam->module, "/home/u/.cache/torch_extensions/py311_cpu/cpu_adam/cpu_adam.so");
  const jit::Extension* x2 = find(r, "x2");
  ASSERT_TRUE(x2);
  EXPECT_FALSE(x2->tag);  // TORCH_EXTENSIONS_DIR has no tag level
  const jit::Extension* mega = find(r, "build");
  ASSERT_TRUE(mega);
  EXPECT_EQ(mega->root_kind, "megatron fused_kernels");
}

// The tag level torch names the cache directory with: sys.abiflags joined
// the Python part in torch 2.6 (pytorch#136890), so a free-threaded or debug
// interpreter's builds sit in py313t_cpu / py314d_cpu there, and in
// py313_cpu with an older torch; a torch of unknown version is a current one.
TEST(JitTag, AbiflagsFromTorch26On) {
  Tree t;
  auto tag_for = [&](const std::string& soabi, std::optional<std::string> torch_version) {
    pyenv::Environment env;
    env.python.major = 3;
    env.python.minor = 13;
    env.python.soabi = soabi;
    if (torch_version) {
      pyenv::ImportedPackage torch;
      torch.import_name = "torch";
      torch.path = "/no/torch";  // no version.py: the distribution's version
      torch.version = torch_version;
      env.packages.push_back(torch);
    }
    jit::JitOptions o;
    jit::describe_environment(o, t.host(), env);
    return o.python_tag.value_or("(none)");
  };
  EXPECT_EQ(tag_for("cpython-313t-x86_64-linux-gnu", std::string("2.6.0")), "py313t");
  EXPECT_EQ(tag_for("cpython-313td-x86_64-linux-gnu", std::string("2.14.1+dfsg")), "py313td");
  EXPECT_EQ(tag_for("cpython-313t-x86_64-linux-gnu", std::string("2.5.1")), "py313");
  EXPECT_EQ(tag_for("cpython-313-x86_64-linux-gnu", std::string("2.6.0")), "py313");
  EXPECT_EQ(tag_for("cpython-313d-x86_64-linux-gnu", std::nullopt), "py313d");
}

// torch/utils/cpp_extension.py's module-level imports of third-party
// modules, looked for on sys.path: only an unindented statement counts (one
// under try/except or TYPE_CHECKING, or inside a function, may be guarded or
// lazy), a zip on sys.path leaves it undecided, and the fix says how this
// environment installs packages.
TEST(JitImports, CppExtensionImportsLookedForOnSysPath) {
  Tree t;
  const std::string site = "/venv/lib/python3.11/site-packages";
  t.file(site + "/torch/utils/cpp_extension.py",
         "import os\n"
         "import setuptools\n"
         "try:\n"
         "    import packaging\n"
         "except ImportError:\n"
         "    packaging = None\n"
         "from pkg_resources import packaging as pkg_packaging  # type: ignore\n"
         "from typing import TYPE_CHECKING\n"
         "if TYPE_CHECKING:\n"
         "    import filelock\n"
         "def f():\n"
         "    import typing_extensions\n");
  t.file("/usr/lib/python3.11/os.py");
  t.file(site + "/pkg_resources/__init__.py");
  auto describe = [&](std::vector<std::string> sys_path, const std::string& site_dir) {
    pyenv::Environment env;
    env.python.major = 3;
    env.python.minor = 11;
    env.python.executable = "/venv/bin/python";
    env.python.sys_path = std::move(sys_path);
    pyenv::ImportedPackage torch;
    torch.import_name = "torch";
    torch.path = site + "/torch";
    torch.site_dir = site_dir;
    env.packages.push_back(torch);
    jit::JitOptions o;
    jit::describe_environment(o, t.host(), env);
    return o;
  };
  const std::vector<std::string> path = {"/usr/lib/python311.zip", "/usr/lib/python3.11", site};
  jit::JitOptions o = describe(path, site);
  ASSERT_EQ(o.cpp_extension_missing.size(), 1u);
  const jit::MissingImport& m = o.cpp_extension_missing[0];
  EXPECT_EQ(m.module, "setuptools");
  EXPECT_EQ(m.statement, "import setuptools");
  EXPECT_EQ(m.line, 2u);
  EXPECT_EQ(m.file, site + "/torch/utils/cpp_extension.py");
  EXPECT_FALSE(o.installer.pip);
  EXPECT_FALSE(o.installer.debian_system);

  jit::JitReport r = jit::scan(t.host(), o);
  std::optional<Finding> f = finding(r, "JIT024");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->subject, "setuptools");
  EXPECT_NE(f->message.find("No module named 'setuptools'"), std::string::npos) << f->message;
  // The tree holds extension builds: the next load() there fails.
  EXPECT_EQ(f->severity, Severity::Error);
  r.extensions.clear();
  f = finding(r, "JIT024");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->severity, Severity::Warning);
  EXPECT_NE(f->fix.find("uv pip install --python /venv/bin/python setuptools"), std::string::npos)
      << f->fix;

  // pip in the environment: the interpreter's own pip.
  t.file(site + "/pip/__init__.py");
  r = jit::scan(t.host(), describe(path, site));
  f = finding(r, "JIT024");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->fix, "/venv/bin/python -m pip install setuptools");

  // Debian's python3-torch: apt-get.
  r = jit::scan(t.host(), describe(path, "/usr/lib/python3/dist-packages"));
  f = finding(r, "JIT024");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->fix.rfind("apt-get install python3-setuptools", 0), 0u) << f->fix;

  // A zip file on sys.path may hold it: undecided, nothing reported.
  t.file("/usr/lib/python311.zip", "PK");
  EXPECT_TRUE(describe(path, site).cpp_extension_missing.empty());
  std::remove((t.root() + "/usr/lib/python311.zip").c_str());

  // setuptools installed: nothing missing.
  t.file(site + "/setuptools/__init__.py");
  EXPECT_TRUE(describe(path, site).cpp_extension_missing.empty());

  // pkg_resources gone (setuptools 82): named as written, without its comment.
  std::remove((t.root() + site + "/pkg_resources/__init__.py").c_str());
  std::remove((t.root() + site + "/pkg_resources").c_str());
  o = describe(path, site);
  ASSERT_EQ(o.cpp_extension_missing.size(), 1u);
  EXPECT_EQ(o.cpp_extension_missing[0].statement,
            "from pkg_resources import packaging as pkg_packaging");
  EXPECT_EQ(o.cpp_extension_missing[0].line, 7u);
  r = jit::scan(t.host(), o);
  f = finding(r, "JIT024");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->fix, "/venv/bin/python -m pip install 'setuptools<82'");
}

TEST(JitScan, HolderStaleAndNetworkLocks) {
  Tree t;
  jit::JitOptions o;
  o.cwd = "/job";
  jit::JitReport r = jit::scan(t.host(), o);
  EXPECT_EQ(r.processes_scanned, 2u);
  const jit::Extension* x2 = find(r, "x2");
  ASSERT_TRUE(x2 && x2->lock);
  ASSERT_EQ(x2->lock->holders.size(), 1u);
  EXPECT_EQ(x2->lock->holders[0].pid, 4242u);
  EXPECT_EQ(x2->lock->holders[0].command, "python3");

  std::optional<Finding> held = finding(r, "JIT002");
  ASSERT_TRUE(held);
  EXPECT_EQ(held->subject, "/ext/x2/lock");
  std::optional<Finding> stale = finding(r, "JIT001");
  ASSERT_TRUE(stale);
  EXPECT_EQ(stale->subject, "/home/u/.cache/torch_extensions/py311_cpu/fused_adam/lock");
  EXPECT_EQ(stale->severity, Severity::Error);
  std::optional<Finding> nfs = finding(r, "JIT003");
  ASSERT_TRUE(nfs);
  EXPECT_EQ(nfs->subject, "/job/megatron/fused_kernels/build/lock");
  EXPECT_NE(nfs->message.find("nfs4"), std::string::npos);

  // Without every process's open files, "no holder" is not certain: the
  // stale lock is then a warning.
  for (jit::Extension& e : r.extensions)
    if (e.lock) e.lock->holders_complete = false;
  stale = finding(r, "JIT001");
  ASSERT_TRUE(stale);
  EXPECT_EQ(stale->severity, Severity::Warning);
  EXPECT_EQ(stale->evidence.back().text,
            "no process visible to this user has it open; others' could not be read");
}

TEST(JitFix, RemovesOnlyTheStaleLockAndSaysWhyOthersStay) {
  Tree t;
  jit::JitOptions o;
  o.cwd = "/job";
  host::Host h = t.host();
  jit::JitReport r = jit::scan(h, o);

  std::vector<jit::FixAction> plan = jit::fix(h, r, /*dry_run=*/true);
  ASSERT_EQ(plan.size(), 3u);
  for (const jit::FixAction& a : plan) EXPECT_FALSE(a.done);
  EXPECT_EQ(access((t.root() + "/home/u/.cache/torch_extensions/py311_cpu/fused_adam/lock").c_str(),
                   F_OK),
            0);

  std::vector<jit::FixAction> done = jit::fix(h, r, /*dry_run=*/false);
  for (const jit::FixAction& a : done) {
    if (a.path == "/home/u/.cache/torch_extensions/py311_cpu/fused_adam/lock") {
      EXPECT_EQ(a.action, "remove");
      EXPECT_TRUE(a.done) << a.reason;
    } else if (a.path == "/ext/x2/lock") {
      EXPECT_EQ(a.action, "keep");
      EXPECT_NE(a.reason.find("4242"), std::string::npos) << a.reason;
    } else {
      EXPECT_EQ(a.action, "keep");
      EXPECT_NE(a.reason.find("nfs4"), std::string::npos) << a.reason;
    }
  }
  EXPECT_NE(access((t.root() + "/home/u/.cache/torch_extensions/py311_cpu/fused_adam/lock").c_str(),
                   F_OK),
            0);
  EXPECT_EQ(access((t.root() + "/ext/x2/lock").c_str(), F_OK), 0);
  EXPECT_EQ(access((t.root() + "/job/megatron/fused_kernels/build/lock").c_str(), F_OK), 0);
}

// torch since pytorch#190543 (Debian's 2.14) locks a build directory with
// filelock's FileLock, an OS advisory lock: the file stays after every build
// and blocks nothing. Under that torch a lock no process holds is neither
// JIT001 nor removed by --fix; one held open is JIT002 without calling every
// opener the builder (waiters have it open too). Another tag's builds belong
// to another environment, whose torch may be older: their lock is judged as
// FileBaton's.
TEST(JitAdvisoryLock, NeverStaleNeverRemovedUnderFileLockTorch) {
  Tree t;
  t.file("/home/u/.cache/torch_extensions/py310_cpu/old/lock");
  jit::JitOptions o;
  o.cwd = "/job";
  o.python_tag = "py311";
  o.torch_advisory_lock = true;
  host::Host h = t.host();
  jit::JitReport r = jit::scan(h, o);
  const jit::Extension* adam = find(r, "fused_adam");
  ASSERT_TRUE(adam && adam->lock);
  EXPECT_TRUE(adam->lock->advisory);
  EXPECT_EQ(jit::lock_status(*adam->lock), jit::LockStatus::Unlocked);
  const jit::Extension* old = find(r, "old");
  ASSERT_TRUE(old && old->lock);
  EXPECT_FALSE(old->lock->advisory);

  detect::Facts facts;
  facts.jit = &r;
  std::vector<std::string> stale, held;
  for (Finding& f : detect::findings(detect::run_detectors(facts), rules::RuleSet())) {
    if (f.rule == "JIT001") stale.push_back(f.subject);
    if (f.rule == "JIT002") held.push_back(f.message);
  }
  EXPECT_EQ(stale,
            (std::vector<std::string>{"/home/u/.cache/torch_extensions/py310_cpu/old/lock"}));
  ASSERT_EQ(held.size(), 1u);
  EXPECT_NE(held[0].find("OS advisory lock"), std::string::npos) << held[0];

  for (const jit::FixAction& a : jit::fix(h, r, /*dry_run=*/false))
    if (a.path.ends_with("/fused_adam/lock")) {
      EXPECT_EQ(a.action, "keep");
      EXPECT_NE(a.reason.find("advisory"), std::string::npos) << a.reason;
    }
  EXPECT_EQ(access((t.root() + "/home/u/.cache/torch_extensions/py311_cpu/fused_adam/lock").c_str(),
                   F_OK),
            0);
}

TEST(JitFix, NeverRemovesALinksTarget) {
  Tree t;
  t.file("/outside/victim", "keep me");
  // A lock that is a link to a file outside the build root: the link goes,
  // the file it names stays.
  t.link("/ext/x4/lock", "/outside/victim");
  jit::JitReport r = jit::scan(t.host(), {});
  const jit::Extension* x4 = find(r, "x4");
  ASSERT_TRUE(x4 && x4->lock);
  EXPECT_TRUE(x4->lock->symlink);
  jit::fix(t.host(), r, false);
  EXPECT_EQ(mld::test::read_file(t.root() + "/outside/victim"), "keep me");
  struct stat st;
  EXPECT_NE(lstat((t.root() + "/ext/x4/lock").c_str(), &st), 0) << "the link itself is removed";

  // remove_file itself refuses a path through a linked directory, and a
  // file replaced since the caller checked it.
  t.file("/outside/dir/lock");
  t.link("/ext/x5", "/outside/dir");
  std::string error;
  EXPECT_FALSE(t.host().remove_file("/ext/x5/lock", &error));
  EXPECT_NE(error.find("symbolic links"), std::string::npos) << error;
  EXPECT_EQ(access((t.root() + "/outside/dir/lock").c_str(), F_OK), 0);
  const host::FileId other = t.host().lstat("/outside/victim").id;
  EXPECT_FALSE(t.host().remove_file("/outside/dir/lock", &error, &other));
  EXPECT_NE(error.find("Stale"), std::string::npos) << error;
  EXPECT_EQ(access((t.root() + "/outside/dir/lock").c_str(), F_OK), 0);
}

// Host::resolve: every link followed, in order; where a path ends when it
// leads nowhere; a loop ends the walk.
TEST(HostResolve, LinksMissingAndLoops) {
  Tree t;
  t.file("/scratch/u/te/x/lock");
  t.link("/home/v/.cache/torch_extensions", "/scratch/u/te");
  t.link("/scratch/u/te/y", "x");
  host::PathResolution r = t.host().resolve("/home/v/.cache/torch_extensions/y/lock");
  EXPECT_EQ(r.end, host::PathResolution::End::Found);
  EXPECT_EQ(r.path, "/scratch/u/te/x/lock");
  ASSERT_EQ(r.links.size(), 2u);
  EXPECT_EQ(r.links[0].path, "/home/v/.cache/torch_extensions");
  EXPECT_EQ(r.links[0].target, "/scratch/u/te");
  EXPECT_EQ(r.links[1].path, "/scratch/u/te/y");
  EXPECT_EQ(r.links[1].target, "x");

  t.link("/ext/gone", "/nowhere/at/all");
  r = t.host().resolve("/ext/gone/lock");
  EXPECT_EQ(r.end, host::PathResolution::End::Missing);
  EXPECT_EQ(r.path, "/nowhere");
  ASSERT_EQ(r.links.size(), 1u);

  t.link("/ext/la", "lb");
  t.link("/ext/lb", "la");
  r = t.host().resolve("/ext/la");
  EXPECT_EQ(r.end, host::PathResolution::End::Loop);
  EXPECT_EQ(r.links.size(), 41u);
  EXPECT_FALSE(t.host().real_path("/ext/la"));
}

// Caches linked to scratch storage (issue 31, item 3): a linked build
// directory, tag level and cache root are followed; the stale lock behind
// each is reported with its real path and removed there, the links and
// directories stay.
TEST(JitLinks, LinkedBuildDirTagAndRootAreDiagnosedAndFixedAtTheRealPath) {
  Tree t;
  t.file("/scratch/x5/lock");
  t.file("/scratch/x5/build.ninja", "rule cxx\n");
  t.link("/ext/x5", "/scratch/x5");
  t.file("/scratch/tag/y/lock");
  t.link("/home/u/.cache/torch_extensions/py310_cpu", "/scratch/tag");
  host::Host h = t.host();
  jit::JitReport r = jit::scan(h, {});

  const jit::Extension* x5 = find(r, "x5");
  ASSERT_TRUE(x5 && x5->lock);
  EXPECT_EQ(x5->path, "/ext/x5");
  EXPECT_EQ(x5->real_path, "/scratch/x5");
  ASSERT_EQ(x5->links.size(), 1u);
  EXPECT_EQ(x5->links[0].path, "/ext/x5");
  EXPECT_EQ(x5->lock->real_path, "/scratch/x5/lock");
  const jit::Extension* y = find(r, "y");
  ASSERT_TRUE(y && y->lock);
  EXPECT_EQ(y->tag, "py310_cpu");
  EXPECT_EQ(y->lock->real_path, "/scratch/tag/y/lock");

  detect::Facts facts;
  facts.jit = &r;
  std::vector<Finding> fs = detect::findings(detect::run_detectors(facts), rules::RuleSet());
  const Finding* stale = nullptr;
  for (const Finding& f : fs)
    if (f.rule == "JIT001" && f.subject == "/ext/x5/lock") stale = &f;
  ASSERT_TRUE(stale);
  EXPECT_NE(stale->message.find("(really /scratch/x5/lock)"), std::string::npos) << stale->message;
  bool names_link = false;
  for (const Evidence& e : stale->evidence)
    names_link |= e.text.find("/ext/x5 → /scratch/x5") != std::string::npos;
  EXPECT_TRUE(names_link);
  EXPECT_NE(stale->fix.find("rm /scratch/x5/lock"), std::string::npos) << stale->fix;

  for (const jit::FixAction& a : jit::fix(h, r, /*dry_run=*/true)) {
    if (a.path == "/ext/x5/lock") EXPECT_EQ(a.real_path, "/scratch/x5/lock");
  }
  EXPECT_EQ(access((t.root() + "/scratch/x5/lock").c_str(), F_OK), 0)
      << "a dry run removes nothing";
  std::vector<jit::FixAction> done = jit::fix(h, r, false);
  size_t removed = 0;
  for (const jit::FixAction& a : done)
    if (a.path == "/ext/x5/lock" || a.path == "/home/u/.cache/torch_extensions/py310_cpu/y/lock") {
      EXPECT_EQ(a.action, "remove") << a.path << ": " << a.reason;
      EXPECT_TRUE(a.done) << a.reason;
      removed++;
    }
  EXPECT_EQ(removed, 2u);
  EXPECT_NE(access((t.root() + "/scratch/x5/lock").c_str(), F_OK), 0);
  EXPECT_NE(access((t.root() + "/scratch/tag/y/lock").c_str(), F_OK), 0);
  struct stat st;
  ASSERT_EQ(lstat((t.root() + "/ext/x5").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link stays";
  EXPECT_EQ(access((t.root() + "/scratch/x5/build.ninja").c_str(), F_OK), 0);
}

TEST(JitLinks, ACacheRootLinkAndTwoNamesOfOneDirectory) {
  Tree t;
  t.file("/scratch/te/py311_cpu/z/lock");
  // A home whose cache is linked, and a second name for z.
  host::Host h(t.root(), {{"HOME", "/home/v"}, {"PATH", "/usr/bin"}});
  t.link("/home/v/.cache/torch_extensions", "/scratch/te");
  t.link("/scratch/te/py311_cpu/z2", "z");
  jit::JitReport r = jit::scan(h, {});
  ASSERT_EQ(r.roots.size(), 1u);
  EXPECT_EQ(r.roots[0].path, "/home/v/.cache/torch_extensions");
  EXPECT_EQ(r.roots[0].real_path, "/scratch/te");
  const jit::Extension* z = find(r, "z");
  ASSERT_TRUE(z && z->lock);
  EXPECT_EQ(z->lock->real_path, "/scratch/te/py311_cpu/z/lock");
  ASSERT_TRUE(find(r, "z2"));
  std::vector<jit::FixAction> done = jit::fix(h, r, false);
  ASSERT_EQ(done.size(), 2u);
  for (const jit::FixAction& a : done) {
    EXPECT_EQ(a.action, "remove");
    EXPECT_TRUE(a.done) << a.reason;  // the second name: removed with the first, not again
    EXPECT_EQ(a.real_path, "/scratch/te/py311_cpu/z/lock");
  }
  EXPECT_NE(done[1].reason.find("the same file as"), std::string::npos) << done[1].reason;

  // The same directory named by TORCH_EXTENSIONS_DIR too is scanned once.
  h.setenv("TORCH_EXTENSIONS_DIR", "/scratch/te");
  r = jit::scan(h, {});
  ASSERT_EQ(r.roots.size(), 1u);
  EXPECT_EQ(r.roots[0].kind, "TORCH_EXTENSIONS_DIR");
}

// Links that dangle or loop: reported (JIT009), never followed forever,
// never removed by --fix.
TEST(JitLinks, DanglingAndLoopingLinksAreReportedNotFollowed) {
  Tree t;
  make_dirs(t.root() + "/scratch");  // scratch storage, purged
  t.link("/ext/gone", "/scratch/purged/gone");
  t.link("/ext/la", "lb");
  t.link("/ext/lb", "la");
  t.link("/home/u/.cache/torch_extensions/py311_cu121", "/scratch/purged/tag");
  jit::JitReport r = jit::scan(t.host(), {});
  EXPECT_FALSE(find(r, "gone"));
  EXPECT_FALSE(find(r, "la"));
  std::vector<std::string> broken;
  for (const jit::BrokenLink& b : r.broken_links)
    broken.push_back(b.path + " " + b.what + (b.loop ? " loop" : " missing " + b.missing));
  std::sort(broken.begin(), broken.end());
  EXPECT_EQ(broken, (std::vector<std::string>{
                        "/ext/gone build directory missing /scratch/purged",
                        "/ext/la build directory loop",
                        "/ext/lb build directory loop",
                        "/home/u/.cache/torch_extensions/py311_cu121 tag directory missing "
                        "/scratch/purged",
                    }));
  detect::Facts facts;
  facts.jit = &r;
  std::vector<std::string> messages;
  for (const Finding& f : detect::findings(detect::run_detectors(facts), rules::RuleSet()))
    if (f.rule == "JIT009") messages.push_back(f.message);
  ASSERT_EQ(messages.size(), 4u);
  std::sort(messages.begin(), messages.end());
  EXPECT_EQ(messages[0],
            "build directory /ext/gone (TORCH_EXTENSIONS_DIR) is a symbolic link to "
            "/scratch/purged/gone (/scratch/purged does not exist): load() of gone fails at once "
            "with FileExistsError (torch's os.makedirs on the link)");
  EXPECT_EQ(messages[1],
            "build directory /ext/la (TORCH_EXTENSIONS_DIR) is a loop of symbolic links: load() "
            "of la fails at once with FileExistsError (torch's os.makedirs on the link)");
  EXPECT_NE(messages[3].find("every load() of a py311_cu121 build fails at once with "
                             "FileNotFoundError"),
            std::string::npos)
      << messages[3];
  jit::fix(t.host(), r, false);
  struct stat st;
  for (const char* link : {"/ext/gone", "/ext/la", "/ext/lb"})
    EXPECT_EQ(lstat((t.root() + link).c_str(), &st), 0) << link << " stays";

  // A dangling TORCH_EXTENSIONS_DIR fails every load; a dangling default
  // cache does not (torch resolves it with os.path.realpath and creates the
  // target), a looping one does.
  t.link("/te-link", "/scratch/none");
  t.link("/home/w/.cache/torch_extensions", "torch_extensions");
  host::Host h(t.root(), {{"HOME", "/home/w"}, {"TORCH_EXTENSIONS_DIR", "/te-link"}});
  r = jit::scan(h, {});
  ASSERT_EQ(r.broken_links.size(), 2u);
  EXPECT_EQ(r.broken_links[0].path, "/te-link");
  EXPECT_EQ(r.broken_links[0].what, "root");
  EXPECT_EQ(r.broken_links[1].path, "/home/w/.cache/torch_extensions");
  EXPECT_TRUE(r.broken_links[1].loop);
  t.link("/home/x/.cache/torch_extensions", "/scratch/not-yet");
  EXPECT_TRUE(jit::scan(host::Host(t.root(), {{"HOME", "/home/x"}}), {}).broken_links.empty());
}

// --fix removes through links only what the build directory's owner's
// build left, reached through links of root or that owner: a link another
// user planted (pointing at a root-owned directory's `lock`), a lock of
// another owner, or a file replaced since the scan stays.
TEST(JitLinks, FixRefusesLinksOfOtherUsersAndChangedFiles) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give files to another user";
  Tree t;
  t.file("/var/lib/app/lock", "not torch's");
  t.link("/ext/planted", "/var/lib/app");
  ASSERT_EQ(lchown((t.root() + "/ext/planted").c_str(), 65534, 65534), 0);
  t.file("/scratch/mixed/lock");
  ASSERT_EQ(chown((t.root() + "/scratch/mixed/lock").c_str(), 65534, 65534), 0);
  t.link("/ext/mixed", "/scratch/mixed");
  t.file("/scratch/swapped/lock");
  t.link("/ext/swapped", "/scratch/swapped");
  host::Host h = t.host();
  jit::JitReport r = jit::scan(h, {});
  // Replaced after the scan: same name, another file.
  // (Written beside it, then renamed over it: the inode cannot be reused.)
  t.file("/scratch/swapped/lock.new", "new");
  ASSERT_EQ(rename((t.root() + "/scratch/swapped/lock.new").c_str(),
                   (t.root() + "/scratch/swapped/lock").c_str()),
            0);
  std::map<std::string, std::string> kept;
  for (const jit::FixAction& a : jit::fix(h, r, false))
    if (a.action == "keep") kept[a.path] = a.reason;
  EXPECT_NE(
      kept["/ext/planted/lock"].find("symbolic link /ext/planted → /var/lib/app of uid 65534"),
      std::string::npos)
      << kept["/ext/planted/lock"];
  EXPECT_NE(kept["/ext/mixed/lock"].find("owned by uid 65534"), std::string::npos)
      << kept["/ext/mixed/lock"];
  EXPECT_EQ(kept["/ext/swapped/lock"], "replaced by another file since the scan");
  EXPECT_EQ(mld::test::read_file(t.root() + "/var/lib/app/lock"), "not torch's");
  EXPECT_EQ(access((t.root() + "/scratch/mixed/lock").c_str(), F_OK), 0);
  EXPECT_EQ(mld::test::read_file(t.root() + "/scratch/swapped/lock"), "new");
}

TEST(JitToolchain, CudaMajorAndGccLimitFromTheToolkitHeaders) {
  Tree t;
  t.file("/usr/local/cuda-13.0/include/cuda.h", "#pragma once\n#define CUDA_VERSION 13000\n");
  t.file("/usr/local/cuda-13.0/include/crt/host_config.h",
         "#if __GNUC__ > 13\n\n#error -- unsupported GNU version! gcc versions later than 13 are "
         "not supported!\n");
  t.file("/usr/local/cuda-13.0/bin/nvcc", "");
  t.link("/usr/local/cuda", "cuda-13.0");
  t.file("/usr/bin/gcc-14", "");
  t.link("/usr/bin/gcc", "gcc-14");
  jit::JitOptions o;
  o.torch_installed = true;
  o.torch_cuda = "12.1";
  host::Host h(t.root(), {{"PATH", "/usr/bin"}});
  jit::JitReport r = jit::scan(h, o);
  EXPECT_EQ(r.toolchain.cuda_home, "/usr/local/cuda");
  EXPECT_EQ(r.toolchain.cuda_version, "13.0");
  EXPECT_EQ(r.toolchain.nvcc_max_gcc, 13);
  EXPECT_EQ(r.toolchain.gcc_major, 14);
  EXPECT_TRUE(finding(r, "JIT005"));  // no ninja on this PATH
  std::optional<Finding> cuda = finding(r, "JIT006");
  ASSERT_TRUE(cuda);
  EXPECT_NE(cuda->message.find("12.1"), std::string::npos);
  EXPECT_EQ(cuda->severity, Severity::Warning) << "no extension build in sight: a warning";
  EXPECT_TRUE(finding(r, "JIT007"));
  {
    // An extension build in sight: the next load() there fails, an error.
    t.file("/ext/fused_adam/build.ninja", "ninja_required_version = 1.3\n");
    host::Host with_builds(t.root(), {{"PATH", "/usr/bin"}, {"TORCH_EXTENSIONS_DIR", "/ext"}});
    std::optional<Finding> sighted = finding(jit::scan(with_builds, o), "JIT006");
    ASSERT_TRUE(sighted);
    EXPECT_EQ(sighted->severity, Severity::Error);
  }

  // A CPU-only torch builds no CUDA: no toolkit findings.
  o.torch_cuda.reset();
  r = jit::scan(h, o);
  EXPECT_FALSE(finding(r, "JIT006"));
  EXPECT_FALSE(finding(r, "JIT007"));
}

TEST(JitArchList, ParsesLikeTorch) {
  auto list = jit::parse_cuda_arch_list("8.0;8.6+PTX 9.0a");
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[1].major, 8);
  EXPECT_EQ((*list)[1].minor, 6);
  EXPECT_TRUE((*list)[1].ptx);
  EXPECT_EQ((*list)[2].major, 9);
  auto ampere = jit::parse_cuda_arch_list("Ampere");
  ASSERT_TRUE(ampere);
  EXPECT_EQ(ampere->size(), 2u);  // 8.0;8.6+PTX
  EXPECT_FALSE(jit::parse_cuda_arch_list("sm_80"));
  EXPECT_FALSE(jit::parse_cuda_arch_list("8"));
  EXPECT_FALSE(jit::parse_cuda_arch_list(""));
  EXPECT_EQ(jit::compute_capability("NVIDIA H100 80GB HBM3"), "9.0");
  EXPECT_EQ(jit::compute_capability("NVIDIA A100-SXM4-80GB"), "8.0");
  EXPECT_EQ(jit::compute_capability("NVIDIA A10G"), "8.6");
  EXPECT_EQ(jit::compute_capability("NVIDIA L40S"), "8.9");
  EXPECT_FALSE(jit::compute_capability("Some Future GPU"));
}

TEST(JitArchList, ReportsAListWithoutTheGpusArchitecture) {
  Tree t;
  jit::JitOptions o;
  o.torch_installed = true;
  o.torch_cuda = "12.1";
  o.gpu_models = {"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"};
  auto run = [&](const std::string& list) {
    host::Host h(t.root(), {{"TORCH_CUDA_ARCH_LIST", list}});
    return jit::scan(h, o);
  };
  jit::JitReport r = run("8.0;8.6");
  std::optional<Finding> f = finding(r, "JIT008");
  ASSERT_TRUE(f);
  EXPECT_NE(f->message.find("(9.0)"), std::string::npos) << f->message;
  EXPECT_EQ(f->env_fix, (std::vector<std::string>{"TORCH_CUDA_ARCH_LIST=8.0;8.6;9.0"}));
  EXPECT_FALSE(finding(run("8.0+PTX"), "JIT008"));  // PTX is compiled for the later GPU
  EXPECT_FALSE(finding(run("Hopper"), "JIT008"));
  EXPECT_FALSE(finding(run("9.0a"), "JIT008"));
  EXPECT_TRUE(finding(run("10.0"), "JIT008"));  // a newer major's cubin does not run on 9.0
}

// A holder's /proc/<pid>/fd link names the lock by its real path; a build
// root reached through a symlinked directory must still find it.
TEST(JitScan, HolderThroughASymlinkedRoot) {
  Tree t;
  t.file("/data/ext/x7/lock");
  t.link("/link", "data");
  t.link("/proc/5151/fd/3", "/data/ext/x7/lock");
  t.file("/proc/5151/comm", "python3\n");
  host::Host h(t.root(), {{"TORCH_EXTENSIONS_DIR", "/link/ext"}});
  EXPECT_EQ(h.real_path("/link/ext/x7/lock"), "/data/ext/x7/lock");
  EXPECT_FALSE(h.real_path("/link/ext/missing"));
  jit::JitReport r = jit::scan(h, {});
  const jit::Extension* x7 = find(r, "x7");
  ASSERT_TRUE(x7 && x7->lock);
  ASSERT_EQ(x7->lock->holders.size(), 1u);
  EXPECT_EQ(x7->lock->holders[0].pid, 5151u);
  EXPECT_TRUE(finding(r, "JIT002"));
  EXPECT_FALSE(finding(r, "JIT001"));
}

TEST(HostPath, FindOnPathSkipsRelativeAndMissing) {
  Tree t;
  t.file("/opt/bin/ninja", "");
  t.file("/usr/bin/ninja", "");
  host::Host h(t.root(), {{"PATH", "bin:/nowhere:/opt/bin:/usr/bin"}});
  EXPECT_EQ(h.find_on_path("ninja"), "/opt/bin/ninja");
  EXPECT_FALSE(h.find_on_path("gcc"));
  EXPECT_FALSE(host::Host(t.root(), {}).find_on_path("ninja"));  // PATH unset
}
