// pyenv-test.cc — the Python environment model. Fixture trees built here in
// a temp dir stand for a venv, a conda prefix, Debian's dist-packages and
// broken installs (read with --root semantics, so nothing is executed); fake
// interpreters test the probe's failure messages; and on this machine the
// real /usr/bin/python3 is the oracle for sys.path, the distribution list
// (importlib.metadata) and the dlopen order of the usual imports (LD_DEBUG).
#include "pyenv/pyenv.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "elf-builder.h"
#include "other-user.h"
#include "run-command.h"

using namespace mld;
using namespace mld::pyenv;

namespace {

class Tree {
 public:
  Tree() {
    char tmpl[] = "/tmp/mld-pyenv-XXXXXX";
    root_ = mkdtemp(tmpl);
  }
  ~Tree() { std::system(("chmod -R u+rwx " + root_ + " 2>/dev/null; rm -rf " + root_).c_str()); }
  const std::string& root() const { return root_; }
  std::string at(const std::string& p) const { return root_ + p; }

  void dir(const std::string& p) const { std::system(("mkdir -p '" + at(p) + "'").c_str()); }
  void file(const std::string& p, const std::string& text = "") const {
    dir(host::dir_name(p));
    std::ofstream(at(p), std::ios::binary) << text;
  }
  void elf(const std::string& p, test::ElfSpec spec = {}) const {
    std::vector<u8> bytes = test::build_elf(spec);
    file(p, std::string(bytes.begin(), bytes.end()));
  }
  // An extension module: exports PyInit_<name>.
  void extension(const std::string& p, const std::string& module_name) const {
    test::ElfSpec s;
    s.dynsym.push_back({.name = "PyInit_" + module_name, .value = 0x1000, .size = 8});
    elf(p, s);
  }
  void link(const std::string& target, const std::string& p) const {
    dir(host::dir_name(p));
    symlink(target.c_str(), at(p).c_str());
  }

 private:
  std::string root_;
};

test::ElfSpec executable() {
  test::ElfSpec s;
  s.type = elf::ET_EXEC;
  return s;
}

std::vector<std::string> paths_of(const std::vector<NativeFile>& files) {
  std::vector<std::string> out;
  for (const NativeFile& f : files) out.push_back(f.path);
  return out;
}

bool has_problem(const Environment& env, const std::string& path, const std::string& what) {
  for (const ScanProblem& p : env.problems)
    if (p.path == path && p.what.find(what) != std::string::npos) return true;
  return false;
}

std::string problems_text(const Environment& env) {
  std::string s;
  for (const ScanProblem& p : env.problems) s += p.path + ": " + p.what + "\n";
  return s;
}

}  // namespace

TEST(DistributionNames, Pep503) {
  EXPECT_EQ(normalize_distribution_name("Scikit_Learn"), "scikit-learn");
  EXPECT_EQ(normalize_distribution_name("opencv_python.headless"), "opencv-python-headless");
  EXPECT_EQ(normalize_distribution_name("a--b__c"), "a-b-c");
}

// ─── choosing the interpreter ───────────────────────────────────────────────

TEST(ChooseInterpreter, OrderFlagVenvCondaPath) {
  Tree t;
  t.elf("/venv/bin/python", executable());
  t.elf("/conda/bin/python", executable());
  t.elf("/usr/bin/python3", executable());
  t.elf("/opt/py/bin/python3", executable());
  host::Host h(
      t.root(),
      {{"VIRTUAL_ENV", "/venv"}, {"CONDA_PREFIX", "/conda"}, {"PATH", "/opt/py/bin:/usr/bin"}});
  InterpreterChoice c = choose_interpreter(h, std::string("/usr/bin/python3"));
  EXPECT_EQ(c.source, InterpreterSource::Flag);
  EXPECT_EQ(c.path, "/usr/bin/python3");
  EXPECT_EQ(c.python3_on_path, "/opt/py/bin/python3");

  c = choose_interpreter(h, std::nullopt);
  EXPECT_EQ(c.source, InterpreterSource::VirtualEnv);
  EXPECT_EQ(c.path, "/venv/bin/python");
  h.unsetenv("VIRTUAL_ENV");
  c = choose_interpreter(h, std::nullopt);
  EXPECT_EQ(c.source, InterpreterSource::CondaPrefix);
  EXPECT_EQ(c.path, "/conda/bin/python");
  h.setenv("CONDA_PREFIX", "/nonexistent");  // set but empty of Python: skipped
  c = choose_interpreter(h, std::nullopt);
  EXPECT_EQ(c.source, InterpreterSource::PathSearch);
  EXPECT_EQ(c.path, "/opt/py/bin/python3");
  EXPECT_EQ(c.reason, "python3 on PATH");
}

TEST(ChooseInterpreter, MissingFlagIsAnError) {
  Tree t;
  host::Host h(t.root(), {});
  try {
    choose_interpreter(h, std::string("/no/python"));
    FAIL() << "expected PyenvError";
  } catch (const PyenvError& e) {
    EXPECT_NE(std::string(e.what()).find("--python /no/python"), std::string::npos) << e.what();
  }
  EXPECT_THROW(choose_interpreter(h, std::nullopt), PyenvError);  // nothing anywhere
}

// ─── layout inference over fixture trees ────────────────────────────────────

TEST(LayoutVenv, SysPathSuffixAndAuditwheelLibs) {
  Tree t;
  t.elf("/usr/local/bin/python3.12", executable());
  t.file("/usr/local/lib/python3.12/os.py");
  t.elf("/usr/local/lib/python3.12/lib-dynload/_ssl.cpython-312-x86_64-linux-gnu.so");
  t.file("/usr/local/lib/python3.12/site-packages/requests/__init__.py");  // system site: excluded
  t.link("/usr/local/bin/python3.12", "/opt/venv/bin/python");
  t.file("/opt/venv/pyvenv.cfg",
         "home = /usr/local/bin\ninclude-system-site-packages = false\nversion = 3.12.1\n");
  std::string sp = "/opt/venv/lib/python3.12/site-packages";
  t.file(sp + "/numpy-1.26.4.dist-info/METADATA",
         "Metadata-Version: 2.1\nName: numpy\nVersion: 1.26.4\n\nlong text\nName: bogus\n");
  t.file(sp + "/numpy-1.26.4.dist-info/INSTALLER", "pip\n");
  t.file(sp + "/numpy-1.26.4.dist-info/RECORD",
         "numpy/__init__.py,sha256=x,1\nnumpy.libs/libopenblas64_p-r0-0cf96a72.3.23.dev.so,,\n"
         "numpy/core/_multiarray_umath.cpython-312-x86_64-linux-gnu.so,,\n");
  t.file(sp + "/numpy/__init__.py");
  t.extension(sp + "/numpy/core/_multiarray_umath.cpython-312-x86_64-linux-gnu.so",
              "_multiarray_umath");
  t.elf(sp + "/numpy.libs/libopenblas64_p-r0-0cf96a72.3.23.dev.so");
  t.elf(sp + "/numpy.libs/libgfortran-040039e1.so.5.0.0");
  t.file(sp + "/numpy/core/include/numpy/ndarrayobject.h");
  t.file(sp + "/numpy/core/tests/data/x.so", "not walked");

  host::Host h(t.root(), {{"VIRTUAL_ENV", "/opt/venv"}, {"HOME", "/root"}});
  Environment env = scan_environment(h, {});
  EXPECT_EQ(env.interpreter.source, InterpreterSource::VirtualEnv);
  EXPECT_EQ(env.python.origin, FactsOrigin::Layout);
  EXPECT_EQ(env.python.version, "3.12");
  EXPECT_EQ(env.python.prefix, "/opt/venv");
  EXPECT_EQ(env.python.base_prefix, "/usr/local");
  EXPECT_TRUE(env.python.in_venv());
  EXPECT_EQ(env.python.ext_suffix, ".cpython-312-x86_64-linux-gnu.so");
  EXPECT_EQ(env.python.machine, "x86_64");
  EXPECT_EQ(
      env.python.sys_path,
      (std::vector<std::string>{"", "/usr/local/lib/python312.zip", "/usr/local/lib/python3.12",
                                "/usr/local/lib/python3.12/lib-dynload", sp}));
  ASSERT_EQ(env.distributions.size(), 1u);
  EXPECT_EQ(env.distributions[0].name, "numpy");
  EXPECT_EQ(env.distributions[0].version, "1.26.4");
  EXPECT_EQ(env.distributions[0].installer, "pip");
  EXPECT_EQ(env.distributions[0].top_level, std::vector<std::string>{"numpy"});  // from RECORD

  const ImportedPackage* np = env.find_package("numpy");
  ASSERT_NE(np, nullptr);
  EXPECT_EQ(np->distribution, "numpy");
  EXPECT_EQ(np->version, "1.26.4");
  ASSERT_EQ(np->extension_modules.size(), 1u);
  EXPECT_EQ(np->extension_modules[0].module, "numpy.core._multiarray_umath");
  EXPECT_EQ(paths_of(np->libraries),
            (std::vector<std::string>{sp + "/numpy.libs/libgfortran-040039e1.so.5.0.0",
                                      sp + "/numpy.libs/libopenblas64_p-r0-0cf96a72.3.23.dev.so"}));
  for (const NativeFile& f : np->libraries) EXPECT_EQ(f.import_name, "numpy");
  EXPECT_TRUE(env.problems.empty()) << problems_text(env);
}

// FIFOs where metadata and a .pth file should be: each is refused unopened
// (the scan would wait forever in open(2)), named with what it is, and the
// rest of the environment is still described.
TEST(LayoutFifos, EachRefusedNamedAndTheRestStillRead) {
  alarm(60);  // a read that waits fails the test instead of hanging it
  Tree t;
  t.elf("/usr/bin/python3.11", executable());
  t.file("/usr/lib/python3.11/os.py");
  const std::string sp = "/usr/lib/python3.11/site-packages";
  t.file(sp + "/good-3.0.dist-info/METADATA", "Name: good\nVersion: 3.0\n");
  t.dir(sp + "/blocked-1.0.dist-info");
  t.dir(sp + "/numba/np/ufunc");
  t.file(sp + "/numba-0.60.0.dist-info/METADATA", "Name: numba\nVersion: 0.60.0\n");
  t.extension(sp + "/numba/np/ufunc/omppool.cpython-311-x86_64-linux-gnu.so", "omppool");
  t.file(sp + "/extra.pth", "extra\n");
  t.dir(sp + "/extra");
  t.dir(sp + "/mine");
  t.file(sp + "/mine/__init__.py", "from . import sub\n");
  for (const std::string& fifo :
       {sp + "/blocked-1.0.dist-info/METADATA", sp + "/numba-0.60.0.dist-info/RECORD",
        sp + "/numba-0.60.0.dist-info/INSTALLER", sp + "/zz-hang.pth", sp + "/mine/sub.py"})
    ASSERT_EQ(mkfifo(t.at(fifo).c_str(), 0644), 0) << fifo;

  host::Host h(t.root(), {});
  ScanOptions opts;
  opts.python = "/usr/bin/python3.11";
  Environment env = scan_environment(h, opts);
  const Distribution* blocked = env.find_distribution("blocked");
  ASSERT_NE(blocked, nullptr);  // named after its directory
  EXPECT_EQ(blocked->error, "METADATA: not a regular file (a FIFO): not read");
  EXPECT_TRUE(has_problem(env, sp + "/blocked-1.0.dist-info",
                          "METADATA: not a regular file (a FIFO): not read"))
      << problems_text(env);
  ASSERT_NE(env.find_distribution("numba"), nullptr);
  EXPECT_EQ(env.find_distribution("numba")->version, "0.60.0");
  EXPECT_FALSE(env.find_distribution("numba")->installer);
  ASSERT_NE(env.find_distribution("good"), nullptr);
  // The other .pth still adds its directory; the FIFO one is named with
  // what site.py does to it.
  EXPECT_NE(std::find(env.python.sys_path.begin(), env.python.sys_path.end(), sp + "/extra"),
            env.python.sys_path.end());
  ASSERT_EQ(env.python.unread_pth.size(), 1u);
  EXPECT_EQ(env.python.unread_pth[0].path, sp + "/zz-hang.pth");
  EXPECT_EQ(env.python.unread_pth[0].what,
            "not a regular file (a FIFO): not read; site.py waits on it at every start-up of "
            "this Python until something writes to it");
  // numba's extension module is found all the same (its tree, RECORD unread).
  ASSERT_NE(env.find_package("numba"), nullptr);
  EXPECT_EQ(env.find_package("numba")->extension_modules.size(), 1u);
  // The import walk takes a module's source only when it is a regular file,
  // as Python's FileFinder does (a FIFO sub.py is no module): nothing read.
  std::vector<ScanProblem> walk;
  ImportedPackage mine;
  mine.import_name = "mine";
  mine.kind = ImportKind::Package;
  mine.path = sp + "/mine";
  mine.site_dir = sp;
  EXPECT_TRUE(import_events(h, mine, walk).empty());
  EXPECT_TRUE(walk.empty());
  // And the host kept every FIFO it was asked to read, once each.
  std::vector<std::string> refused;
  for (const host::RefusedFile& f : h.refused_files()) refused.push_back(f.path);
  EXPECT_EQ(refused,
            (std::vector<std::string>{sp + "/blocked-1.0.dist-info/METADATA",
                                      sp + "/numba-0.60.0.dist-info/INSTALLER",
                                      sp + "/numba-0.60.0.dist-info/RECORD", sp + "/zz-hang.pth"}));
  alarm(0);
}

TEST(LayoutConda, TorchWheelNvidiaAndRecordLibraries) {
  Tree t;
  t.elf("/opt/conda/bin/python3.10", executable());
  t.link("python3.10", "/opt/conda/bin/python");
  t.file("/opt/conda/lib/python3.10/os.py");
  std::string sp = "/opt/conda/lib/python3.10/site-packages";
  t.file(sp + "/torch-2.1.0.dist-info/METADATA", "Name: torch\nVersion: 2.1.0+cu121\n");
  t.file(sp + "/torch-2.1.0.dist-info/top_level.txt", "functorch\ntorch\ntorchgen\n");
  t.file(sp + "/torch/__init__.py");
  t.extension(sp + "/torch/_C.cpython-310-x86_64-linux-gnu.so", "_C");
  t.elf(sp + "/torch/lib/libtorch_cpu.so");
  t.elf(sp + "/torch/lib/libgomp-a34b3233.so.1");
  t.elf(sp + "/torch/lib/libtorch_global_deps.so");
  t.file(sp + "/torch/include/ATen/ATen.h");
  t.file(sp + "/nvidia/__init__.py");
  t.elf(sp + "/nvidia/cublas/lib/libcublas.so.12");
  t.file(sp + "/nvidia/cublas/include/cublas.h");
  t.file(sp + "/nvidia_cublas_cu12-12.1.3.1.dist-info/METADATA",
         "Name: nvidia-cublas-cu12\nVersion: 12.1.3.1\n");
  t.file(sp + "/intel_openmp-2024.0.2.dist-info/METADATA",
         "Name: intel-openmp\nVersion: 2024.0.2\n");
  t.file(sp + "/intel_openmp-2024.0.2.dist-info/RECORD",
         "../../libiomp5.so,sha256=abc,123\nintel_openmp-2024.0.2.dist-info/METADATA,,\n");
  t.elf("/opt/conda/lib/libiomp5.so");
  t.file(sp + "/extra.pth", "# comment\n/opt/extra\nimport sys; print('hi')\n../../missing-dir\n");
  t.dir("/opt/extra");

  host::Host h(t.root(), {{"CONDA_PREFIX", "/opt/conda"}, {"PYTHONPATH", "/work/src"}});
  Environment env = scan_environment(h, {});
  EXPECT_EQ(env.interpreter.source, InterpreterSource::CondaPrefix);
  EXPECT_EQ(env.python.version, "3.10");  // from the bin/python -> python3.10 link
  EXPECT_FALSE(env.python.in_venv());
  EXPECT_EQ(env.python.ext_suffix, ".cpython-310-x86_64-linux-gnu.so");
  EXPECT_EQ(env.python.sys_path,
            (std::vector<std::string>{"", "/work/src", "/opt/conda/lib/python310.zip",
                                      "/opt/conda/lib/python3.10",
                                      "/opt/conda/lib/python3.10/lib-dynload", sp, "/opt/extra"}));
  ASSERT_EQ(env.python.unexecuted_pth_imports.size(), 1u);
  EXPECT_TRUE(has_problem(env, sp + "/extra.pth", "import sys"));

  const ImportedPackage* torch = env.find_package("torch");
  ASSERT_NE(torch, nullptr);
  EXPECT_EQ(torch->version, "2.1.0+cu121");
  ASSERT_EQ(torch->extension_modules.size(), 1u);
  EXPECT_EQ(torch->extension_modules[0].module, "torch._C");
  EXPECT_EQ(paths_of(torch->libraries),
            (std::vector<std::string>{sp + "/torch/lib/libgomp-a34b3233.so.1",
                                      sp + "/torch/lib/libtorch_cpu.so",
                                      sp + "/torch/lib/libtorch_global_deps.so"}));

  const ImportedPackage* nv = env.find_package("nvidia");
  ASSERT_NE(nv, nullptr);
  ASSERT_EQ(nv->libraries.size(), 1u);
  EXPECT_EQ(nv->libraries[0].import_name, "nvidia.cublas");
  EXPECT_EQ(nv->libraries[0].distribution, "nvidia-cublas-cu12");

  ASSERT_EQ(env.other_libraries.size(), 1u);
  EXPECT_EQ(env.other_libraries[0].path, "/opt/conda/lib/libiomp5.so");
  EXPECT_EQ(env.other_libraries[0].distribution, "intel-openmp");

  std::vector<ImportStep> steps = plan_imports(env, h, {"torch"}).steps;
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].path, sp + "/torch/lib/libtorch_global_deps.so");
  EXPECT_EQ(steps[0].kind, NativeKind::Library);
  EXPECT_EQ(steps[1].module, "torch._C");
}

TEST(LayoutDebian, DistPackagesEggInfoDuplicatesAndShadowing) {
  Tree t;
  t.elf("/usr/bin/python3.11", executable());
  t.link("python3.11", "/usr/bin/python3");
  t.file("/usr/lib/python3.11/os.py");
  std::string local = "/usr/local/lib/python3.11/dist-packages";
  std::string deb = "/usr/lib/python3/dist-packages";
  t.file(deb + "/numpy-1.24.2.egg-info/PKG-INFO",
         "Metadata-Version: 2.1\nName: numpy\nVersion: 1.24.2\n");
  t.file(deb + "/numpy-1.24.2.egg-info/top_level.txt", "numpy\n");
  t.file(deb + "/numpy/__init__.py");
  t.extension(deb + "/numpy/core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so",
              "_multiarray_umath");
  t.file(deb + "/sympy-1.11.1.egg-info", "Metadata-Version: 2.1\nName: sympy\nVersion: 1.11.1\n");
  t.extension(deb + "/cv2.cpython-311-x86_64-linux-gnu.so", "cv2");
  // Both metadata forms of one distribution in one directory.
  t.file(deb + "/cryptography-38.0.4.dist-info/METADATA", "Name: cryptography\nVersion: 38.0.4\n");
  t.file(deb + "/cryptography.egg-info/PKG-INFO", "Name: cryptography\nVersion: 38.0.4\n");
  t.file(local + "/numpy-1.26.0.dist-info/METADATA", "Name: numpy\nVersion: 1.26.0\n");
  t.file(local + "/numpy/__init__.py");
  t.extension(local + "/numpy/core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so",
              "_multiarray_umath");

  host::Host h(t.root(), {{"PATH", "/usr/local/bin:/usr/bin"}});
  Environment env = scan_environment(h, {});
  EXPECT_EQ(env.interpreter.source, InterpreterSource::PathSearch);
  EXPECT_EQ(env.python.sys_path,
            (std::vector<std::string>{"", "/usr/lib/python311.zip", "/usr/lib/python3.11",
                                      "/usr/lib/python3.11/lib-dynload", local, deb}));
  const Distribution* numpy = env.find_distribution("NumPy");
  ASSERT_NE(numpy, nullptr);
  EXPECT_EQ(numpy->version, "1.26.0");
  EXPECT_EQ(numpy->site_dir, local);
  size_t shadowed = 0;
  for (const Distribution& d : env.distributions)
    if (d.shadowed_by) {
      shadowed++;
      EXPECT_EQ(env.distributions[*d.shadowed_by].normalized_name, d.normalized_name);
      if (d.name == "numpy") {
        EXPECT_EQ(d.version, "1.24.2");
      }
      if (d.name == "cryptography") {
        EXPECT_EQ(d.format, MetadataFormat::EggInfoDir);
      }
    }
  EXPECT_EQ(shadowed, 2u);
  const Distribution* sympy = env.find_distribution("sympy");
  ASSERT_NE(sympy, nullptr);
  EXPECT_EQ(sympy->format, MetadataFormat::EggInfoFile);
  EXPECT_EQ(sympy->version, "1.11.1");

  const ImportedPackage* np = env.find_package("numpy");
  ASSERT_NE(np, nullptr);
  EXPECT_EQ(np->path, local + "/numpy");
  EXPECT_EQ(np->version, "1.26.0");
  EXPECT_EQ(np->shadowed_paths, std::vector<std::string>{deb + "/numpy"});
  ASSERT_EQ(np->extension_modules.size(), 1u);
  EXPECT_EQ(np->extension_modules[0].path,
            local + "/numpy/core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so");

  const ImportedPackage* cv2 = env.find_package("cv2");
  ASSERT_NE(cv2, nullptr);
  EXPECT_EQ(cv2->kind, ImportKind::Module);
  EXPECT_FALSE(cv2->distribution);
  ASSERT_EQ(cv2->extension_modules.size(), 1u);
  EXPECT_EQ(cv2->extension_modules[0].module, "cv2");

  // Debian's cv2 is dlopen'ed before the numpy its PyInit imports.
  std::vector<ImportStep> steps = plan_imports(env, h, {"cv2", "numpy"}).steps;
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].module, "cv2");
  EXPECT_EQ(steps[1].module, "numpy.core._multiarray_umath");
  EXPECT_EQ(steps[1].import_name, "cv2");
  EXPECT_EQ(steps[1].triggered_by, "numpy");
}

TEST(LayoutBroken, EachProblemNamedRestStillFound) {
  Tree t;
  t.elf("/usr/bin/python3.11", executable());
  t.file("/usr/lib/python3.11/os.py");
  std::string sp = "/usr/lib/python3.11/site-packages";
  t.file(sp + "/nometa-1.0.dist-info/RECORD", "");
  t.file(sp + "/noname-2.0.dist-info/METADATA", "Version: 2.0\n");
  t.file(sp + "/good-3.0.dist-info/METADATA", "Name: good\nVersion: 3.0\n");
  t.file(sp + "/numba/__init__.py");
  std::string ufunc = sp + "/numba/np/ufunc";
  t.extension(ufunc + "/omppool.cpython-311-x86_64-linux-gnu.so", "omppool");
  t.extension(ufunc + "/workqueue.cpython-311-x86_64-linux-gnu.so", "workqueue");
  t.file(ufunc + "/fake.cpython-311-x86_64-linux-gnu.so", "just text");
  test::ElfSpec reloc;
  reloc.type = 1;  // ET_REL
  t.elf(ufunc + "/object.so", reloc);
  test::ElfSpec arm;
  arm.machine = elf::EM_AARCH64;
  t.extension(ufunc + "/_internal.cpython-311-x86_64-linux-gnu.so", "_internal");
  t.elf(ufunc + "/armlib.so.1", arm);
  t.extension(ufunc + "/old.cpython-310-x86_64-linux-gnu.so", "old");
  t.extension(ufunc + "/plain.so", "plain");  // PyInit_plain: an extension
  t.elf(sp + "/numba/helper.so");             // no PyInit_helper: a library
  t.link("loop-b.so", ufunc + "/loop-a.so");
  t.link("loop-a.so", ufunc + "/loop-b.so");
  t.link("gone.so.1", ufunc + "/dangling.so");
  t.link("..", ufunc + "/cycle");  // a directory symlink back up

  host::Host h(t.root(), {});
  ScanOptions opts;
  opts.python = "/usr/bin/python3.11";
  Environment env = scan_environment(h, opts);
  EXPECT_EQ(env.python.version, "3.11");

  EXPECT_TRUE(has_problem(env, sp + "/nometa-1.0.dist-info", "METADATA: missing"))
      << problems_text(env);
  EXPECT_TRUE(has_problem(env, sp + "/noname-2.0.dist-info", "no Name"));
  ASSERT_NE(env.find_distribution("nometa"), nullptr);  // from the directory name
  EXPECT_EQ(env.find_distribution("nometa")->version, "1.0");
  ASSERT_NE(env.find_distribution("noname"), nullptr);
  ASSERT_NE(env.find_distribution("good"), nullptr);
  EXPECT_FALSE(env.find_distribution("good")->error);

  EXPECT_TRUE(has_problem(env, ufunc + "/fake.cpython-311-x86_64-linux-gnu.so", "not an ELF file"));
  EXPECT_TRUE(has_problem(env, ufunc + "/object.so", "not a shared object"));
  EXPECT_TRUE(has_problem(env, ufunc + "/armlib.so.1", "built for AArch64"));
  EXPECT_TRUE(has_problem(env, ufunc + "/old.cpython-310-x86_64-linux-gnu.so", "another Python"));
  EXPECT_TRUE(has_problem(env, ufunc + "/loop-a.so", "Too many levels of symbolic links"));
  EXPECT_TRUE(has_problem(env, ufunc + "/dangling.so", "dangling symlink to gone.so.1"));
  EXPECT_TRUE(has_problem(env, ufunc + "/cycle", "directory cycle"));

  const ImportedPackage* numba = env.find_package("numba");
  ASSERT_NE(numba, nullptr);
  std::vector<std::string> modules;
  for (const NativeFile& f : numba->extension_modules)
    if (f.loadable_by_interpreter) modules.push_back(f.module);
  // fake.cpython-311-...so is no ELF file, but import dlopen()s what is
  // named so all the same (and fails): it stays a module, for the replay.
  EXPECT_EQ(modules, (std::vector<std::string>{"numba.np.ufunc._internal", "numba.np.ufunc.fake",
                                               "numba.np.ufunc.omppool", "numba.np.ufunc.plain",
                                               "numba.np.ufunc.workqueue"}));
  std::vector<std::string> libs;
  for (const NativeFile& f : numba->libraries) libs.push_back(f.path.substr(sp.size()));
  EXPECT_EQ(libs, (std::vector<std::string>{"/numba/helper.so", "/numba/np/ufunc/armlib.so.1"}));

  // The threading layer: at first parallel use, in NUMBA_THREADING_LAYER order.
  // With tbb first in the order, numba first ctypes-loads libtbb.so.12
  // (_check_tbb_version_compatible), whether or not it has a tbbpool.
  std::vector<ImportStep> steps = plan_imports(env, h, {"numba"}).steps;
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[0].module, "numba.np.ufunc._internal");
  EXPECT_EQ(steps[1].path, "libtbb.so.12");
  EXPECT_EQ(steps[1].when, LoadTime::FirstParallelUse);
  EXPECT_EQ(steps[2].module, "numba.np.ufunc.omppool");
  EXPECT_EQ(steps[2].when, LoadTime::FirstParallelUse);
  EXPECT_EQ(steps[3].module, "numba.np.ufunc.workqueue");
  h.setenv("NUMBA_THREADING_LAYER", "workqueue");
  steps = plan_imports(env, h, {"numba"}).steps;
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[1].module, "numba.np.ufunc.workqueue");
  // numba 0.52 (Debian 11) names TBB 2020's libtbb.so.2 in parallel.py's
  // Linux branch: the name comes from there (issue 32: an LD005 in bullseye
  // for a libtbb.so.12 the real numba never asks for).
  t.file(sp + "/numba/np/ufunc/parallel.py",
         "        if _IS_WINDOWS:\n            libtbb_name = 'tbb'\n"
         "        elif _IS_LINUX:\n            libtbb_name = 'libtbb.so.2'\n");
  h.setenv("NUMBA_THREADING_LAYER", "tbb");
  steps = plan_imports(env, h, {"numba"}).steps;
  ASSERT_GE(steps.size(), 2u);
  EXPECT_EQ(steps[1].path, "libtbb.so.2");
}

// Root reads every directory: the scan runs as user 65534 (test/unit/other-user.h).
TEST(LayoutBroken, UnreadableDirectoryIsAProblem) {
  Tree t;
  t.elf("/usr/bin/python3.11", executable());
  t.file("/usr/lib/python3.11/os.py");
  std::string sp = "/usr/lib/python3.11/site-packages";
  t.file(sp + "/torch/__init__.py");
  t.elf(sp + "/torch/lib/libc10.so");
  t.elf(sp + "/torch/secret/x.so");
  ASSERT_EQ(chmod(t.at(sp + "/torch/secret").c_str(), 0), 0);
  ASSERT_EQ(chmod(t.root().c_str(), 0755), 0);
  auto check = [&]() -> std::string {
    host::Host h(t.root(), {});
    ScanOptions opts;
    opts.python = "/usr/bin/python3.11";
    Environment env = scan_environment(h, opts);
    if (!has_problem(env, sp + "/torch/secret", "cannot list"))
      return "no 'cannot list' problem for torch/secret:\n" + problems_text(env);
    if (!env.find_package("torch")) return "torch not found";
    if (env.find_package("torch")->libraries.size() != 1u) return "torch's libraries: not 1";
    return "";
  };
  std::optional<std::string> why = test::as_unprivileged_user(check);
  if (!why) GTEST_SKIP() << "cannot become user 65534";
  EXPECT_EQ(*why, "");
}

TEST(LayoutNamespace, RegularPackageLaterWinsOverNamespacePortion) {
  Tree t;
  t.elf("/usr/bin/python3.11", executable());
  t.file("/usr/lib/python3.11/os.py");
  t.dir("/usr/lib/python3.11/site-packages/triton");  // no __init__: a portion only
  t.file("/opt/b/triton/__init__.py");
  t.extension("/opt/b/triton/_C/libtriton.so", "libtriton");
  host::Host h(t.root(), {{"PYTHONPATH", "/opt/none:/opt/b"}});
  ScanOptions opts;
  opts.python = "/usr/bin/python3.11";
  // PYTHONPATH comes before site-packages; put the portion first instead.
  Environment env = scan_with_facts(h, choose_interpreter(h, opts.python), [&] {
    PythonFacts f = infer_from_layout(h, "/usr/bin/python3.11");
    f.sys_path = {"/usr/lib/python3.11/site-packages", "/opt/b"};
    return f;
  }());
  const ImportedPackage* triton = env.find_package("triton");
  ASSERT_NE(triton, nullptr);
  EXPECT_EQ(triton->kind, ImportKind::Package);
  EXPECT_EQ(triton->path, "/opt/b/triton");
  ASSERT_EQ(triton->extension_modules.size(), 1u);
  EXPECT_EQ(triton->extension_modules[0].module, "triton._C.libtriton");
}

// ─── probing: failures of the interpreter itself ────────────────────────────

namespace {
std::string probe_error(const std::string& script,
                        std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  Tree t;
  std::string path = t.at("/python");
  std::ofstream(path) << "#!/bin/sh\n" << script << "\n";
  chmod(path.c_str(), 0755);
  try {
    probe_interpreter(host::Host::live(), path, ProbeOptions{timeout});
  } catch (const ProbeTimeout& e) {
    return std::string("ProbeTimeout: ") + e.what();
  } catch (const PyenvError& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST(Probe, CrashHangExitAndGarbageAreClearErrors) {
  EXPECT_NE(probe_error("kill -SEGV $$").find("killed by signal 11"), std::string::npos);
  EXPECT_NE(probe_error("echo 'ImportError: bad .pth' >&2; exit 3")
                .find("exited with status 3 at startup: ImportError: bad .pth"),
            std::string::npos);
  EXPECT_NE(probe_error("echo hello").find("printed no answer: hello"), std::string::npos);
  EXPECT_NE(probe_error("echo '{\"mldoctor_probe\": 1}'").find("lacks a field"), std::string::npos);
  std::string hang = probe_error("exec sleep 30", std::chrono::milliseconds(300));
  EXPECT_TRUE(hang.starts_with("ProbeTimeout: ")) << hang;
  EXPECT_NE(hang.find("did not answer within 300 ms and was killed"), std::string::npos) << hang;
  hang = probe_error("exec sleep 30", std::chrono::seconds(1));
  EXPECT_NE(hang.find("did not answer within 1 s and was killed; a Python start-up waits like "
                      "this on something sitecustomize, usercustomize or a .pth file's import "
                      "line runs"),
            std::string::npos)
      << hang;
  EXPECT_NE(probe_error("").find("printed no answer"), std::string::npos);
  try {
    probe_interpreter(host::Host::live(), "/nonexistent/python3");
    FAIL();
  } catch (const PyenvError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/python3: cannot run"), std::string::npos);
  }
  EXPECT_THROW(probe_interpreter(host::Host("/tmp", {}), "/usr/bin/python3"), PyenvError);
}

TEST(Probe, ATimedOutWrapperTakesItsChildrenWithIt) {
  // A wrapper script (conda's activation, a module system) that starts a
  // child and hangs: on timeout the whole process group goes, not only the
  // shell mldoctor started.
  Tree t;
  const std::string pidfile = t.at("/child.pid");
  std::string hang =
      probe_error("sleep 60 & echo $! > " + pidfile + "; wait", std::chrono::milliseconds(500));
  EXPECT_NE(hang.find("did not answer within 500 ms and was killed"), std::string::npos) << hang;
  std::ifstream in(pidfile);
  long child = 0;
  ASSERT_TRUE(in >> child) << "the wrapper wrote its child's pid";
  // Killed and reaped by init (or a subreaper): gone within a moment.
  bool gone = false;
  for (int i = 0; i < 200 && !gone; i++) {
    gone = kill(static_cast<pid_t>(child), 0) != 0;
    if (!gone) {
      std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
      std::string text;
      std::getline(stat, text);
      gone = text.find(") Z ") != std::string::npos;  // a zombie is dead
      if (!gone) usleep(10000);
    }
  }
  EXPECT_TRUE(gone) << "the wrapper's child " << child << " outlived the probe";
  if (!gone) kill(static_cast<pid_t>(child), SIGKILL);
}

// ─── the real interpreter as oracle ─────────────────────────────────────────

namespace {
constexpr const char* kSystemPython = "/usr/bin/python3";

// Runs the real interpreter from an empty directory (so "" on sys.path, the
// current directory, holds no distributions) and parses its JSON.
nlohmann::json ask_python(const std::string& code) {
  Tree cwd;
  test::CommandResult r =
      test::run_command("cd " + cwd.root() + " && " + kSystemPython + " -c '" + code + "'");
  EXPECT_EQ(r.status, 0) << r.out;
  return nlohmann::json::parse(
      r.out.substr(r.out.rfind("\n[") == std::string::npos ? 0 : r.out.rfind("\n[") + 1));
}
}  // namespace

TEST(RealPython, FactsDistributionsAndTorchMatchTheInterpreter) {
  if (access(kSystemPython, X_OK) != 0) GTEST_SKIP() << kSystemPython << " absent";
  host::Host h = host::Host::live();
  ScanOptions opts;
  opts.python = kSystemPython;
  Environment env = scan_environment(h, opts);
  EXPECT_EQ(env.python.origin, FactsOrigin::Interpreter);

  nlohmann::json oracle = ask_python(
      "import sys, json, sysconfig, importlib.metadata as m; "
      "print(json.dumps([sys.path, list(sys.version_info[:3]), "
      "sysconfig.get_config_var(\"EXT_SUFFIX\"), "
      "[[d.metadata[\"Name\"], d.version, str(d.locate_file(\"\"))] for d in "
      "m.distributions()]]))");
  EXPECT_EQ(env.python.sys_path, oracle[0].get<std::vector<std::string>>());
  EXPECT_EQ(env.python.major, oracle[1][0].get<int>());
  EXPECT_EQ(env.python.minor, oracle[1][1].get<int>());
  EXPECT_EQ(env.python.micro, oracle[1][2].get<int>());
  EXPECT_EQ(env.python.ext_suffix, oracle[2].get<std::string>());

  std::multiset<std::string> expected, actual;
  for (const nlohmann::json& d : oracle[3]) {
    if (d[0].is_null()) continue;  // unreadable metadata: importlib says None
    expected.insert(d[0].get<std::string>() + " " + d[1].get<std::string>() + " @ " +
                    host::normalize_path(d[2].get<std::string>()));
  }
  for (const Distribution& d : env.distributions)
    if (!d.error) actual.insert(d.name + " " + d.version + " @ " + d.site_dir);
  EXPECT_EQ(actual, expected);
  RecordProperty("distributions_compared", static_cast<int>(expected.size()));

  // Layout inference of the same interpreter agrees with the interpreter.
  PythonFacts layout = infer_from_layout(h, kSystemPython);
  EXPECT_EQ(layout.sys_path, env.python.sys_path);
  EXPECT_EQ(layout.ext_suffix, env.python.ext_suffix);

  nlohmann::json torch = ask_python(
      "import json, importlib.util as u; s = u.find_spec(\"torch\"); "
      "print(json.dumps([s.origin if s else None]))");
  if (torch[0].is_null()) return;
  const ImportedPackage* pkg = env.find_package("torch");
  ASSERT_NE(pkg, nullptr);
  EXPECT_EQ(pkg->path + "/__init__.py", torch[0].get<std::string>());
  bool has_c = false;
  for (const NativeFile& f : pkg->extension_modules) has_c |= f.module == "torch._C";
  EXPECT_TRUE(has_c);
  bool has_libtorch = false;
  for (const NativeFile& f : pkg->libraries)
    has_libtorch |= f.path.substr(f.path.rfind('/') + 1).starts_with("libtorch");
  EXPECT_TRUE(has_libtorch);
}

// The predicted dlopen order (the table's steps and the import walk's alike)
// is a subsequence of what glibc reports for the real imports
// (LD_DEBUG=files), and every predicted file is really loaded.
TEST(RealPython, UsualImportSetFollowsRealDlopenOrder) {
  if (access(kSystemPython, X_OK) != 0) GTEST_SKIP() << kSystemPython << " absent";
  host::Host h = host::Host::live();
  ScanOptions opts;
  opts.python = kSystemPython;
  Environment env = scan_environment(h, opts);
  std::vector<std::string> imports;
  for (const char* name : {"torch", "numpy", "cv2", "numba"})
    if (env.find_package(name)) imports.push_back(name);
  if (imports.empty()) GTEST_SKIP() << "none of torch, numpy, cv2, numba installed";
  std::string stmt;
  for (const std::string& i : imports) stmt += (stmt.empty() ? "" : ", ") + i;
  Tree cwd;
  test::CommandResult r = test::run_command("cd " + cwd.root() + " && LD_DEBUG=files " +
                                            kSystemPython + " -c 'import " + stmt + "' 2>&1");
  ASSERT_EQ(r.status, 0) << r.out.substr(r.out.size() > 2000 ? r.out.size() - 2000 : 0);
  // "file=/path [0];  dynamically loaded by ..." marks each dlopen.
  std::vector<std::string> real;
  size_t pos = 0;
  while ((pos = r.out.find("file=", pos)) != std::string::npos) {
    size_t end = r.out.find_first_of(" \n", pos);
    size_t eol = r.out.find('\n', pos);
    std::string line = r.out.substr(pos, eol - pos);
    if (line.find("dynamically loaded by") != std::string::npos)
      real.push_back(r.out.substr(pos + 5, end - pos - 5));
    pos = eol;
  }
  std::vector<ImportStep> steps = plan_imports(env, h, imports).steps;
  ASSERT_FALSE(steps.empty());
  size_t at = 0;
  for (const ImportStep& s : steps) {
    if (s.when != LoadTime::AtImport) continue;
    auto it = std::find(real.begin() + static_cast<long>(at), real.end(), s.path);
    ASSERT_NE(it, real.end()) << s.path << " not dlopen'ed (in this order) by: import " << stmt;
    at = static_cast<size_t>(it - real.begin()) + 1;
  }
}

// The probe writes its JSON by hand (no `import json`): paths with quotes,
// backslashes, control characters, non-ASCII beyond the BMP and bytes that
// are not UTF-8 must arrive exactly as sys.path holds them.
TEST(RealPython, ProbeCarriesAwkwardPathsExactly) {
  if (access(kSystemPython, X_OK) != 0) GTEST_SKIP() << kSystemPython << " absent";
  const std::vector<std::string> awkward = {"/tmp/mld \"quoted\" \\back\\slash",
                                            "/tmp/mld-tab\there", "/tmp/mld-ünïcödé-😀",
                                            std::string("/tmp/mld-bytes-\xff\xfe")};
  std::string pythonpath;
  for (const std::string& p : awkward) pythonpath += (pythonpath.empty() ? "" : ":") + p;
  host::Host h = host::Host::live();
  h.setenv("PYTHONPATH", pythonpath);
  PythonFacts f = probe_interpreter(h, kSystemPython);
  for (const std::string& p : awkward)
    EXPECT_NE(std::find(f.sys_path.begin(), f.sys_path.end(), p), f.sys_path.end()) << p;
}

// site.py opens every .pth file of a site directory at start-up, and a FIFO
// stops it there until something writes. The probe runs site itself with
// such files skipped: the real interpreter answers at once, names the FIFO,
// and still runs the other .pth files (their directories are on sys.path).
TEST(RealPython, AFifoPthIsNamedNotWaitedOn) {
  if (access(kSystemPython, X_OK) != 0) GTEST_SKIP() << kSystemPython << " absent";
  Tree home;
  nlohmann::json v = ask_python("import sys, json; print(json.dumps(list(sys.version_info[:2])))");
  const std::string xy = std::to_string(v[0].get<int>()) + "." + std::to_string(v[1].get<int>());
  const std::string user_site = "/.local/lib/python" + xy + "/site-packages";
  home.file(user_site + "/aa.pth", "extra\n");
  home.dir(user_site + "/extra");
  ASSERT_EQ(mkfifo(home.at(user_site + "/zz.pth").c_str(), 0644), 0);
  host::Host h = host::Host::live();
  h.setenv("HOME", home.root());
  h.unsetenv("PYTHONNOUSERSITE");
  PythonFacts f = probe_interpreter(h, kSystemPython, ProbeOptions{std::chrono::seconds(60)});
  ASSERT_EQ(f.unread_pth.size(), 1u);
  EXPECT_EQ(f.unread_pth[0].path, home.at(user_site + "/zz.pth"));
  EXPECT_EQ(f.unread_pth[0].what,
            "not a regular file (a FIFO): not read; site.py waits on it at every start-up of "
            "this Python until something writes to it");
  EXPECT_NE(std::find(f.sys_path.begin(), f.sys_path.end(), home.at(user_site + "/extra")),
            f.sys_path.end());
}

// An interpreter that never answers is killed at the timeout, and what its
// layout says is still described (a venv here), with why it came from there.
TEST(Probe, TimedOutInterpreterIsDescribedFromItsLayout) {
  if (access(kSystemPython, X_OK) != 0) GTEST_SKIP() << kSystemPython << " absent";
  nlohmann::json v = ask_python("import sys, json; print(json.dumps(list(sys.version_info[:3])))");
  const std::string xy = std::to_string(v[0].get<int>()) + "." + std::to_string(v[1].get<int>());
  Tree venv;
  const std::string python = venv.at("/bin/python");
  venv.file("/bin/python", "#!/bin/sh\nexec sleep 60\n");
  chmod(python.c_str(), 0755);
  venv.file("/pyvenv.cfg",
            "home = /usr/bin\ninclude-system-site-packages = false\nversion = " + xy + ".0\n");
  const std::string sp = "/lib/python" + xy + "/site-packages";
  venv.file(sp + "/good-1.0.dist-info/METADATA", "Name: good\nVersion: 1.0\n");
  ScanOptions opts;
  opts.python = python;
  opts.probe.timeout = std::chrono::milliseconds(500);
  Environment env = scan_environment(host::Host::live(), opts);
  EXPECT_EQ(env.python.origin, FactsOrigin::Layout);
  EXPECT_EQ(env.python.prefix, venv.root());
  EXPECT_NE(env.python.probe_error.find(python + ": the interpreter did not answer within 500 ms "
                                                 "and was killed"),
            std::string::npos)
      << env.python.probe_error;
  ASSERT_NE(env.find_distribution("good"), nullptr);
  // Without a layout to fall back on, the timeout is the error.
  Tree bare;
  bare.file("/python", "#!/bin/sh\nexec sleep 60\n");
  chmod(bare.at("/python").c_str(), 0755);
  opts.python = bare.at("/python");
  try {
    scan_environment(host::Host::live(), opts);
    ADD_FAILURE() << "no error";
  } catch (const ProbeTimeout& e) {
    EXPECT_NE(std::string(e.what()).find("nor does its layout describe it"), std::string::npos)
        << e.what();
  }
}

TEST(Probe, AnswerAfterNoiseAndMalformedAnswers) {
  const std::string good =
      "{\"mldoctor_probe\":1,\"version_info\":[3,11,2,\"final\"],\"executable\":\"/usr/bin/"
      "python3\","
      "\"prefix\":\"/usr\",\"base_prefix\":\"/usr\",\"path\":[\"\",{\"hex\":\"2f746d702fff\"}],"
      "\"ext_suffix\":\".cpython-311-x86_64-linux-gnu.so\",\"soabi\":\"cpython-311-x86_64-linux-"
      "gnu\","
      "\"platform\":\"linux-x86_64\"}";
  PythonFacts f = parse_probe_answer("a .pth file printed this\n" + good, "py: ");
  EXPECT_EQ(f.version, "3.11.2");
  ASSERT_EQ(f.sys_path.size(), 2u);
  EXPECT_EQ(f.sys_path[1], std::string("/tmp/\xff"));
  EXPECT_EQ(f.machine, "x86_64");
  EXPECT_THROW(parse_probe_answer("{\"mldoctor_probe\":1,\"version_info\":[3]}", "py: "),
               PyenvError);
  EXPECT_THROW(parse_probe_answer(good.substr(0, good.size() / 2), "py: "), PyenvError);
  EXPECT_THROW(parse_probe_answer("{\"mldoctor_probe\":1,\"path\":[{\"hex\":\"zz\"}]}", "py: "),
               PyenvError);
}

// A version number that is not an integer fitting an int is refused, not
// converted: get<int>() of 1e99 was undefined behaviour (found by pyenv-fuzz,
// test/fuzz/corpus/pyenv/version-float-out-of-range.json).
TEST(Probe, VersionNumbersAreIntegersThatFitAnInt) {
  for (const char* micro :
       {"1e99", "2.5", "-1", "2147483648", "18446744073709551615", "\"2\"", "null"}) {
    std::string answer = std::string("{\"mldoctor_probe\":1,\"version_info\":[3,11,") + micro +
                         ",\"final\"],\"executable\":\"/usr/bin/python3\",\"prefix\":\"/usr\","
                         "\"base_prefix\":\"/usr\",\"path\":[],\"ext_suffix\":\"\",\"soabi\":\"\","
                         "\"platform\":\"linux-x86_64\"}";
    EXPECT_THROW(parse_probe_answer(answer, "py: "), PyenvError) << micro;
  }
  PythonFacts f = parse_probe_answer(
      "{\"mldoctor_probe\":1,\"version_info\":[3,11,2147483647,\"final\"],\"executable\":\"\","
      "\"prefix\":\"\","
      "\"base_prefix\":\"\",\"path\":[],\"ext_suffix\":\"\",\"soabi\":\"\",\"platform\":\"linux\"}",
      "py: ");
  EXPECT_EQ(f.version, "3.11.2147483647");
}

// A package the table does not know: its modules as the import system
// finds them (RECORD or not), those its imports reach where they reach them,
// then the others; RECORD's odd entries noted; a name that loads nothing
// listed with the reason, never dropped.
TEST(ImportPlan, UnknownPackageFromTreeInImportOrder) {
  Tree t;
  t.elf("/usr/bin/python3.11", executable());
  t.file("/usr/lib/python3.11/os.py");
  const std::string sp = "/usr/lib/python3.11/site-packages";
  const std::string ext = ".cpython-311-x86_64-linux-gnu.so";
  t.file(sp + "/pkg/__init__.py",
         "from . import _version\nfrom ._zeta import z\nfrom ._core import *\n");
  t.extension(sp + "/pkg/_core" + ext, "_core");
  t.extension(sp + "/pkg/_alpha" + ext, "_alpha");
  t.extension(sp + "/pkg/_zeta" + ext, "_zeta");
  t.extension(sp + "/pkg/ops/_deep" + ext, "_deep");
  t.extension(sp + "/pkg/_unlisted" + ext, "_unlisted");  // not in RECORD: replayed all the same
  t.elf(sp + "/pkg.libs/libgomp-1a2b3c4d.so.1");
  t.file(sp + "/pkg-1.0.dist-info/METADATA", "Name: pkg\nVersion: 1.0\n");
  t.file(sp + "/pkg-1.0.dist-info/top_level.txt", "pkg\n");
  t.file(sp + "/pkg-1.0.dist-info/RECORD",
         "pkg/__init__.py,,\npkg/_core" + ext + ",,\npkg/_alpha" + ext + ",,\npkg/_zeta" + ext +
             ",,\npkg/ops/_deep" + ext + ",,\npkg.libs/libgomp-1a2b3c4d.so.1,,\n" + "pkg/_gone" +
             ext + ",,\n/etc/evil.so,,\n../../../x/outside.so,,\n" +
             "pkg-1.0.dist-info/RECORD,,\n");
  // Pure Python, and a dist-info without RECORD.
  t.file(sp + "/purepy/__init__.py");
  t.file(sp + "/norec/__init__.py");
  t.extension(sp + "/norec/_n" + ext, "_n");
  t.file(sp + "/norec-2.0.dist-info/METADATA", "Name: norec\nVersion: 2.0\n");
  t.file(sp + "/norec-2.0.dist-info/top_level.txt", "norec\n");

  host::Host h(t.root(), {});
  ScanOptions opts;
  opts.python = "/usr/bin/python3.11";
  opts.packages = {"pkg", "purepy", "norec", "nosuchpkg"};
  Environment env = scan_environment(h, opts);

  const ImportedPackage* pkg = env.find_package("pkg");
  ASSERT_NE(pkg, nullptr);
  EXPECT_EQ(pkg->distribution, std::optional<std::string>("pkg"));
  ASSERT_EQ(pkg->libraries.size(), 1u);
  EXPECT_EQ(pkg->libraries[0].path, sp + "/pkg.libs/libgomp-1a2b3c4d.so.1");
  EXPECT_TRUE(has_problem(env, sp + "/pkg/_gone" + ext, "listed in pkg's RECORD but missing"))
      << problems_text(env);
  EXPECT_TRUE(has_problem(env, sp + "/pkg-1.0.dist-info/RECORD", "/etc/evil.so"));
  EXPECT_TRUE(has_problem(env, sp + "/pkg-1.0.dist-info/RECORD", "outside.so"));
  EXPECT_TRUE(has_problem(env, sp + "/pkg/_unlisted" + ext,
                          "extension module pkg._unlisted is not in pkg's RECORD"))
      << problems_text(env);
  ASSERT_NE(env.find_package("norec"), nullptr);
  EXPECT_EQ(env.find_package("norec")->extension_modules.size(), 1u);
  // The runtime it vendors puts it in check's default import set.
  const Distribution* d = env.find_distribution("pkg");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->runtime_files, std::vector<std::string>{sp + "/pkg.libs/libgomp-1a2b3c4d.so.1"});
  std::vector<std::string> defaults = default_imports(env);
  EXPECT_NE(std::find(defaults.begin(), defaults.end(), "pkg"), defaults.end());

  ImportPlan plan = plan_imports(env, h, {"pkg", "purepy", "norec", "nosuchpkg"});
  std::vector<std::string> modules;
  for (const ImportStep& s : plan.steps) {
    modules.push_back(s.module);
    EXPECT_EQ(s.source, StepSource::Inferred) << s.module;
  }
  EXPECT_EQ(modules, (std::vector<std::string>{"pkg._zeta", "pkg._core", "pkg._alpha",
                                               "pkg._unlisted", "pkg.ops._deep", "norec._n"}));
  EXPECT_EQ(plan.steps[0].note, "inferred: imported at pkg/__init__.py:2");
  EXPECT_EQ(plan.steps[1].note, "inferred: imported at pkg/__init__.py:3");
  EXPECT_NE(plan.steps[2].note.find("no module-level import reaches it"), std::string::npos);
  ASSERT_EQ(plan.unresolved.size(), 2u);
  EXPECT_EQ(plan.unresolved[0].import_name, "purepy");
  EXPECT_NE(plan.unresolved[0].reason.find("no native module"), std::string::npos);
  EXPECT_EQ(plan.unresolved[1].import_name, "nosuchpkg");
  EXPECT_NE(plan.unresolved[1].reason.find("not found"), std::string::npos);
}

// Two distributions installed over one import name: the report says so.
TEST(ImportPlan, TwoDistributionsClaimingOneNameAreNoted) {
  Tree t;
  t.elf("/usr/bin/python3.11", executable());
  t.file("/usr/lib/python3.11/os.py");
  const std::string sp = "/usr/lib/python3.11/site-packages";
  t.file(sp + "/cv2/__init__.py");
  t.extension(sp + "/cv2/cv2.abi3.so", "cv2");
  for (std::string dist : {"opencv_python-4.8.1.78", "opencv_python_headless-4.8.1.78"}) {
    std::string name = dist.substr(0, dist.find('-'));
    t.file(sp + "/" + dist + ".dist-info/METADATA", "Name: " + name + "\nVersion: 4.8.1.78\n");
    t.file(sp + "/" + dist + ".dist-info/top_level.txt", "cv2\n");
  }
  host::Host h(t.root(), {});
  ScanOptions opts;
  opts.python = "/usr/bin/python3.11";
  Environment env = scan_environment(h, opts);
  EXPECT_TRUE(has_problem(env, sp + "/cv2", "claimed by two distributions")) << problems_text(env);
  ASSERT_NE(env.find_package("cv2"), nullptr);
  ASSERT_EQ(plan_imports(env, h, {"cv2"}).steps.size(), 1u);
}

// ─── python-imports.cc ──────────────────────────────────────────────────────

std::vector<std::string> imported(std::string_view src) {
  std::vector<std::string> out;
  for (const ImportStatement& s : module_level_imports(src)) {
    std::string t = std::string(s.level, '.') + s.module;
    if (!s.names.empty()) {
      t += " :";
      for (const std::string& n : s.names) t += " " + n;
    }
    out.push_back(t + " @" + std::to_string(s.line));
  }
  return out;
}

TEST(PythonImports, StatementsPythonRunsAtImport) {
  const char* src = R"py("""Docstring.
import not_this
"""
import os, sys as system
from . import _C
from .ops._impl import (
    fast,   # a comment: import nope
    slow as s,
)
from .. import up
import a.b.c as abc; import d
x = "import in_a_string"; y = 'from q import r'
try:
    import optional_dep
except ImportError:
    optional_dep = None
if TYPE_CHECKING:
    import typing_only
else:
    import runtime_branch
def f():
    import in_def
    class K:
        import in_def_class
class C:
    import in_class_body
    def m(self):
        import in_method
from x.y \
    import z
try: import inline_try
except Exception: pass
def g(): import inline_def
async def h():
    import in_async
match = 3
print(r'''import raw_triple''', "it's")
	import tabbed_after_def_is_not_module_level_but_counts
import after_all
)py";
  EXPECT_EQ(imported(src), (std::vector<std::string>{
                               "os @4",
                               "sys @4",
                               ". : _C @5",
                               ".ops._impl : fast slow @6",
                               ".. : up @10",
                               "a.b.c @11",
                               "d @11",
                               "optional_dep @14",
                               "runtime_branch @20",
                               "in_class_body @26",
                               "x.y : z @29",
                               "inline_try @31",
                               "tabbed_after_def_is_not_module_level_but_counts @38",
                               "after_all @39",
                           }))
      << ::testing::PrintToString(imported(src));
}

// Not Python at all, or broken Python: no crash, nothing invented.
TEST(PythonImports, BrokenSourceYieldsNothingWrong) {
  EXPECT_TRUE(imported("").empty());
  EXPECT_TRUE(imported(std::string("\0\xff\xfe import", 10)).empty());
  EXPECT_EQ(imported("s = 'unterminated\nimport real\n"), (std::vector<std::string>{"real @2"}));
  EXPECT_EQ(imported("from import x\nfrom 3x import y\nimport 9a\nfrom . import\nimport ok\n"),
            (std::vector<std::string>{". @4", "ok @5"}));
  EXPECT_TRUE(imported("f(\nimport never_closed\n").empty());
  // A backslash before a lone '\r' is no line break: lines count '\n' only
  // (found by python-imports-fuzz).
  EXPECT_EQ(imported("import a \\\r, b\nimport c\n"),
            (std::vector<std::string>{"a @1", "b @1", "c @2"}));
}

// A CPython 3.11 tree: the interpreter, a standard library, site-packages.
struct Python311Tree {
  Tree t;
  const std::string sp = "/usr/lib/python3.11/site-packages";
  const std::string ext = ".cpython-311-x86_64-linux-gnu.so";
  Python311Tree() {
    t.elf("/usr/bin/python3.11", executable());
    t.file("/usr/lib/python3.11/os.py");
  }
  // site-packages files: "x/y.py" (or __init__.py) with its source, or
  // "x/_m" alone: the extension module x/_m<ext>.
  void site(const std::vector<std::pair<std::string, std::string>>& files) {
    for (const auto& [rel, source] : files)
      if (rel.ends_with(".py"))
        t.file(sp + "/" + rel, source);
      else
        t.extension(sp + "/" + rel + ext, rel.substr(rel.rfind('/') + 1));
  }
  host::Host host() const { return host::Host(t.root(), {}); }
  // The scan with `app` named (what it imports is found through it).
  Environment scan_app(const host::Host& h, std::vector<std::string> packages = {"app"}) const {
    ScanOptions opts;
    opts.python = "/usr/bin/python3.11";
    opts.packages = std::move(packages);
    return scan_environment(h, opts);
  }
  // The import plan of `import app`.
  ImportPlan plan_app() const {
    host::Host h = host();
    return plan_imports(scan_app(h), h, {"app"});
  }
};

// The walk: other packages where they are imported, own extension modules
// where reached, relative imports resolved from the right package, a cycle
// ended, a def body not followed; the packages it imports are examined.
TEST(ImportPlan, ImportWalkOrdersPackagesAndModulesAsPythonRunsThem) {
  Python311Tree py;
  Tree& t = py.t;
  const std::string& sp = py.sp;
  const std::string& ext = py.ext;
  t.file(sp + "/dep/__init__.py", "from dep import _native\n");
  t.extension(sp + "/dep/_native" + ext, "_native");
  t.file(sp + "/dep-1.0.dist-info/METADATA", "Name: dep\nVersion: 1.0\n");
  t.file(sp + "/dep-1.0.dist-info/top_level.txt", "dep\n");
  t.file(sp + "/dep-1.0.dist-info/RECORD", "dep/__init__.py,,\ndep/_native" + ext + ",,\n");
  t.file(sp + "/app/__init__.py",
         "import os\nfrom .sub import thing\nimport dep\nfrom app import _late\n"
         "def lazy():\n    from . import _lazy\n");
  t.file(sp + "/app/sub/__init__.py", "from .mod import x\n");
  t.file(sp + "/app/sub/mod.py", "from .. import _first\nimport app.sub  # a cycle\n");
  t.extension(sp + "/app/_first" + ext, "_first");
  t.extension(sp + "/app/_late" + ext, "_late");
  t.extension(sp + "/app/_lazy" + ext, "_lazy");
  t.file(sp + "/app-2.0.dist-info/METADATA", "Name: app\nVersion: 2.0\n");
  t.file(sp + "/app-2.0.dist-info/top_level.txt", "app\n");
  t.file(sp + "/app-2.0.dist-info/RECORD", "app/__init__.py,,\napp/_first" + ext + ",,\napp/_late" +
                                               ext + ",,\napp/_lazy" + ext + ",,\n");
  host::Host h = py.host();
  Environment env = py.scan_app(h);  // dep is found through app's import of it
  const ImportedPackage* app = env.find_package("app");
  ASSERT_NE(app, nullptr);
  ASSERT_NE(env.find_package("dep"), nullptr) << problems_text(env);
  std::vector<std::string> events;
  std::vector<ScanProblem> walk_problems;
  for (const ImportEvent& e : import_events(h, *app, walk_problems))
    events.push_back((e.kind == ImportEvent::Kind::Package ? "package " : "module ") + e.name +
                     " at " + e.via);
  EXPECT_EQ(events,
            (std::vector<std::string>{
                "package os at app/__init__.py:1", "module app._first at app/sub/mod.py:1",
                "package dep at app/__init__.py:3", "module app._late at app/__init__.py:4"}));

  ImportPlan plan = plan_imports(env, h, {"app"});
  std::vector<std::string> modules;
  for (const ImportStep& s : plan.steps) modules.push_back(s.module);
  EXPECT_EQ(modules,
            (std::vector<std::string>{"app._first", "dep._native", "app._late", "app._lazy"}));
  EXPECT_EQ(plan.steps[1].triggered_by, "dep");
  EXPECT_EQ(plan.steps[1].import_name, "app");
  EXPECT_NE(plan.steps[3].note.find("no module-level import reaches it"), std::string::npos);
  EXPECT_TRUE(plan.unresolved.empty());
}

// The import system across packages (issue 32): `from dep.sparse import m`
// enters dep, then dep.sparse, whose own imports reach a package no
// distribution names; a namespace package split over two sys.path entries
// (one added by a .pth file); an extension module before a .py of the same
// name, as FileFinder orders them; an extension for another Python skipped.
// Packages reached only through imports are examined, and only the modules
// the imports reach are replayed for them.
TEST(ImportSystem, FollowsImportsIntoOtherPackagesAsPythonDoes) {
  Python311Tree py;
  py.t.file(py.sp + "/extra.pth", "/opt/extra\n");
  py.t.file(py.sp + "/app/__init__.py",
            "from app import _both\nfrom dep.sparse import m\nimport nsp.part\nfrom . import _old\n"
            "import os\n");
  py.t.extension(py.sp + "/app/_both" + py.ext, "_both");
  py.t.file(py.sp + "/app/_both.py", "import never_this\n");
  py.t.extension(py.sp + "/app/_old.cpython-310-x86_64-linux-gnu.so", "_old");
  py.t.file(py.sp + "/app-1.0.dist-info/METADATA", "Name: app\nVersion: 1.0\n");
  py.t.file(py.sp + "/dep/__init__.py", "from . import _core\n");
  py.t.extension(py.sp + "/dep/_core" + py.ext, "_core");
  py.t.extension(py.sp + "/dep/_unused" + py.ext, "_unused");
  py.t.file(py.sp + "/dep/sparse/__init__.py", "from ._sp import x\nimport deeper\n");
  py.t.extension(py.sp + "/dep/sparse/_sp" + py.ext, "_sp");
  py.t.file(py.sp + "/deeper/__init__.py", "from deeper import _d\n");
  py.t.extension(py.sp + "/deeper/_d" + py.ext, "_d");
  py.t.file(py.sp + "/nsp/part.py", "import nsp._nat\n");
  py.t.extension("/opt/extra/nsp/_nat" + py.ext, "_nat");

  host::Host h = py.host();
  Environment env = py.scan_app(h);
  for (const char* name : {"dep", "deeper", "nsp"}) {
    const ImportedPackage* p = env.find_package(name);
    ASSERT_NE(p, nullptr) << name << "\n" << problems_text(env);
    EXPECT_TRUE(p->reached_by_imports) << name;
  }
  EXPECT_EQ(env.find_package("nsp")->kind, ImportKind::Namespace);
  EXPECT_FALSE(env.find_package("app")->reached_by_imports);
  EXPECT_EQ(env.find_package("os"), nullptr);  // the standard library is not followed

  ImportPlan plan = plan_imports(env, h, {"app"});
  std::vector<std::string> modules;
  for (const ImportStep& s : plan.steps) modules.push_back(s.module + " by " + s.triggered_by);
  EXPECT_EQ(modules, (std::vector<std::string>{"app._both by app", "dep._core by dep",
                                               "dep.sparse._sp by dep", "deeper._d by deeper",
                                               "nsp._nat by nsp"}))
      << ::testing::PrintToString(modules);
  ASSERT_EQ(plan.steps.size(), 5u);
  EXPECT_EQ(plan.steps[2].note, "inferred: imported at dep/sparse/__init__.py:1");
  EXPECT_EQ(plan.steps[3].note, "inferred: imported at deeper/__init__.py:1");
  EXPECT_EQ(plan.steps[4].path, "/opt/extra/nsp/_nat" + py.ext);
  for (const ImportStep& s : plan.steps) EXPECT_EQ(s.import_name, "app");
}

// `from pkg import *` imports the submodules pkg.__all__ names, as
// importlib's _handle_fromlist does, even when __all__ is computed (numpy 2's
// is a set union naming "f2py": sklearn reaches charset_normalizer that way);
// a package without __all__ imports no submodule by `*`.
TEST(ImportSystem, StarImportLoadsTheSubmodulesAllNames) {
  Python311Tree py;
  py.site({{"app/__init__.py", "from lib import *\nfrom plain import *\n"},
           {"lib/__init__.py", "_subs = {'tool', \"other\"}\n__all__ = list(_subs | set(['x']))\n"},
           {"lib/tool/__init__.py", "import helper\n"},
           {"lib/_never", ""},
           {"lib/other", ""},
           {"helper/__init__.py", "from . import _h\n"},
           {"helper/_h", ""},
           {"plain/__init__.py", "x = 1\n"},
           {"plain/_not_star", ""}});

  std::vector<std::string> modules;
  for (const ImportStep& s : py.plan_app().steps)
    if (s.when == LoadTime::AtImport) modules.push_back(s.module);
  EXPECT_EQ(modules, (std::vector<std::string>{"helper._h", "lib.other"}))
      << ::testing::PrintToString(modules);
}

// A dynamic import with a literal name at module level is followed: scipy's
// array_api_compat in Debian unstable does `__all__ = clone_module("numpy",
// globals())`, where clone_module runs importlib.import_module(mod_name) and
// exec(f"from {mod.__name__} import *"): numpy, then the submodules its
// __all__ names. A function that does not import its argument, a call inside
// a def, and a computed name add nothing.
TEST(ImportSystem, LiteralDynamicImportsAndImportHelpersFollowed) {
  Python311Tree py;
  py.site({{"app/__init__.py",
            "from ._internal import clone_module, plain\n"
            "import importlib\n"
            "__all__ = clone_module(\"lib\", globals())\n"
            "x = plain('notthis')\n"
            "importlib.import_module('direct'); __import__(\"dunder\")\n"
            "importlib.import_module(name_of_it)\n"
            "def later():\n    importlib.import_module('deferred')\n"
            "from . import mod2\n"},
           {"app/_internal.py",
            "import importlib\n"
            "def clone_module(mod_name: str, globals_: dict[str, object]) -> list[str]:\n"
            "    \"\"\"Import everything from module.\"\"\"\n"
            "    mod = importlib.import_module(mod_name)\n"
            "    objs = {}\n"
            "    exec(f\"from {mod.__name__} import *\", objs)\n"
            "    return list(objs)\n"
            "def plain(name):\n    return name.upper()\n"
            "def load(m): return __import__(m)\n"},
           {"app/mod2.py", "from ._internal import load\nload('viahelper')\n"},
           {"lib/__init__.py", "__all__ = ['sub']\n"},
           {"lib/sub/__init__.py", "from . import _s\n"},
           {"lib/sub/_s", ""},
           {"notthis/__init__.py", "from . import _n\n"},
           {"notthis/_n", ""},
           {"direct/_d", ""},
           {"direct/__init__.py", "from . import _d\n"},
           {"dunder/__init__.py", "from . import _u\n"},
           {"dunder/_u", ""},
           {"deferred/__init__.py", "from . import _x\n"},
           {"deferred/_x", ""},
           {"viahelper/__init__.py", "from . import _v\n"},
           {"viahelper/_v", ""}});
  std::vector<std::string> modules;
  for (const ImportStep& s : py.plan_app().steps)
    if (s.when == LoadTime::AtImport) modules.push_back(s.module);
  EXPECT_EQ(modules,
            (std::vector<std::string>{"lib.sub._s", "direct._d", "dunder._u", "viahelper._v"}))
      << ::testing::PrintToString(modules);
}

// The table adds what no import statement shows, around the walk's loads:
// torch's ctypes load right before torch._C wherever the walk reaches it,
// numpy after torch._C's PyInit; numba's threading layer only at first use,
// even when a module-level import names it.
TEST(ImportSystem, TableStepsAnchoredToTheWalk) {
  Python311Tree py;
  py.site({{"torch/__init__.py", "from torch import _utils\nfrom torch._C import *\n"},
           {"torch/_utils.py", "from torch import _first\n"},
           {"torch/_first", ""},
           {"torch/_C", ""},
           {"numpy/__init__.py", "from numpy.core import _multiarray_umath\n"},
           {"numpy/core/_multiarray_umath", ""},
           {"numba/__init__.py", "import numba.np.ufunc.omppool\nfrom numba import _helperlib\n"},
           {"numba/_helperlib", ""},
           {"numba/np/ufunc/omppool", ""}});
  py.t.elf(py.sp + "/torch/lib/libtorch_global_deps.so");
  host::Host h = py.host();
  // numpy: a table import, not a statement
  Environment env = py.scan_app(h, {"torch", "numba", "numpy"});
  ImportPlan plan = plan_imports(env, h, {"torch", "numba"});
  std::vector<std::string> steps;
  for (const ImportStep& s : plan.steps)
    steps.push_back((s.module.empty() ? std::string(base_name(s.path)) : s.module) +
                    (s.when == LoadTime::AtImport ? "" : " (first parallel call)"));
  EXPECT_EQ(steps, (std::vector<std::string>{"torch._first", "libtorch_global_deps.so", "torch._C",
                                             "numpy.core._multiarray_umath", "numba._helperlib",
                                             "libtbb.so.12 (first parallel call)",
                                             "numba.np.ufunc.omppool (first parallel call)"}))
      << ::testing::PrintToString(steps);
}

// A RECORD that leaves out the extension module (an in-place build) and
// lists paths that climb out with "..", an absolute path and a file that is
// not there: the module is replayed all the same, each entry is named, and
// nothing is read through ".." (the FIFO it names would be refused, or
// would block, if it were opened).
TEST(ImportSystem, RecordOmissionsAndEscapesNamedNeverFollowed) {
  alarm(20);
  Tree t;
  t.elf("/usr/bin/python3.11", executable());
  t.file("/usr/lib/python3.11/os.py");
  const std::string sp = "/usr/lib/python3.11/site-packages";
  const std::string ext = ".cpython-311-x86_64-linux-gnu.so";
  t.file(sp + "/inplace/__init__.py", "from ._omp import f\n");
  t.extension(sp + "/inplace/_omp" + ext, "_omp");
  t.elf(sp + "/inplace.libs/libgomp-0a1b2c3d.so.1");
  t.file(sp + "/inplace-0.1.dist-info/METADATA", "Name: inplace\nVersion: 0.1\n");
  t.file(sp + "/inplace-0.1.dist-info/RECORD",
         "inplace/__init__.py,,\ninplace/gone.py,,\ninplace/../../escape.so,,\n"
         "../../../../etc/libgomp.so.1,,\n/abs/lib.so,,\ninplace.libs/libgomp-0a1b2c3d.so.1,,\n");
  t.dir("/usr/lib/python3.11");
  ASSERT_EQ(mkfifo(t.at("/usr/lib/python3.11/escape.so").c_str(), 0644), 0);
  host::Host h(t.root(), {});
  ScanOptions opts;
  opts.python = "/usr/bin/python3.11";
  opts.packages = {"inplace"};
  Environment env = scan_environment(h, opts);
  const std::string record = sp + "/inplace-0.1.dist-info/RECORD";
  EXPECT_TRUE(has_problem(env, sp + "/inplace/_omp" + ext,
                          "extension module inplace._omp is not in inplace's RECORD"))
      << problems_text(env);
  EXPECT_TRUE(has_problem(env, sp + "/inplace/gone.py", "listed in inplace's RECORD but missing"));
  EXPECT_TRUE(has_problem(
      env, record,
      "lists inplace/../../escape.so, a path with \"..\" (/usr/lib/python3.11/escape.so)"));
  EXPECT_TRUE(has_problem(env, record, "lists ../../../../etc/libgomp.so.1, a path with \"..\""));
  EXPECT_TRUE(has_problem(env, record, "lists /abs/lib.so, an absolute path"));
  for (const host::RefusedFile& f : h.refused_files())
    EXPECT_EQ(f.path.find("escape"), std::string::npos) << f.path;
  ImportPlan plan = plan_imports(env, h, {"inplace"});
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].module, "inplace._omp");
  EXPECT_EQ(plan.steps[0].note, "inferred: imported at inplace/__init__.py:1");
  ASSERT_NE(env.find_package("inplace"), nullptr);
  EXPECT_EQ(paths_of(env.find_package("inplace")->libraries),
            std::vector<std::string>{sp + "/inplace.libs/libgomp-0a1b2c3d.so.1"});
  alarm(0);
}

// ─── pyenv shims (interpreter.cc) ───────────────────────────────────────────

namespace {

// The shim pyenv-rehash writes (pyenv 2.x), naming its root.
std::string pyenv_shim_text(const std::string& root) {
  return "#!/usr/bin/env bash\nset -e\n[ -n \"$PYENV_DEBUG\" ] && set -x\n\n"
         "program=\"${0##*/}\"\n\nexport PYENV_ROOT=\"" +
         root + "\"\nexec \"" + root + "/libexec/pyenv\" exec \"$program\" \"$@\"\n";
}

void executable_file(const Tree& t, const std::string& p) {
  t.elf(p, executable());
  chmod(t.at(p).c_str(), 0755);
}

}  // namespace

TEST(PyenvShim, VersionChosenAsPyenvChoosesIt) {
  Tree t;
  t.file("/opt/pyenv/shims/python3", pyenv_shim_text("/opt/pyenv"));
  for (const char* v : {"3.11.7", "3.10.4", "3.10.13"})
    executable_file(t, std::string("/opt/pyenv/versions/") + v + "/bin/python3");
  t.dir("/opt/pyenv/versions/3.12.0/bin");  // installed without a python3
  t.file("/opt/pyenv/version", "# the global version\n\n  3.11.7 ignored words\n3.10.4\n");
  executable_file(t, "/usr/bin/python3");
  host::Host h(t.root(), {{"PATH", "/opt/pyenv/shims:/usr/bin"}, {"PYENV_ROOT", "/elsewhere"}});

  std::optional<PyenvShim> s = read_pyenv_shim(h, "/opt/pyenv/shims/python3");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->pyenv_root, "/opt/pyenv");  // the shim's own export wins
  EXPECT_EQ(s->program, "python3");
  EXPECT_EQ(s->target, "/opt/pyenv/versions/3.11.7/bin/python3");
  EXPECT_EQ(s->version, "3.11.7");
  EXPECT_EQ(s->version_origin, "/opt/pyenv/version");

  struct Case {
    const char* pyenv_version;
    const char* target;  // nullptr: none
    const char* version;
  };
  for (Case c :
       {Case{"3.10", "/opt/pyenv/versions/3.10.13/bin/python3", "3.10.13"},  // newest 3.10.x
        Case{"python-3.10.4", "/opt/pyenv/versions/3.10.4/bin/python3", "3.10.4"},
        Case{"3.9.1:3.10.4", "/opt/pyenv/versions/3.10.4/bin/python3", "3.10.4"},
        Case{"3.12.0", "/usr/bin/python3", "system"},  // no python3 there: system's
        Case{"system", "/usr/bin/python3", "system"},
        Case{"3.9.1", "/usr/bin/python3", "system"}}) {
    h.setenv("PYENV_VERSION", c.pyenv_version);
    s = read_pyenv_shim(h, "/opt/pyenv/shims/python3");
    ASSERT_TRUE(s);
    EXPECT_EQ(s->target, c.target) << c.pyenv_version;
    EXPECT_EQ(s->version, c.version) << c.pyenv_version;
    EXPECT_EQ(s->version_origin, "$PYENV_VERSION");
  }
  // Nothing anywhere: the error pyenv gives.
  h.setenv("PATH", "/opt/pyenv/shims");
  h.setenv("PYENV_VERSION", "3.9.1");
  s = read_pyenv_shim(h, "/opt/pyenv/shims/python3");
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->target);
  EXPECT_EQ(s->error,
            "pyenv: python3: command not found; version `3.9.1' is not installed (set by "
            "$PYENV_VERSION)");
  // Not shims: an interpreter, a script of something else, a directory.
  EXPECT_FALSE(read_pyenv_shim(h, "/usr/bin/python3"));
  t.file("/usr/bin/other", "#!/bin/sh\nexec /usr/bin/python3 \"$@\"\n");
  EXPECT_FALSE(read_pyenv_shim(h, "/usr/bin/other"));
  EXPECT_FALSE(read_pyenv_shim(h, "/opt/pyenv/versions"));
}

// Under --root a shim on PATH is described by the interpreter pyenv would
// run, and the report says how it was chosen.
TEST(PyenvShim, LayoutOfTheVersionTheShimRuns) {
  Tree t;
  t.file("/root/.pyenv/shims/python3", pyenv_shim_text("/root/.pyenv"));
  t.file("/root/.pyenv/version", "3.11.7\n");
  executable_file(t, "/root/.pyenv/versions/3.11.7/bin/python3.11");
  t.link("python3.11", "/root/.pyenv/versions/3.11.7/bin/python3");
  t.file("/root/.pyenv/versions/3.11.7/lib/python3.11/os.py");
  std::string sp = "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages";
  t.file(sp + "/numpy-1.26.4.dist-info/METADATA", "Name: numpy\nVersion: 1.26.4\n");
  t.file(sp + "/numpy/__init__.py");
  host::Host h(t.root(), {{"PATH", "/root/.pyenv/shims:/usr/bin"}});
  Environment env = scan_environment(h, {});
  EXPECT_EQ(env.interpreter.path, "/root/.pyenv/shims/python3");
  EXPECT_EQ(env.interpreter.reason,
            "python3 on PATH, a pyenv shim for 3.11.7 set by /root/.pyenv/version");
  EXPECT_EQ(env.python.executable, "/root/.pyenv/versions/3.11.7/bin/python3");
  EXPECT_EQ(env.python.version, "3.11");
  ASSERT_NE(env.find_package("numpy"), nullptr);
  EXPECT_EQ(env.find_package("numpy")->version, "1.26.4");

  t.file("/root/.pyenv/version", "3.8.0\n");  // not installed, no system python3
  try {
    scan_environment(h, {});
    FAIL() << "expected PyenvError";
  } catch (const PyenvError& e) {
    EXPECT_EQ(std::string(e.what()),
              "/root/.pyenv/shims/python3: a pyenv shim; pyenv: python3: command not found; "
              "version `3.8.0' is not installed (set by /root/.pyenv/version)");
  }
}

// The oracle is pyenv itself: on a machine with pyenv's shims, each
// PYENV_VERSION makes the real shim run the interpreter predicted here.
TEST(RealPyenv, ShimRunsWhatIsPredicted) {
  host::Host h = host::Host::live();
  std::optional<std::string> shim_path;
  const std::string path = h.getenv("PATH").value_or("");
  std::string_view rest = path;
  while (!shim_path && !rest.empty()) {
    std::string dir(rest.substr(0, rest.find(':')));
    rest.remove_prefix(std::min(rest.size(), dir.size() + 1));
    std::string p = dir + "/python3";
    if (access(p.c_str(), X_OK) == 0 && read_pyenv_shim(h, p)) shim_path = p;
  }
  if (!shim_path) GTEST_SKIP() << "no pyenv shim for python3 on PATH";
  std::vector<std::string> versions = {"", "system", "9.9.9"};
  std::string root = read_pyenv_shim(h, *shim_path)->pyenv_root;
  std::vector<std::string> installed =
      h.list_dir(root + "/versions").value_or(std::vector<std::string>{});
  for (const std::string& v : installed) {
    versions.push_back(v);
    if (std::count(v.begin(), v.end(), '.') == 2) versions.push_back(v.substr(0, v.rfind('.')));
  }
  for (const std::string& v : versions) {
    if (v.empty())
      h.unsetenv("PYENV_VERSION");
    else
      h.setenv("PYENV_VERSION", v);
    std::optional<PyenvShim> s = read_pyenv_shim(h, *shim_path);
    ASSERT_TRUE(s);
    test::CommandResult real = test::run_command(
        (v.empty() ? std::string("env -u PYENV_VERSION ") : "env PYENV_VERSION='" + v + "' ") +
        *shim_path + " -c 'import sys; print(sys.executable)' 2>/dev/null");
    if (real.status != 0) {
      EXPECT_FALSE(s->target) << "PYENV_VERSION=" << v << ": pyenv ran nothing";
      continue;
    }
    ASSERT_TRUE(s->target) << "PYENV_VERSION=" << v << ": " << s->error;
    // sys.executable is the path pyenv exec'ed (python3 may be a link).
    EXPECT_EQ(*s->target + "\n", real.out) << "PYENV_VERSION=" << v;
  }
  RecordProperty("versions_compared", static_cast<int>(versions.size()));
}

// ─── other interpreters (other-interpreters.cc) ─────────────────────────────

namespace {

// PREFIX/bin/pythonX.Y and its standard library; PREFIX/bin/python links to it.
void base_python(const Tree& t, const std::string& prefix, const std::string& xy) {
  executable_file(t, prefix + "/bin/python" + xy);
  t.link("python" + xy, prefix + "/bin/python");
  t.file(prefix + "/lib/python" + xy + "/os.py");
}

void wheel(const Tree& t, const std::string& site, const std::string& name,
           const std::string& version, const std::string& import_name) {
  std::string info = site + "/" + name + "-" + version + ".dist-info";
  t.file(info + "/METADATA", "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version);
  t.file(info + "/top_level.txt", import_name + "\n");
  t.file(site + "/" + import_name + "/__init__.py");
}

// A venv at DIR whose python links to BASE_PYTHON.
void venv(const Tree& t, const std::string& dir, const std::string& base_python,
          const std::string& xy, bool system_site) {
  t.link(base_python, dir + "/bin/python");
  t.file(dir + "/pyvenv.cfg", "home = " + host::dir_name(base_python) +
                                  "\ninclude-system-site-packages = " +
                                  (system_site ? "true" : "false") + "\nversion = " + xy + "\n");
  t.dir(dir + "/lib/python" + xy + "/site-packages");
}

std::vector<std::string> found_paths(const InterpreterSurvey& s) {
  std::vector<std::string> out;
  for (const FoundInterpreter& f : s.found) out.push_back(f.path);
  return out;
}

std::string skipped_text(const InterpreterSurvey& s) {
  std::string out;
  for (const ScanProblem& p : s.skipped) out += p.path + ": " + p.what + "\n";
  return out;
}

std::string packages_text(const std::vector<FoundPackage>& packages) {
  std::string out;
  for (const FoundPackage& p : packages)
    out += p.import_name + " " + p.distribution.value_or("-") + " " + p.version.value_or("-") + ";";
  return out;
}

// A machine with an interpreter in each place the survey looks.
void build_machine(const Tree& t) {
  base_python(t, "/usr", "3.11");
  t.link("python3.11", "/usr/bin/python3");
  t.file("/usr/bin/python3.11-config", "#!/bin/sh\n");
  t.file("/usr/bin/python3-futurize", "#!/bin/sh\n");
  std::string deb = "/usr/lib/python3/dist-packages";
  t.file(deb + "/torch-1.13.0a0+gitunknown.egg-info/PKG-INFO",
         "Name: torch\nVersion: 1.13.0a0+gitunknown\n");
  t.file(deb + "/torch/__init__.py");
  t.extension(deb + "/cv2.cpython-311-x86_64-linux-gnu.so", "cv2");
  base_python(t, "/usr/local", "3.12");
  t.link("python3.12", "/usr/local/bin/python3");
  base_python(t, "/home/u/miniconda3", "3.12");
  t.file("/home/u/miniconda3/bin/conda", "#!/bin/sh\n");
  base_python(t, "/home/u/miniconda3/envs/train", "3.10");
  std::string train = "/home/u/miniconda3/envs/train/lib/python3.10/site-packages";
  wheel(t, train, "numpy", "1.26.4", "numpy");
  wheel(t, train, "scikit_learn", "1.4.0", "sklearn");
  base_python(t, "/home/u/.pyenv/versions/3.11.7", "3.11");
  base_python(t, "/home/u/.pyenv/versions/3.10.13", "3.10");
  wheel(t, "/home/u/.pyenv/versions/3.10.13/lib/python3.10/site-packages", "numpy", "1.26.4",
        "numpy");
  venv(t, "/home/u/.virtualenvs/bare", "/usr/bin/python3.11", "3.11", false);
  venv(t, "/home/u/.virtualenvs/sys", "/usr/bin/python3.11", "3.11", true);
}

}  // namespace

TEST(OtherInterpreters, EachPlaceOneEntryPerEnvironmentBestFirst) {
  Tree t;
  build_machine(t);
  host::Host h(t.root(), {{"HOME", "/home/u"}, {"CONDA_EXE", "/home/u/miniconda3/bin/conda"}});
  PythonFacts checked = infer_from_layout(h, "/home/u/.pyenv/versions/3.11.7/bin/python");
  InterpreterSurvey s = survey_interpreters(h, &checked);
  // torch first (Debian's, and the venv that sees it), then by how many.
  EXPECT_EQ(found_paths(s),
            (std::vector<std::string>{"/usr/bin/python3", "/home/u/.virtualenvs/sys/bin/python",
                                      "/home/u/miniconda3/envs/train/bin/python",
                                      "/home/u/.pyenv/versions/3.10.13/bin/python"}));
  // python3 and python3.11 are one; /usr/local's 3.12, the conda base, the
  // bare venv (its python links to python3.11 but it is its own
  // environment) were read and have nothing; the checked one is left out.
  EXPECT_EQ(s.examined, 7u);
  EXPECT_EQ(s.more, 0u);
  EXPECT_TRUE(s.skipped.empty()) << skipped_text(s);
  ASSERT_EQ(s.found.size(), 4u);
  EXPECT_EQ(s.found[0].kind, InterpreterKind::System);
  EXPECT_EQ(s.found[0].version, "3.11");
  EXPECT_EQ(s.found[0].prefix, "/usr");
  EXPECT_EQ(packages_text(s.found[0].packages), "torch torch 1.13.0a0+gitunknown;cv2 - -;");
  EXPECT_EQ(s.found[1].kind, InterpreterKind::Virtualenv);
  EXPECT_EQ(s.found[2].kind, InterpreterKind::Conda);
  EXPECT_EQ(packages_text(s.found[2].packages), "numpy numpy 1.26.4;sklearn scikit_learn 1.4.0;");
  EXPECT_EQ(s.found[3].kind, InterpreterKind::Pyenv);

  // The same answer as the check's own scan of each one.
  for (const FoundInterpreter& f : s.found) {
    ScanOptions opts;
    opts.python = f.path;
    Environment env = scan_environment(h, opts);
    std::vector<FoundPackage> scanned;
    for (const ImportedPackage& p : env.packages)
      scanned.push_back({p.import_name, p.distribution, p.version});
    EXPECT_EQ(packages_text(scanned), packages_text(f.packages)) << f.path;
  }

  // Nothing excluded: the pyenv 3.11.7 is read too (and has nothing).
  EXPECT_EQ(survey_interpreters(h, nullptr).examined, 8u);
  // Caps: one listed and the rest counted; reading stops, with a note.
  SurveyOptions small;
  small.max_listed = 1;
  small.max_examined = 2;
  s = survey_interpreters(h, &checked, small);
  EXPECT_EQ(found_paths(s), std::vector<std::string>{"/usr/bin/python3"});
  EXPECT_EQ(s.examined, 2u);
  EXPECT_EQ(s.more, 0u);  // /usr/local's 3.12 has nothing
  EXPECT_EQ(skipped_text(s),
            "/home/u/miniconda3/bin/python: not read: the survey stops after 2 environments\n");
  small.max_examined = 64;
  s = survey_interpreters(h, &checked, small);
  EXPECT_EQ(s.found.size(), 1u);
  EXPECT_EQ(s.more, 3u);
}

TEST(OtherInterpreters, BadPlacesAreNotedAndPassedOver) {
  Tree t;
  build_machine(t);
  std::string envs = "/home/u/miniconda3/envs";
  t.link("loop", envs + "/loop");  // envs/loop -> itself
  t.link("/usr/bin/python3.9", "/home/u/.virtualenvs/gone/bin/python");
  t.dir("/home/u/.virtualenvs/odd/bin/python");
  executable_file(t, "/opt/conda/bin/python");  // no lib/python3.X beside it
  // A FIFO where pyvenv.cfg belongs is not opened (it would block).
  executable_file(t, "/home/u/.virtualenvs/fifo/bin/python");
  ASSERT_EQ(mkfifo(t.at("/home/u/.virtualenvs/fifo/pyvenv.cfg").c_str(), 0644), 0);
  t.file("/home/u/.pyenv/versions/broken", "not a directory");

  host::Host h(t.root(), {{"HOME", "/home/u"}});
  InterpreterSurvey s = survey_interpreters(h, nullptr);
  EXPECT_EQ(skipped_text(s),
            "/opt/conda/bin/python: no lib/python3.X under /opt/conda\n" + envs +
                "/loop/bin/python: symlink loop (Too many levels of symbolic links)\n"
                "/home/u/.virtualenvs/fifo/bin/python: no lib/python3.X under "
                "/home/u/.virtualenvs/fifo\n"
                "/home/u/.virtualenvs/gone/bin/python: dangling symlink to /usr/bin/python3.9\n"
                "/home/u/.virtualenvs/odd/bin/python: not a regular file\n");
  // The rest is still found.
  EXPECT_EQ(s.found.size(), 4u);

  // HOME unset: the system's interpreters only, and a note.
  host::Host no_home(t.root(), {});
  s = survey_interpreters(no_home, nullptr);
  EXPECT_EQ(found_paths(s), std::vector<std::string>{"/usr/bin/python3"});
  EXPECT_EQ(skipped_text(s),
            "$HOME: unset (or not an absolute path): ~/.pyenv, ~/*conda* and ~/.virtualenvs "
            "not searched\n"
            "/opt/conda/bin/python: no lib/python3.X under /opt/conda\n");
}

// What another user cannot read is noted, and the rest found. As root
// every directory is readable, so the survey runs as user 65534 there.
TEST(OtherInterpreters, UnreadableDirectoriesAreNoted) {
  Tree t;
  build_machine(t);
  executable_file(t, "/home/u/miniconda3/envs/secret/bin/python");
  ASSERT_EQ(chmod(t.at("/home/u/miniconda3/envs/secret").c_str(), 0), 0);
  ASSERT_EQ(chmod(t.at("/home/u/.virtualenvs").c_str(), 0), 0);
  ASSERT_EQ(chmod(t.root().c_str(), 0755), 0);
  auto check = [&]() -> std::string {
    host::Host h(t.root(), {{"HOME", "/home/u"}});
    InterpreterSurvey s = survey_interpreters(h, nullptr);
    std::string want =
        "/home/u/miniconda3/envs/secret/bin/python: Permission denied\n"
        "/home/u/.virtualenvs: directory cannot be listed\n";
    if (skipped_text(s) != want) return "skipped:\n" + skipped_text(s) + "wanted:\n" + want;
    if (found_paths(s) != std::vector<std::string>{"/usr/bin/python3",
                                                   "/home/u/miniconda3/envs/train/bin/python",
                                                   "/home/u/.pyenv/versions/3.10.13/bin/python"})
      return "found the wrong interpreters";
    return "";
  };
  std::optional<std::string> why = test::as_unprivileged_user(check);
  if (!why) GTEST_SKIP() << "cannot become user 65534";
  EXPECT_EQ(*why, "");
}
