"""Wheel- and conda-shaped fixture environments built from real ELF objects
(issue 17; not a test itself).

What real installs look like, rebuilt by the tests on this machine:
  * auditwheel's vendoring: a native dependency is copied into `<dist>.libs/`
    (torch: `torch/lib/`) under a name carrying the first 8 hex digits of the
    sha256 of the ORIGINAL file (`libgomp-a34b3233.so.1`), its SONAME set to
    that name, every consumer's DT_NEEDED and version-need file name
    (Elf64_Verneed.vn_file, `readelf -V` "File:") rewritten with
    `patchelf --replace-needed`, and the consumer's RUNPATH set to
    `$ORIGIN/../<dist>.libs`. The copies here are Debian's own runtimes
    (/usr/lib/x86_64-linux-gnu/libgomp.so.1, libomp.so.5, libstdc++.so.6),
    and CUDA 13's libcudart.so.13 from /usr/local/cuda where present;
  * site-packages with real `*.dist-info` (METADATA, WHEEL, INSTALLER,
    top_level.txt and a RECORD listing every file with its sha256 and size);
  * nvidia-*-cu12 wheels' `nvidia/<lib>/lib`, found through RUNPATH chains;
  * a conda prefix (`lib/`, `conda-meta/<name>-<version>-<build>.json`).

Every builder returns a dict of paths; the scenario tests
(test/e2e/scenario-wheel-*.py, scenario-conda-*.py) run a real interpreter on
the environment (`real_imports`) and compare with `mldoctor check`
(`run_check_py`).
"""
import base64
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mldtest import CC, MLDOCTOR, check, fail  # noqa: E402
from scenarios import (MODULE_TEMPLATE, PY, build_libstdcxx_stub, build_so,  # noqa: E402
                       ext_suffix, glibcxx_symbol, py_info)

SYSLIB = "/usr/lib/x86_64-linux-gnu"
GOMP = os.path.join(SYSLIB, "libgomp.so.1")
LIBOMP = os.path.join(SYSLIB, "libomp.so.5")
CUDART13 = "/usr/local/cuda/lib64/libcudart.so.13"
PYVER = "python%d.%d" % sys.version_info[:2]  # /usr/bin/python3's (the runner is it)


# ---------------------------------------------------------------- ELF facts (readelf)

def _readelf(*args):
    return subprocess.run(["readelf", "-W"] + list(args), capture_output=True, text=True,
                          check=True).stdout


def dynamic(path, tag):
    """Values of one dynamic tag ("NEEDED", "SONAME", "RUNPATH", "RPATH")."""
    out = []
    for line in _readelf("-d", path).splitlines():
        if "(%s)" % tag in line and "[" in line:
            out.append(line.split("[", 1)[1].rsplit("]", 1)[0])
    return out


def soname(path):
    s = dynamic(path, "SONAME")
    return s[0] if s else None


def verneed_files(path):
    """The file names of the version needs (.gnu.version_r's vn_file)."""
    return list(verneeds(path))


def verneeds(path):
    """{file: [version names]} of the version needs."""
    out, in_r, cur = {}, False, None
    for line in _readelf("-V", path).splitlines():
        if line.startswith("Version needs section"):
            in_r = True
        elif line.startswith("Version ") and "section" in line:
            in_r = False
        elif in_r and "File: " in line:
            cur = line.split("File: ", 1)[1].split()[0]
            out[cur] = []
        elif in_r and cur and "Name: " in line:
            out[cur].append(line.split("Name: ", 1)[1].split()[0])
    return out


def build_id(path):
    for line in _readelf("-n", path).splitlines():
        if "Build ID:" in line:
            return line.split("Build ID:", 1)[1].strip()
    return None


def under(paths, root):
    root = os.path.realpath(root) + "/"
    return sorted({os.path.realpath(p) for p in paths if os.path.realpath(p).startswith(root)})


# ---------------------------------------------------------------- auditwheel's renaming

def content_hash(path):
    """auditwheel's short hash: the first 8 hex digits of the file's sha256."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:8]


def hashed_name(name, digest):
    """libgomp.so.1.0.0 + a34b3233 -> libgomp-a34b3233.so.1.0.0 (auditwheel's copylib)."""
    base, ext = name.split(".", 1)
    return "%s-%s.%s" % (base, digest, ext)


def vendor_copy(src, libdir, name=None):
    """Copies the runtime SRC into LIBDIR as auditwheel does: the new name is
    NAME (default: the basename of SRC after symlinks, as auditwheel takes it
    from lddtree's realpath) with the hash of SRC's contents, and the copy's
    SONAME is set to the new name. Returns the new path."""
    real = os.path.realpath(src)
    new = hashed_name(name or os.path.basename(real), content_hash(real))
    os.makedirs(libdir, exist_ok=True)
    dest = os.path.join(libdir, new)
    if not os.path.exists(dest):
        shutil.copy(real, dest)
        os.chmod(dest, 0o755)
        subprocess.run(["patchelf", "--set-soname", new, dest], check=True)
        if soname(dest) != new:
            raise RuntimeError("patchelf did not set the soname of %s" % dest)
    return dest


def graft(consumer, old, vendored, runpath=None):
    """Rewrites CONSUMER's DT_NEEDED OLD to the vendored copy's soname
    (`patchelf --replace-needed`, which also rewrites the version needs'
    vn_file) and sets its RUNPATH when given. Verifies both rewrites."""
    new = soname(vendored)
    subprocess.run(["patchelf", "--replace-needed", old, new, consumer], check=True)
    if runpath is not None:
        subprocess.run(["patchelf", "--set-rpath", runpath, consumer], check=True)
    needed = dynamic(consumer, "NEEDED")
    if old in needed or new not in needed:
        raise RuntimeError("%s: DT_NEEDED not rewritten: %r" % (consumer, needed))
    vf = verneed_files(consumer)
    if old in vf:
        raise RuntimeError("%s: version needs still name %s: %r" % (consumer, old, vf))
    if runpath is not None and dynamic(consumer, "RUNPATH") != [runpath]:
        raise RuntimeError("%s: RUNPATH is %r" % (consumer, dynamic(consumer, "RUNPATH")))
    return consumer


def rebuild_id(src, dest, salt):
    """A copy of SRC whose GNU build-id note says another build (the 20 bytes
    replaced by sha1(SALT)): stands for the same runtime built elsewhere
    (there is one x86-64 libgomp on this machine). Code, symbols and version
    definitions are unchanged."""
    data = bytearray(open(os.path.realpath(src), "rb").read())
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    str_off = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 0x18)[0]
    done = False
    for i in range(shnum):
        sh = shoff + i * shentsize
        name_off, = struct.unpack_from("<I", data, sh)
        end = data.index(b"\0", str_off + name_off)
        if bytes(data[str_off + name_off:end]) != b".note.gnu.build-id":
            continue
        off, = struct.unpack_from("<Q", data, sh + 0x18)
        namesz, descsz, _ = struct.unpack_from("<III", data, off)
        desc = off + 12 + ((namesz + 3) & ~3)
        data[desc:desc + descsz] = hashlib.sha1(salt.encode()).digest()[:descsz]
        done = True
    if not done:
        raise RuntimeError("%s has no .note.gnu.build-id" % src)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with open(dest, "wb") as f:
        f.write(data)
    os.chmod(dest, 0o755)
    return dest


# ---------------------------------------------------------------- building objects

def build_ext(path, init_name, body="", needed=(), runpath=None, flags=()):
    """A real extension module at PATH (any file name: pkg/_core<EXT>,
    cv2/cv2.abi3.so) whose init function is PyInit_INIT_NAME."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    src = MODULE_TEMPLATE % dict(name=init_name, body=body, init="")
    cmd = [CC, "-shared", "-fPIC", "-O0", "-I" + py_info()["include"], "-o", path,
           "-xc", "-", "-xnone", "-Wl,--no-as-needed"]
    if runpath is not None:
        cmd += ["-Wl,--enable-new-dtags", "-Wl,-rpath," + runpath]
    cmd += list(flags) + list(needed)
    subprocess.run(cmd, input=src.encode(), check=True)
    return path


# C that makes a real call into GNU OpenMP (omp_get_max_threads@OMP_1.0), so
# the object has a version need on libgomp.so.1, as an OpenMP-compiled module does.
def omp_body(prefix):
    return ("int omp_get_max_threads(void);\n"
            "int %s_omp_threads(void){ return omp_get_max_threads(); }\n" % prefix)


GOMP_LINK = ["-L" + SYSLIB, "-l:libgomp.so.1"]


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


# ---------------------------------------------------------------- installs

def make_venv(d, system_site=False):
    """A venv of /usr/bin/python3 (no pip): returns (python, site-packages)."""
    cmd = [PY, "-m", "venv", "--without-pip"] + (["--system-site-packages"] if system_site else [])
    subprocess.run(cmd + [d], check=True)
    site = os.path.join(d, "lib", PYVER, "site-packages")
    if not os.path.isdir(site):
        raise RuntimeError("venv %s has no %s" % (d, site))
    return os.path.join(d, "bin", "python"), site


def record_hash(path):
    with open(path, "rb") as f:
        data = f.read()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "sha256=" + digest, len(data)


def install_dist(site, name, version, files, top_level, installer="pip", tag="cp311-cp311-manylinux_2_17_x86_64"):
    """Writes NAME-VERSION.dist-info into SITE for FILES (paths relative to
    SITE, already in place): METADATA, WHEEL, INSTALLER, top_level.txt and a
    RECORD listing every file (and the dist-info's own) with sha256 and size."""
    norm = name.replace("-", "_")
    di = "%s-%s.dist-info" % (norm, version)
    dpath = os.path.join(site, di)
    os.makedirs(dpath, exist_ok=True)
    write(os.path.join(dpath, "METADATA"),
          "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: mldoctor fixture\n" % (name, version))
    write(os.path.join(dpath, "WHEEL"),
          "Wheel-Version: 1.0\nGenerator: auditwheel 5.4.0\nRoot-Is-Purelib: false\nTag: %s\n" % tag)
    write(os.path.join(dpath, "INSTALLER"), installer + "\n")
    write(os.path.join(dpath, "top_level.txt"), "".join(t + "\n" for t in top_level))
    rows = []
    for rel in list(files) + [di + "/" + n for n in ("METADATA", "WHEEL", "INSTALLER", "top_level.txt")]:
        h, size = record_hash(os.path.join(site, rel))
        rows.append("%s,%s,%d" % (rel, h, size))
    rows.append(di + "/RECORD,,")
    write(os.path.join(dpath, "RECORD"), "\n".join(rows) + "\n")
    return dpath


def rel_files(site, *roots):
    """Every file under SITE/ROOT (files and directories), relative to SITE."""
    out = []
    for root in roots:
        full = os.path.join(site, root)
        if os.path.isfile(full):
            out.append(root)
            continue
        for dp, _, fns in os.walk(full):
            for fn in sorted(fns):
                if "__pycache__" not in dp:
                    out.append(os.path.relpath(os.path.join(dp, fn), site))
    return sorted(out)


# ---------------------------------------------------------------- the packages

def torch_package(site, gomp_src=GOMP, cuda=None, with_cxx=True):
    """A pip-torch-shaped package: torch/__init__.py ctypes-loads
    lib/libtorch_global_deps.so RTLD_GLOBAL, then imports torch._C, which
    NEEDs lib/libtorch_python.so -> lib/libtorch_cpu.so -> the vendored GNU
    OpenMP lib/libgomp-<hash>.so.1 (and the system libstdc++.so.6). With
    CUDA=dict(cublas=..., cudart=...): libtorch_global_deps.so and
    lib/libtorch_cuda.so NEED libcublas.so.12/libcudart.so.12 through
    torch 2.x's RUNPATH $ORIGIN/../../nvidia/<lib>/lib:...:$ORIGIN."""
    tdir = os.path.join(site, "torch")
    lib = os.path.join(tdir, "lib")
    os.makedirs(lib, exist_ok=True)
    gomp = vendor_copy(gomp_src, lib, name=soname(gomp_src) or "libgomp.so.1")
    cpu = build_so(os.path.join(lib, "libtorch_cpu.so"),
                   omp_body("torch") + "void omp_set_num_threads(int);\n"
                   "void torch_set_threads(int n){ omp_set_num_threads(n); }\n",
                   soname="libtorch_cpu.so", needed=GOMP_LINK + (["-lstdc++"] if with_cxx else []))
    graft(cpu, "libgomp.so.1", gomp, runpath="$ORIGIN")
    nv_runpath = ("$ORIGIN/../../nvidia/cublas/lib:$ORIGIN/../../nvidia/cuda_runtime/lib:"
                  "$ORIGIN/../../nvidia/cudnn/lib:$ORIGIN")
    deps_needed, py_needed = [], ["-L" + lib, "-l:libtorch_cpu.so"]
    out = dict(package=tdir, lib=lib, gomp=gomp, libtorch_cpu=cpu)
    if cuda:
        deps_needed = ["-L" + os.path.dirname(cuda["cublas"]), "-l:libcublas.so.12",
                       "-L" + os.path.dirname(cuda["cudart"]), "-l:libcudart.so.12"]
        tc = build_so(os.path.join(lib, "libtorch_cuda.so"), "int torch_cuda_f(void){return 1;}\n",
                      soname="libtorch_cuda.so", runpath=nv_runpath,
                      needed=deps_needed + ["-Wl,-rpath-link," + os.path.dirname(cuda["cublas"])])
        py_needed.append("-l:libtorch_cuda.so")
        out["libtorch_cuda"] = tc
    deps = build_so(os.path.join(lib, "libtorch_global_deps.so"), "int torch_global_deps(void){return 0;}\n",
                    soname="libtorch_global_deps.so",
                    runpath=nv_runpath if cuda else "$ORIGIN",
                    needed=deps_needed + (["-Wl,-rpath-link," + os.path.dirname(cuda["cublas"])] if cuda else []))
    tpy = build_so(os.path.join(lib, "libtorch_python.so"), "int torch_python_f(void){return 0;}\n",
                   soname="libtorch_python.so", runpath="$ORIGIN", needed=py_needed)
    c = build_ext(os.path.join(tdir, "_C" + ext_suffix()), "_C", runpath="$ORIGIN/lib",
                  needed=["-L" + lib, "-l:libtorch_python.so"])
    write(os.path.join(tdir, "__init__.py"),
          "import ctypes, os\n"
          "ctypes.CDLL(os.path.join(os.path.dirname(__file__), 'lib', 'libtorch_global_deps.so'),\n"
          "            mode=ctypes.RTLD_GLOBAL)\n"
          "from torch._C import *  # noqa\n"
          "from torch.version import __version__  # noqa\n")
    write(os.path.join(tdir, "version.py"),
          "__version__ = '2.1.0+%s'\ncuda = %r\ngit_version = 'fixture'\n"
          % ("cu121" if cuda else "cpu", "12.1" if cuda else None))
    install_dist(site, "torch", "2.1.0", rel_files(site, "torch"), ["torch"])
    out.update(global_deps=deps, libtorch_python=tpy, module=c)
    return out


def sklearn_package(site, gomp_src=GOMP):
    """A scikit-learn-shaped dist: sklearn/__init__.py imports
    sklearn.__check_build._check_build and sklearn.utils._openmp_helpers;
    the latter NEEDs scikit_learn.libs/libgomp-<hash>.so.1.0.0 (auditwheel's
    name from the file name after symlinks)."""
    s = os.path.join(site, "sklearn")
    libs = os.path.join(site, "scikit_learn.libs")
    write(os.path.join(s, "__init__.py"),
          "from sklearn.__check_build import _check_build  # noqa\n"
          "from sklearn.utils import _openmp_helpers  # noqa\n")
    write(os.path.join(s, "__check_build", "__init__.py"), "")
    write(os.path.join(s, "utils", "__init__.py"), "")
    build_ext(os.path.join(s, "__check_build", "_check_build" + ext_suffix()), "_check_build")
    helpers = build_ext(os.path.join(s, "utils", "_openmp_helpers" + ext_suffix()), "_openmp_helpers",
                        body=omp_body("sklearn"), needed=GOMP_LINK)
    gomp = vendor_copy(gomp_src, libs)
    graft(helpers, "libgomp.so.1", gomp, runpath="$ORIGIN/../../scikit_learn.libs")
    install_dist(site, "scikit-learn", "1.3.2", rel_files(site, "sklearn", "scikit_learn.libs"), ["sklearn"])
    return dict(package=s, module=helpers, gomp=gomp)


def opencv_package(site, gomp_src, glibcxx=None, stub_dir=None):
    """An opencv-python-headless-shaped dist: cv2/__init__.py loads the
    native cv2/cv2.abi3.so (PyInit_cv2), which NEEDs
    opencv_python_headless.libs/libgomp-<hash>.so.1.0.0 (RUNPATH
    $ORIGIN/../opencv_python_headless.libs). With GLIBCXX="GLIBCXX_3.4.32"
    the module is linked against a libstdc++ stub that has that version
    (STUB_DIR) and references a symbol at it: a version need the system's
    libstdc++.so.6 (GCC 12: up to GLIBCXX_3.4.30) cannot meet."""
    c = os.path.join(site, "cv2")
    libs = os.path.join(site, "opencv_python_headless.libs")
    write(os.path.join(c, "__init__.py"), "from . import cv2 as _native  # noqa\n")
    body, needed = omp_body("cv2"), []
    if glibcxx:
        last = int(glibcxx.rsplit(".", 1)[1])
        stub = build_libstdcxx_stub(stub_dir, last)
        sym = glibcxx_symbol(glibcxx)
        body += "int %s(void);\nint cv2_cxx(void){ return %s(); }\n" % (sym, sym)
        # The stub's directory first: -L/usr/lib/... would find the system's.
        needed += ["-L" + os.path.dirname(stub), "-l:libstdc++.so.6"]
    needed += GOMP_LINK
    mod = build_ext(os.path.join(c, "cv2.abi3.so"), "cv2", body=body, needed=needed)
    gomp = vendor_copy(gomp_src, libs)
    graft(mod, "libgomp.so.1", gomp, runpath="$ORIGIN/../opencv_python_headless.libs")
    install_dist(site, "opencv-python-headless", "4.8.1.78",
                 rel_files(site, "cv2", "opencv_python_headless.libs"), ["cv2"],
                 tag="cp37-abi3-manylinux_2_17_x86_64")
    return dict(package=c, module=mod, gomp=gomp)


# ---------------------------------------------------------------- environments

def pip_torch_venv(t):
    """(a) The Must-show venv: `python3 -m venv --system-site-packages`
    (Debian's real torch stays in /usr/lib/python3/dist-packages) with a
    wheel-shaped `pkg`: pkg/__init__.py imports pkg._core; pkg/_core<EXT>
    (in RECORD) NEEDs the vendored GNU OpenMP pkg.libs/libgomp-<hash>.so.1
    (a copy of the system's libgomp, SONAME, DT_NEEDED and vn_file
    rewritten, RUNPATH $ORIGIN/../pkg.libs)."""
    venv = os.path.join(t, "venv")
    python, site = make_venv(venv, system_site=True)
    pkg = os.path.join(site, "pkg")
    write(os.path.join(pkg, "__init__.py"), "from pkg import _core  # noqa\n")
    core = build_ext(os.path.join(pkg, "_core" + ext_suffix()), "_core",
                     body=omp_body("pkg"), needed=GOMP_LINK)
    gomp = vendor_copy(GOMP, os.path.join(site, "pkg.libs"), name="libgomp.so.1")
    graft(core, "libgomp.so.1", gomp, runpath="$ORIGIN/../pkg.libs")
    record = install_dist(site, "pkg", "1.0", rel_files(site, "pkg", "pkg.libs"), ["pkg"])
    return dict(root=venv, python=python, site=site, module=core, gomp=gomp, record=record)


def opencv_vendored_env(t, cv2_glibcxx=None):
    """(b), (c) A venv (no system site-packages) with pip-shaped torch
    (torch/lib/libgomp-<h>.so.1), opencv-python-headless
    (opencv_python_headless.libs/libgomp-<h2>.so.1.0.0, another build: the
    system libgomp with another build-id) and scikit-learn
    (scikit_learn.libs/libgomp-<h>.so.1.0.0: the SAME build as torch's, the
    same hash, another name). CV2_GLIBCXX: a version cv2's module needs from
    libstdc++.so.6 (case c: "GLIBCXX_3.4.32")."""
    venv = os.path.join(t, "venv")
    python, site = make_venv(venv)
    other = rebuild_id(GOMP, os.path.join(t, "opencv-build", "libgomp.so.1.0.0"), "opencv-python-headless 4.8.1.78")
    torch = torch_package(site)
    cv2 = opencv_package(site, other, glibcxx=cv2_glibcxx, stub_dir=os.path.join(t, "stub-new"))
    sk = sklearn_package(site)
    return dict(root=venv, python=python, site=site, torch=torch, cv2=cv2, sklearn=sk)


def broken_install_env():
    """For the tests that break a working install on purpose (check-fifo-venv,
    check-probe-timeout): exits 77 without patchelf, readelf or the system's
    libgomp, else builds opencv_vendored_env (OMP001) in a fresh scratch
    directory. Returns (that directory, the fixture, the environment both
    halves run in, with NO_COLOR)."""
    from mldtest import scratch
    from scenarios import scenario_env, skip_unless
    skip_unless(tools=("patchelf", "readelf", GOMP))
    t = scratch()
    return t, opencv_vendored_env(t), scenario_env(NO_COLOR="1")


def start_waits(python, env, seconds=5):
    """Whether PYTHON's start-up (`-c pass`) is still waiting after SECONDS."""
    try:
        subprocess.run([python, "-c", "pass"], env=env, timeout=seconds, capture_output=True)
        return False
    except subprocess.TimeoutExpired:
        return True


def nvidia_env(t, real_cudart=True):
    """(d) A venv with a CUDA-shaped pip torch: torch/lib/libtorch_global_deps.so
    and libtorch_cuda.so NEED libcublas.so.12 and libcudart.so.12 through
    RUNPATH $ORIGIN/../../nvidia/cublas/lib:$ORIGIN/../../nvidia/cuda_runtime/lib:...,
    from the nvidia-cublas-cu12 and nvidia-cuda-runtime-cu12 dists:
    nvidia/cuda_runtime/lib/libcudart.so.12 is CUDA 13's real libcudart.so.13
    (/usr/local/cuda) with its SONAME set to libcudart.so.12 (a gcc-built
    stand-in without it); nvidia/cublas/lib/libcublas.so.12 (stand-in) NEEDs
    libcublasLt.so.12 beside it through RUNPATH $ORIGIN and libcudart.so.12."""
    venv = os.path.join(t, "venv")
    python, site = make_venv(venv)
    rt = os.path.join(site, "nvidia", "cuda_runtime", "lib")
    cb = os.path.join(site, "nvidia", "cublas", "lib")
    os.makedirs(rt)
    os.makedirs(cb)
    cudart = os.path.join(rt, "libcudart.so.12")
    if real_cudart and os.path.exists(CUDART13):
        shutil.copy(os.path.realpath(CUDART13), cudart)
        subprocess.run(["patchelf", "--set-soname", "libcudart.so.12", cudart], check=True)
        cudart_kind = "CUDA 13 libcudart.so.13, soname set to libcudart.so.12"
    else:
        build_so(cudart, "int cudaRuntimeGetVersion(int *v){ *v = 12010; return 0; }\n",
                 soname="libcudart.so.12")
        cudart_kind = "stand-in (no %s)" % CUDART13
    lt = build_so(os.path.join(cb, "libcublasLt.so.12"), "int cublasLtCreate(void **h){return 0;}\n",
                  soname="libcublasLt.so.12")
    cublas = build_so(os.path.join(cb, "libcublas.so.12"),
                      "int cublasLtCreate(void **h);\nint cublasCreate_v2(void **h){return cublasLtCreate(h);}\n",
                      soname="libcublas.so.12", runpath="$ORIGIN",
                      needed=["-L" + cb, "-l:libcublasLt.so.12", "-L" + rt, "-l:libcudart.so.12"])
    write(os.path.join(site, "nvidia", "__init__.py"), "")
    for sub in ("cuda_runtime", "cublas"):
        write(os.path.join(site, "nvidia", sub, "__init__.py"), "")
    install_dist(site, "nvidia-cuda-runtime-cu12", "12.1.105",
                 rel_files(site, "nvidia/cuda_runtime") + ["nvidia/__init__.py"], ["nvidia"],
                 tag="py3-none-manylinux1_x86_64")
    install_dist(site, "nvidia-cublas-cu12", "12.1.3.1", rel_files(site, "nvidia/cublas"), ["nvidia"],
                 tag="py3-none-manylinux1_x86_64")
    torch = torch_package(site, cuda=dict(cublas=cublas, cudart=cudart))
    return dict(root=venv, python=python, site=site, torch=torch, cudart=cudart, cublas=cublas,
                cublaslt=lt, cudart_kind=cudart_kind)


def conda_glibcxx_env(t, need="GLIBCXX_3.4.32"):
    """(e) A conda-shaped prefix (made with venv so its bin/python runs
    /usr/bin/python3 with the prefix's site-packages): lib/libstdc++.so.6 ->
    libstdc++.so.6.0.32 (a stub whose versions go up to NEED; conda-forge's
    libstdcxx-ng 13.2 has GLIBCXX_3.4.32), conda-meta/libstdcxx-ng-*.json
    listing it; site-packages/cxxpkg/_ext<EXT> needs NEED with RUNPATH
    $ORIGIN/../../../ (the prefix's lib/); site-packages/cxxnorp/_ext<EXT>
    the same need without RUNPATH (a system python with a conda package);
    cxxtop<EXT> (RUNPATH $ORIGIN/../..) and cxxtopnorp<EXT>: the same as
    top-level single-file modules."""
    prefix = os.path.join(t, "conda")
    python, site = make_venv(prefix)
    lib = os.path.join(prefix, "lib")
    last = int(need.rsplit(".", 1)[1])
    stub = build_libstdcxx_stub(os.path.join(t, "stub-build"), last)
    real = os.path.join(lib, "libstdc++.so.6.0.%d" % last)
    shutil.copy(stub, real)
    os.symlink(os.path.basename(real), os.path.join(lib, "libstdc++.so.6"))
    os.makedirs(os.path.join(prefix, "conda-meta"))
    h, size = record_hash(real)
    meta = {"name": "libstdcxx-ng", "version": "13.2.0", "build": "hc0a3c3a_7",
            "build_number": 7, "channel": "https://conda.anaconda.org/conda-forge/linux-64",
            "subdir": "linux-64", "files": ["lib/libstdc++.so.6", os.path.relpath(real, prefix)],
            "paths_data": {"paths_version": 1, "paths": [
                {"_path": os.path.relpath(real, prefix), "path_type": "hardlink",
                 "sha256": hashlib.sha256(open(real, "rb").read()).hexdigest(), "size_in_bytes": size},
                {"_path": "lib/libstdc++.so.6", "path_type": "softlink"}]}}
    write(os.path.join(prefix, "conda-meta", "libstdcxx-ng-13.2.0-hc0a3c3a_7.json"), json.dumps(meta, indent=1))
    write(os.path.join(prefix, "conda-meta", "history"), "==> 2026-11-24 fixture <==\n+conda-forge/linux-64::libstdcxx-ng-13.2.0-hc0a3c3a_7\n")
    sym = glibcxx_symbol(need)
    body = "int %s(void);\nint ext_cxx(void){ return %s(); }\n" % (sym, sym)
    mods = {}
    for pkg, rp in (("cxxpkg", "$ORIGIN/../../../"), ("cxxnorp", None)):
        write(os.path.join(site, pkg, "__init__.py"), "from %s import _ext  # noqa\n" % pkg)
        mods[pkg] = build_ext(os.path.join(site, pkg, "_ext" + ext_suffix()), "_ext", body=body,
                              runpath=rp, needed=["-L" + os.path.dirname(stub), "-l:libstdc++.so.6"])
        install_dist(site, pkg, "0.1", rel_files(site, pkg), [pkg], installer="conda")
    # The same two as single-file top-level modules (what check's import
    # table resolves without RECORD): RUNPATH $ORIGIN/../.. is P/lib.
    for name, rp in (("cxxtop", "$ORIGIN/../.."), ("cxxtopnorp", None)):
        mods[name] = build_ext(os.path.join(site, name + ext_suffix()), name, body=body, runpath=rp,
                               needed=["-L" + os.path.dirname(stub), "-l:libstdc++.so.6"])
        install_dist(site, name, "0.1", [name + ext_suffix()], [name], installer="conda")
    return dict(root=prefix, python=python, site=site, lib=lib, libstdcxx=real, modules=mods)


# ---------------------------------------------------------------- the real half

REAL = r"""
import ctypes, json, os, sys
names = sys.argv[1].split(",")
def maps():
    out = []
    for line in open("/proc/self/maps"):
        p = line.split(None, 5)
        if len(p) == 6 and p[5].startswith("/"):
            f = p[5].strip()
            if f not in out:
                out.append(f)
    return out
steps, before = [], set(maps())
for n in names:
    ok, err = True, None
    try:
        __import__(n)
    except ImportError as e:
        ok, err = False, str(e)
    now = maps()
    steps.append({"import": n, "ok": ok, "error": err, "new": [m for m in now if m not in before]})
    before = set(now)
final = maps()
# Every mapped object that DEFINES omp_get_max_threads (dladdr of what dlsym
# finds through its handle names the object itself) is an OpenMP runtime;
# its own answer, then again after omp_set_num_threads(1) through the first.
class DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]
dladdr = ctypes.CDLL("libc.so.6").dladdr
omp = []
for f in final:
    if ".so" not in os.path.basename(f):
        continue
    try:
        lib = ctypes.CDLL(f)
        fn = lib.omp_get_max_threads
    except (OSError, AttributeError):
        continue
    info = DlInfo()
    dladdr(ctypes.cast(fn, ctypes.c_void_p), ctypes.byref(info))
    if os.path.realpath(info.fname.decode()) != os.path.realpath(f):
        continue
    omp.append({"path": f, "max_threads": fn(), "lib": lib})
if omp:
    omp[0]["lib"].omp_set_num_threads(1)
    for o in omp:
        o["after_first_set_1"] = o["lib"].omp_get_max_threads()
for o in omp:
    del o["lib"]
print(json.dumps({"steps": steps, "maps": final, "omp": omp}))
"""


def real_imports(python, names, env, timeout=180):
    """Runs PYTHON importing NAMES in order (an ImportError is recorded and
    the next name imported, as a job that catches it would), reading
    /proc/self/maps after each; then calls omp_get_max_threads on every mapped
    OpenMP runtime. Returns the document (or None after recording a failure)."""
    p = subprocess.run([python, "-c", REAL, ",".join(names)], env=env, capture_output=True,
                       text=True, timeout=timeout)
    try:
        doc = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        fail("real %s importing %s: exit %d\nstdout:\n%s\nstderr:\n%s"
             % (python, names, p.returncode, p.stdout[-2000:], p.stderr[-3000:]))
        return None
    return doc


def brought_by(real, path):
    """The import in whose step PATH first appeared in the real maps."""
    rp = os.path.realpath(path)
    for s in real["steps"]:
        if rp in (os.path.realpath(m) for m in s["new"]):
            return s["import"]
    return None


def print_real(tag, real, root):
    print("real [%s]:" % tag)
    for s in real["steps"]:
        print("  import %s: %s%s" % (s["import"], "ok" if s["ok"] else "FAILED: " + str(s["error"]),
                                      "".join("\n    + " + m for m in under(s["new"], root))))
    for o in real["omp"]:
        print("  OpenMP %s: omp_get_max_threads %d, %d after omp_set_num_threads(1) on the first"
              % (o["path"], o["max_threads"], o["after_first_set_1"]))


# ---------------------------------------------------------------- the mldoctor half

def run_check_py(python, *args, env, json_out=True):
    """`mldoctor check --python PYTHON ARGS [--json]`. Returns (document or
    None, CompletedProcess)."""
    cmd = [MLDOCTOR, "check", "--python", python] + list(args) + (["--json"] if json_out else [])
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    if not json_out:
        return None, p
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        fail("%s: exit %d, stdout is not one JSON object\nstdout:\n%s\nstderr:\n%s"
             % (" ".join(cmd), p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
        return None, p
    check(p.returncode in (0, 1), "%s: exit %d (0 or 1 expected)\nstderr:\n%s"
          % (" ".join(cmd), p.returncode, p.stderr))
    return doc, p


def check_steps(doc):
    return ((doc or {}).get("imports") or {}).get("steps") or []


def check_runtimes(doc):
    return ((doc or {}).get("imports") or {}).get("openmp_runtimes") or []


def check_objects(doc):
    """The objects check's replay ends with ({"path", "loaded_by"})."""
    return ((doc or {}).get("imports") or {}).get("objects") or []


def import_of(loaded_by):
    """"import torch (torch._C)" -> "torch"."""
    if loaded_by and loaded_by.startswith("import "):
        return loaded_by[len("import "):].split(" ", 1)[0]
    return None


def evidence_paths(f):
    """The paths of a finding's "soname => path" evidence lines."""
    out = []
    for e in f.get("evidence") or []:
        text = e.get("text", "") if isinstance(e, dict) else str(e)
        if " => " in text:
            out.append(os.path.realpath(text.split(" => ", 1)[1].strip()))
    return out


# ---------------------------------------------------------------- comparisons

def compare_objects(doc, real, root, what):
    """check's final objects under ROOT against the files under ROOT that the
    real process has mapped, and the import that brought each."""
    if doc is None or real is None:
        return
    predicted = {os.path.realpath(o["path"]): o.get("loaded_by") for o in check_objects(doc)
                 if isinstance(o, dict) and o.get("path")}
    pred_under = under(predicted, root)
    real_under = under(real["maps"], root)
    if not check(pred_under == real_under,
                 "%s: the objects under %s\n  real process maps: %s\n  check's replay:    %s\n"
                 "  only real: %s\n  only check: %s"
                 % (what, root, real_under, pred_under, sorted(set(real_under) - set(pred_under)),
                    sorted(set(pred_under) - set(real_under)))):
        return
    for p in real_under:
        check(import_of(predicted[p]) == brought_by(real, p),
              "%s: %s is brought by import %s for real; check says %r"
              % (what, p, brought_by(real, p), predicted[p]))


def real_runtimes(real):
    return sorted(os.path.realpath(o["path"]) for o in (real or {}).get("omp") or [])


def compare_runtimes(doc, real, what):
    """check's OpenMP runtimes against the mapped objects that define
    omp_get_max_threads in the real process, and the import that brought each."""
    if doc is None or real is None:
        return
    pred = {os.path.realpath(r["path"]): r.get("loaded_by") for r in check_runtimes(doc)}
    if not check(sorted(pred) == real_runtimes(real),
                 "%s: OpenMP runtimes\n  real process (maps, omp_get_max_threads): %s\n"
                 "  check's openmp_runtimes:                  %s"
                 % (what, real_runtimes(real), sorted(pred))):
        return
    for p, by in sorted(pred.items()):
        check(import_of(by) == brought_by(real, p),
              "%s: runtime %s is brought by import %s for real; check says %r"
              % (what, p, brought_by(real, p), by))


def separate_pools(real, what):
    """The real runtimes are separate pools: omp_set_num_threads(1) through
    the first changes only the first (and its own copies' callers)."""
    omp = (real or {}).get("omp") or []
    if len(omp) < 2:
        return
    check(omp[0]["after_first_set_1"] == 1 and all(o["after_first_set_1"] == o["max_threads"] for o in omp[1:]),
          "%s: each OpenMP copy keeps its own thread count: %r" % (what, omp))


def real_step(real, name):
    for s in (real or {}).get("steps") or []:
        if s["import"] == name:
            return s
    return None


def check_step_for(doc, path):
    rp = os.path.realpath(path)
    for s in check_steps(doc):
        if os.path.realpath(s.get("path", "")) == rp:
            return s
    return None
