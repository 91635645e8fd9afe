#!/usr/bin/env python3
"""Loader layout differential test: the model against the real ld.so on the
file layouts users really have, beyond files opened by their real path.

Generates, in a temporary directory, layouts built for real with gcc (and
patchelf for DT_NEEDED entries): programs and libraries reached through
symlinks (a venv's `bin/python` -> the real interpreter, `python3` ->
`python3.11`, symlink chains, hard links), symlinked directories (a prefix,
`lib64` -> `lib`, symlinked site-packages with `..` behind them, on
LD_LIBRARY_PATH and in RUNPATH), relative paths resolved against a cwd,
relative RUNPATH entries, `$ORIGIN`, `$LIB` and `$PLATFORM` (bare and braced)
in DT_RUNPATH, DT_RPATH, DT_NEEDED, LD_LIBRARY_PATH and dlopen() names, the
same inode under several names, and damaged or unreadable candidates earlier
in the search path (a file the user cannot read, a directory the user cannot
search, truncated libraries, a non-ELF file, an empty file, a directory, a
file of the other ELF class or machine, a dangling symlink, a symlink loop,
and a library whose section header table is garbage, which ld.so never reads).
No layout depends on this machine's CPU: `$PLATFORM` and `$LIB` directories
exist for every value glibc could substitute, each with its own copy.

For each program it compares the ordered (name, path or "not found") list
that `mldoctor libs --json PATH` predicts with the real loader in trace mode
as the program is really run: LD_TRACE_LOADED_OBJECTS=1 and the program
executed by the given path from the given cwd (the kernel starts it; ld.so
takes the main program's $ORIGIN from /proc/self/exe, the resolved path).
`ld.so PATH` in trace mode (what `ld.so --list` and ldd do; there $ORIGIN
comes from PATH as given) is run too: the layouts that claim to tell the two
modes apart are checked to do so, and the counts say how often they differ.

For dlopen() it builds a runner that dlopen()s its arguments in order
(RTLD_NOW | RTLD_LOCAL), prints each call's dlerror(), then every loaded object
via dl_iterate_phdr, and compares that with `mldoctor libs RUNNER
--load-order a,b,c --json` run in the same cwd and environment: each call's
outcome and message, and the final link map (l_name of every object, in
order). A call that crashes the real process (a truncated library whose
segments lie past the end of the file: SIGBUS) must be a failure in the model.

Both sides run as an unprivileged user (setpriv to nobody when the test runs
as root), so that permissions really block reads.

Environment: MLDOCTOR (the binary). Optional: MLD_DIFF_REPORT (write a JSON
summary there), MLD_LAYOUTS_KEEP=1 (keep the temporary tree and print it).
"""
import json
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mldtest import parse_trace  # noqa: E402

MLDOCTOR = os.environ.get("MLDOCTOR", "mldoctor")
CC = os.environ.get("CC", "gcc")
NOBODY = 65534

RUNNER_C = r"""
/* layout-runner NAME...: dlopen(NAME, RTLD_NOW | RTLD_LOCAL) each argument in
   order, printing "ok NAME" or "fail NAME: <dlerror()>", then "obj <l_name>"
   for every object of the link map (dl_iterate_phdr order). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>

static int show(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  (void)data;
  printf("obj %s\n", info->dlpi_name ? info->dlpi_name : "");
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  for (int i = 1; i < argc; i++) {
    void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    if (h)
      printf("ok %s\n", argv[i]);
    else
      printf("fail %s: %s\n", argv[i], dlerror());
  }
  dl_iterate_phdr(show, NULL);
  return 0;
}
"""


# ─── building blocks ────────────────────────────────────────────────────────

def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, **kw)


def mkdirs(*paths):
    for p in paths:
        os.makedirs(p, exist_ok=True)


def _link_flags(runpath, rpath):
    flags = []
    if rpath is not None:
        flags += ["-Wl,--disable-new-dtags", "-Wl,-rpath," + rpath]
    if runpath is not None:
        flags += ["-Wl,--enable-new-dtags", "-Wl,-rpath," + runpath]
    return flags


def _add_needed(path, needed):
    # One patchelf call keeps the names in the order given, before libc.
    if needed:
        cmd = ["patchelf"]
        for n in needed:
            cmd += ["--add-needed", n]
        run(cmd + [path])


def lib(path, soname=None, needed=(), runpath=None, rpath=None):
    """A shared object at `path` with the given DT_NEEDED names (any string:
    DSTs and slashes included), DT_SONAME, DT_RUNPATH or DT_RPATH."""
    mkdirs(os.path.dirname(path))
    sym = "f_" + "".join(c if c.isalnum() else "_" for c in os.path.relpath(path, ROOT[0]))
    cmd = [CC, "-shared", "-fPIC", "-o", path, "-xc", "-", "-xnone"]
    if soname:
        cmd.append("-Wl,-soname," + soname)
    run(cmd + _link_flags(runpath, rpath), input=("int %s(void){return 1;}\n" % sym).encode())
    _add_needed(path, needed)
    return path


def exe(path, needed=(), runpath=None, rpath=None, source=None):
    """A PIE program at `path` with the given DT_NEEDED names."""
    mkdirs(os.path.dirname(path))
    src = source if source is not None else "int main(void){return 0;}\n"
    run([CC, "-o", path, "-xc", "-", "-xnone"] + _link_flags(runpath, rpath), input=src.encode())
    _add_needed(path, needed)
    return path


def runner(path, runpath=None, rpath=None):
    return exe(path, runpath=runpath, rpath=rpath, source=RUNNER_C)


def copy(src, dst):
    mkdirs(os.path.dirname(dst))
    shutil.copyfile(src, dst)
    return dst


def symlink(target, link):
    mkdirs(os.path.dirname(link))
    os.symlink(target, link)
    return link


def write(path, data):
    mkdirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(data)
    return path


def truncated(src, dst, size):
    with open(src, "rb") as f:
        data = f.read()
    return write(dst, data[:size if size >= 0 else len(data) + size])


def patched(src, dst, fn):
    with open(src, "rb") as f:
        data = bytearray(f.read())
    fn(data)
    return write(dst, bytes(data))


def broken_sections(data):
    # e_shoff far past the end of the file, e_shnum garbage, e_shstrndx out
    # of range: ld.so never reads the section header table.
    struct.pack_into("<Q", data, 40, len(data) + 0x100000)
    struct.pack_into("<H", data, 60, 0xfff0)
    struct.pack_into("<H", data, 62, 0xfff1)


def other_class(data):
    data[4] = 1  # ELFCLASS32


def other_machine(data):
    struct.pack_into("<H", data, 18, 183)  # EM_AARCH64


def interp_of(path):
    """PT_INTERP of an ELF64 little-endian file."""
    with open(path, "rb") as f:
        data = f.read()
    phoff, = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 3:
            return data[p_offset:p_offset + p_filesz].split(b"\0")[0].decode()
    return None


ROOT = [None]


# ─── the layouts ────────────────────────────────────────────────────────────
# Each returns runs: ("program", path, cwd, env, expect_list_differs) or
# ("dlopen", runner, cwd, env, names). expect_list_differs: True when the
# layout is meant to make `ld.so PATH` differ from the direct execution,
# False when it must not, None when it does not matter.

def venv_interpreter(d):
    """conda/venv: bin/python -> the real interpreter elsewhere, python3 ->
    python3.11 in the same directory, a chain of links, relative paths."""
    store, venv = d + "/store", d + "/venv"
    lib(store + "/lib/libpython3.11.so.1.0", soname="libpython3.11.so.1.0", needed=["libpyhelper.so"],
        runpath="$ORIGIN")
    lib(store + "/lib/libpyhelper.so", soname="libpyhelper.so")
    # Decoys where the unresolved $ORIGIN would look.
    lib(venv + "/lib/libpython3.11.so.1.0", soname="libpython3.11.so.1.0")
    exe(store + "/bin/python3.11", needed=["libpython3.11.so.1.0"], runpath="$ORIGIN/../lib")
    symlink("python3.11", store + "/bin/python3")
    symlink(store + "/bin/python3.11", venv + "/bin/python")
    symlink("python", venv + "/bin/python3")
    symlink("../../store/bin/python3", venv + "/bin/python3.11")
    return [
        ("program", venv + "/bin/python", d, {}, True),
        ("program", venv + "/bin/python3", d, {}, True),
        ("program", venv + "/bin/python3.11", d, {}, True),
        ("program", store + "/bin/python3", d, {}, False),
        ("program", "bin/python", venv, {}, True),
        ("program", "./python3", store + "/bin", {}, True),
        ("program", "../venv/bin/python3", store, {}, True),
    ]


def symlinked_prefix(d):
    """The whole prefix through a directory symlink, and a hard link."""
    real = d + "/real"
    lib(real + "/lib/libapp.so", soname="libapp.so", needed=["libappdep.so"], runpath="$ORIGIN")
    lib(real + "/lib/libappdep.so", soname="libappdep.so")
    exe(real + "/bin/app", needed=["libapp.so"], runpath="$ORIGIN/../lib")
    symlink("real", d + "/link")
    mkdirs(d + "/other/bin")
    os.link(real + "/bin/app", d + "/other/bin/app")
    lib(d + "/other/lib/libapp.so", soname="libapp.so")  # what the hard link's $ORIGIN finds
    return [
        ("program", d + "/link/bin/app", d, {}, True),
        ("program", "./bin/app", d + "/link", {}, True),
        ("program", "link/bin/../bin/app", d, {}, True),
        ("program", d + "/other/bin/app", d, {}, False),
        ("program", real + "/bin/app", d, {}, False),
    ]


def lib64_link(d):
    """lib64 -> lib, RUNPATHs through it, $ORIGIN of objects found there."""
    p = d + "/prefix"
    lib(p + "/lib/sub/libb.so", soname="libb.so")
    lib(p + "/lib/liba.so", soname="liba.so", needed=["libb.so"], runpath="$ORIGIN/../lib64/sub")
    symlink("lib", p + "/lib64")
    exe(p + "/bin/prog", needed=["liba.so"], runpath="$ORIGIN/../lib64")
    symlink(p + "/bin/prog", d + "/prog-link")
    return [("program", p + "/bin/prog", d, {}, False), ("program", d + "/prog-link", d, {}, None)]


def dotdot_behind_symlink(d):
    """site-packages symlinked to a store: `..` after a symlinked directory is
    the target's parent (the kernel resolves it), not the link's."""
    v, s = d + "/venv", d + "/store/pkg"
    lib(s + "/libs/libdep.so", soname="libdep.so")
    lib(v + "/libs/libdep.so", soname="libdep.so")  # the lexical answer: a decoy
    lib(s + "/site/ext.so", soname="ext.so", needed=["libdep.so"], runpath="$ORIGIN/../libs")
    symlink(s + "/site", v + "/site")
    exe(v + "/bin/prog", needed=["ext.so"], runpath="$ORIGIN/../site")
    exe(v + "/bin/prog2", needed=["libdep.so"], runpath="$ORIGIN/../site/../libs")
    # A library file that is a symlink into the store: its own $ORIGIN is the
    # link's directory (the path it was opened by), not the target's.
    lib(s + "/real/libfl.so", soname="libfl.so", needed=["libfldep.so"], runpath="$ORIGIN/fldeps")
    lib(s + "/real/fldeps/libfldep.so", soname="libfldep.so")
    lib(v + "/lib/fldeps/libfldep.so", soname="libfldep.so")
    symlink(s + "/real/libfl.so", v + "/lib/libfl.so")
    exe(v + "/bin/prog3", needed=["libfl.so"], runpath="$ORIGIN/../lib")
    return [("program", v + "/bin/prog", d, {}, False), ("program", v + "/bin/prog2", d, {}, False),
            ("program", v + "/bin/prog3", d, {}, False)]


# Every value glibc could substitute for $LIB and $PLATFORM here: each gets a
# copy, so no layout depends on this machine's CPU.
LIB_VALUES = ["lib/x86_64-linux-gnu", "lib64", "lib", "usr/lib64", "lib/amd64"]
PLATFORM_VALUES = ["x86_64", "haswell", "xeon_phi", "i686", "aarch64"]


def copies_per_dst(per_lib, per_platform):
    """Builds each (path pattern, soname) once per $LIB value and once per
    $PLATFORM value; the pattern's %s is the value."""
    for value in LIB_VALUES:
        for pattern, soname in per_lib:
            lib(pattern % value, soname=soname)
    for value in PLATFORM_VALUES:
        for pattern, soname in per_platform:
            lib(pattern % value, soname=soname)


def dst_lib_platform(d):
    """$LIB and $PLATFORM, bare and braced, in RUNPATH, RPATH and DT_NEEDED;
    a copy under every value glibc could substitute."""
    copies_per_dst([(d + "/%s/liblibdst.so", "liblibdst.so"), (d + "/%s/libneeddst.so", "libneeddst.so")],
                   [(d + "/plat/%s/libplat.so", "libplat.so"), (d + "/rp/%s/librp.so", "librp.so")])
    lib(d + "/lib/libr.so", soname="libr.so", needed=["librp.so"], rpath="$ORIGIN/../rp/$PLATFORM")
    exe(d + "/bin/prog", needed=["liblibdst.so", "libplat.so", "$ORIGIN/../$LIB/libneeddst.so", "libr.so"],
        runpath="$ORIGIN/../$LIB:$ORIGIN/../plat/${PLATFORM}:$ORIGIN/../lib")
    symlink(d + "/bin/prog", d + "/elsewhere/prog")
    return [("program", d + "/bin/prog", d, {}, False), ("program", d + "/elsewhere/prog", d, {}, True)]


def rpath_chain(d):
    """DT_RPATH of the executable serves its dependencies' needs; a loader
    with DT_RUNPATH uses neither its own nor the chain's DT_RPATH."""
    lib(d + "/lib/libb.so", soname="libb.so")
    lib(d + "/lib/libd.so", soname="libd.so")
    lib(d + "/lib/private/libc2.so", soname="libc2.so")
    lib(d + "/lib/liba.so", soname="liba.so", needed=["libb.so", "libc2.so"], rpath="$ORIGIN/private")
    lib(d + "/other/libr.so", soname="libr.so", needed=["libd.so"], runpath="$ORIGIN/rp")
    exe(d + "/bin/prog", needed=["liba.so", "libr.so"], rpath="$ORIGIN/../lib:$ORIGIN/../other")
    symlink("../bin/prog", d + "/sbin/prog")
    return [("program", d + "/bin/prog", d, {}, False), ("program", d + "/sbin/prog", d, {}, True)]


def needed_paths(d):
    """DT_NEEDED entries with a slash: $ORIGIN-relative and cwd-relative."""
    lib(d + "/lib/libp.so", soname="libp.so")
    lib(d + "/lib/librel.so", soname="librel.so")
    lib(d + "/elsewhere/lib/librel.so", soname="librel.so")
    exe(d + "/bin/prog", needed=["$ORIGIN/../lib/libp.so", "lib/librel.so"])
    symlink(d + "/bin/prog", d + "/elsewhere/bin/prog")
    return [
        ("program", d + "/bin/prog", d, {}, False),
        ("program", d + "/bin/prog", d + "/elsewhere", {}, False),
        ("program", d + "/bin/prog", d + "/bin", {}, False),
        ("program", d + "/elsewhere/bin/prog", d + "/elsewhere", {}, True),
    ]


def same_inode(d):
    """One file under several names: a symlink, a hard link, a symlinked
    directory; the first map wins, later names join it."""
    lib(d + "/lib/liba.so", soname="liba.so")
    symlink("liba.so", d + "/lib/libalias.so")
    os.link(d + "/lib/liba.so", d + "/lib/libhard.so")
    symlink("lib", d + "/liblink")
    lib(d + "/lib/libz.so", soname="libz-fixture.so", needed=["liba.so", "libviadir.so"])
    symlink("liba.so", d + "/lib/libviadir.so")
    exe(d + "/bin/prog", needed=["libalias.so", "libhard.so", "libz.so", "liba.so"],
        runpath="$ORIGIN/../liblink:$ORIGIN/../lib")
    exe(d + "/bin/prog2", needed=["libhard.so", "$ORIGIN/../lib/liba.so", "libalias.so"],
        runpath="$ORIGIN/../lib")
    return [("program", d + "/bin/prog", d, {}, False), ("program", d + "/bin/prog2", d, {}, False)]


def relative_runpath(d):
    """RUNPATH entries without $ORIGIN are relative to the process's cwd."""
    lib(d + "/a/lib/libq.so", soname="libq.so")
    lib(d + "/b/lib2/libq.so", soname="libq.so")
    exe(d + "/bin/prog", needed=["libq.so"], runpath="lib:../lib2:")
    mkdirs(d + "/b/lib")
    return [
        ("program", d + "/bin/prog", d + "/a", {}, False),
        ("program", d + "/bin/prog", d + "/b/lib", {}, False),
        ("program", d + "/bin/prog", d + "/b", {}, False),
    ]


def notdir_in_path(d):
    """A search directory that is a regular file: an absolute one is skipped
    (open_path marks it nonexisting), a relative one ends that list (ENOTDIR
    from a directory open_path never stats)."""
    write(d + "/afile", b"not a directory\n")
    lib(d + "/d2/libn.so", soname="libn.so")
    exe(d + "/bin/abs", needed=["libn.so"], runpath="$ORIGIN/../afile:$ORIGIN/../d2")
    exe(d + "/bin/rel", needed=["libn.so"], runpath="afile:d2")
    exe(d + "/bin/llp", needed=["libn.so"])
    return [
        ("program", d + "/bin/abs", d, {}, False),
        ("program", d + "/bin/rel", d, {}, False),
        ("program", d + "/bin/llp", d, {"LD_LIBRARY_PATH": "afile:d2"}, False),
        ("program", d + "/bin/llp", d, {"LD_LIBRARY_PATH": d + "/afile:" + d + "/d2"}, False),
    ]


def ld_library_path_forms(d):
    """LD_LIBRARY_PATH with a symlinked directory, a relative element, an empty
    element (the cwd) and $ORIGIN (of the main program)."""
    lib(d + "/real/libl1.so", soname="libl1.so")
    symlink("real", d + "/linked")
    lib(d + "/cwd/rel/libl2.so", soname="libl2.so")
    lib(d + "/cwd/libl3.so", soname="libl3.so")
    lib(d + "/app/llp/libl4.so", soname="libl4.so")
    lib(d + "/link/llp/libl4.so", soname="libl4.so")  # where the link's $ORIGIN points
    exe(d + "/app/bin/prog", needed=["libl1.so", "libl2.so", "libl3.so", "libl4.so"])
    symlink(d + "/app/bin/prog", d + "/link/bin/prog")
    env = {"LD_LIBRARY_PATH": d + "/linked:rel::$ORIGIN/../llp"}
    return [
        ("program", d + "/app/bin/prog", d + "/cwd", env, False),
        ("program", d + "/link/bin/prog", d + "/cwd", env, True),
        ("program", "../link/bin/prog", d + "/cwd", env, True),
    ]


def unreadable(d):
    """A candidate the user cannot read, in a directory it cannot search,
    earlier in the path: open fails with EACCES and the search goes on."""
    lib(d + "/d2/libu.so", soname="libu.so")
    lib(d + "/d2/libs.so", soname="libs.so")
    copy(d + "/d2/libu.so", d + "/d1/libu.so")
    os.chmod(d + "/d1/libu.so", 0)
    copy(d + "/d2/libs.so", d + "/sealed/libs.so")
    os.chmod(d + "/sealed", 0o600)  # not searchable, even by its owner
    exe(d + "/bin/prog", needed=["libu.so", "libs.so"], runpath="$ORIGIN/../d1:$ORIGIN/../sealed:$ORIGIN/../d2")
    # Only unreadable copies, found by search and named by path: not found.
    lib(d + "/d1/libonly.so", soname="libonly.so")
    os.chmod(d + "/d1/libonly.so", 0)
    exe(d + "/bin/prog2", needed=["libonly.so", "$ORIGIN/../d1/libonly.so", "$ORIGIN/../sealed/libs.so", "libs.so"],
        runpath="$ORIGIN/../d1:$ORIGIN/../sealed:$ORIGIN/../d2")
    return [("program", d + "/bin/prog", d, {}, False), ("program", d + "/bin/prog2", d, {}, False)]


def damaged(d):
    """Damaged files first in the path. Bad headers end the load (ld.so
    reports them); what ld.so never reads (section headers, bytes after the
    last segment) does not matter."""
    good = lib(d + "/good/libx.so", soname="libx.so")
    size = os.path.getsize(good)
    variants = {
        "trunc40": lambda p: truncated(good, p, 40),          # "file too short"
        "trunc100": lambda p: truncated(good, p, 100),        # "cannot read file data"
        "cutend": lambda p: truncated(good, p, -200),         # section headers cut: loads
        "half": lambda p: truncated(good, p, size // 2),      # segments past EOF: SIGBUS
        "notelf": lambda p: write(p, b"INPUT(-lx)\n" * 20),  # "invalid ELF header"
        "empty": lambda p: write(p, b""),                     # "file too short"
        "dir": lambda p: mkdirs(p),                           # "cannot read file data"
        "badsh": lambda p: patched(good, p, broken_sections),  # loads
        "class": lambda p: patched(good, p, other_class),     # skipped
        "machine": lambda p: patched(good, p, other_machine),  # skipped
        "dangling": lambda p: symlink(d + "/nowhere/libx.so", p),  # skipped
        "loop": lambda p: symlink("libx.so", p),              # ELOOP: ends this list
    }
    runs = []
    for name, make in sorted(variants.items()):
        make("%s/%s/libx.so" % (d, name))
        exe("%s/bin/%s" % (d, name), needed=["libx.so"], runpath="$ORIGIN/../%s:$ORIGIN/../good" % name)
        runs.append(("program", "%s/bin/%s" % (d, name), d, {}, False))
    # The same damage met through LD_LIBRARY_PATH, before the RUNPATH.
    exe(d + "/bin/viallp", needed=["libx.so"], runpath="$ORIGIN/../good")
    for name in ("loop", "class", "notelf", "badsh"):
        runs.append(("program", d + "/bin/viallp", d, {"LD_LIBRARY_PATH": "%s/%s" % (d, name)}, False))
    return runs


def dlopen_symlinks(d):
    """dlopen() through symlinked directories, relative paths, one inode
    under two names, a library reached through a symlink whose RUNPATH uses
    $ORIGIN, a DST in the name, the program itself and ld.so by another path."""
    store = d + "/store"
    lib(store + "/lib/libr1.so", soname="libr1.so")
    lib(d + "/venv/lib/libr1.so", soname="libr1.so")  # the unresolved $ORIGIN's answer
    lib(store + "/lib/dep/libadep.so", soname="libadep.so")
    lib(store + "/lib/liba.so", soname="liba.so", needed=["libadep.so"], runpath="$ORIGIN/dep")
    lib(store + "/deps/libbdep.so", soname="libbdep.so")
    lib(store + "/lib/libb.so", soname="libb.so", needed=["libbdep.so"], runpath="$ORIGIN/../deps")
    lib(store + "/ext/sub/libextdep.so", soname="libextdep.so")
    lib(d + "/links/sub/libextdep.so", soname="libextdep.so")
    lib(store + "/ext/libext.so", soname="libext.so", needed=["libextdep.so"], runpath="$ORIGIN/sub")
    symlink(store + "/ext/libext.so", d + "/links/libext.so")
    lib(store + "/lib/libo.so", soname="libo.so")
    os.link(store + "/lib/libo.so", store + "/lib/libohard.so")
    symlink("store", d + "/storelink")
    rn = runner(store + "/bin/runner", runpath="$ORIGIN/../lib")
    symlink(rn, d + "/venv/bin/runner")
    ld = interp_of(rn)
    ld_real = os.path.realpath(ld) if ld else None
    names = [
        "libr1.so",
        d + "/storelink/lib/liba.so",
        store + "/lib/liba.so",
        "./lib/libb.so",
        "lib/libb.so",
        "../storelink/lib/libb.so",
        d + "/links/libext.so",
        "$ORIGIN/../lib/libo.so",
        "libohard.so",
        "liba.so",
        "libmissing.so",
        d + "/nowhere/libmissing.so",
        "$ORIGIN/../nowhere/libmissing.so",
        rn,
        d + "/venv/bin/runner",
    ]
    runs = [("dlopen", d + "/venv/bin/runner", store, {}, names)]
    if ld and ld_real and ld_real != ld:
        runs.append(("dlopen", d + "/venv/bin/runner", store, {}, ["libr1.so", ld_real, ld, "libo.so"]))
    runs.append(("dlopen", "bin/runner", store, {}, ["libr1.so", "./lib/libb.so", "libo.so"]))
    return runs


def dlopen_dsts(d):
    """$LIB, $PLATFORM and $ORIGIN in dlopen() names and in the RUNPATH and
    RPATH of dlopen()ed objects, the DT_RPATH chain of a dlopen()ed object
    and the program's own DT_RPATH (its $ORIGIN resolved) for their needs."""
    copies_per_dst([(d + "/app/%s/libl.so", "libl.so"), (d + "/app/%s/libl2.so", "libl2.so")],
                   [(d + "/app/plat/%s/libp.so", "libp.so"), (d + "/app/plat/%s/libp2.so", "libp2.so")])
    lib(d + "/app/mods/libdst.so", soname="libdst.so", needed=["libl.so", "libp.so"],
        runpath="${ORIGIN}/../$LIB:$ORIGIN/../plat/${PLATFORM}")
    lib(d + "/app/rp/libfrommain.so", soname="libfrommain.so")
    lib(d + "/app/mods/priv/libc2.so", soname="libc2.so")
    lib(d + "/app/mods/priv/libc1.so", soname="libc1.so", needed=["libc2.so", "libfrommain.so"])
    lib(d + "/app/mods/libchain.so", soname="libchain.so", needed=["libc1.so"], rpath="$ORIGIN/priv")
    rn = runner(d + "/app/bin/runner", rpath="$ORIGIN/../rp")
    symlink(rn, d + "/venv/bin/runner")
    # A DT_RUNPATH stops the program's DT_RPATH: this one cannot load.
    lib(d + "/app/mods/libnorp.so", soname="libnorp.so", needed=["libfrommain.so"], runpath="$ORIGIN")
    names = [
        "$ORIGIN/../mods/libnorp.so",
        "$ORIGIN/../mods/libdst.so",
        "${ORIGIN}/../mods/libdst.so",
        "$ORIGIN/../$LIB/libl2.so",
        "$ORIGIN/../plat/$PLATFORM/libp2.so",
        "$ORIGIN/../mods/libchain.so",
        "$ORIGINAL/../mods/libdst.so",
        "$LIBS/libl2.so",
    ]
    return [("dlopen", d + "/venv/bin/runner", d, {}, names), ("dlopen", rn, d + "/app", {}, names)]


def dlopen_damaged(d):
    """dlopen() of damaged and unreadable files, directly and as the first
    candidate of a search; the dependency of a dlopen()ed library too."""
    good = lib(d + "/d2/libu.so", soname="libu.so")
    size = os.path.getsize(good)
    copy(good, d + "/d1/libu.so")
    os.chmod(d + "/d1/libu.so", 0)
    lib(d + "/d2/libw.so", soname="libw.so")
    patched(d + "/d2/libw.so", d + "/d1/libw.so", other_class)
    patched(d + "/d2/libw.so", d + "/only/libw.so", other_class)
    # A dependency of a dlopen()ed library: a file with the ELF magic but
    # another EI_CLASS byte is skipped, a text file ends the dlopen.
    lib(d + "/d2/libn.so", soname="libn.so")
    write(d + "/d1/libn.so", (b"\x7fELF garbage, not a header " * 8)[:160])
    lib(d + "/d2/libnbad.so", soname="libnbad.so")
    write(d + "/d1/libnbad.so", b"not ELF at all\n" * 8)
    lib(d + "/d2/libneedsn.so", soname="libneedsn.so", needed=["libn.so", "libnbad.so"],
        runpath="$ORIGIN/../d1:$ORIGIN/../d2")
    lib(d + "/d2/libneedsok.so", soname="libneedsok.so", needed=["libn.so"],
        runpath="$ORIGIN/../d1:$ORIGIN/../d2")
    truncated(good, d + "/bad/trunc40.so", 40)
    truncated(good, d + "/bad/trunc100.so", 100)
    truncated(good, d + "/bad/cutend.so", -200)
    truncated(good, d + "/bad/half.so", size // 2)
    write(d + "/bad/notelf.so", b"/* GNU ld script */\nGROUP ( libc.so.6 libc_nonshared.a AS_NEEDED ( ld.so ) )\n")
    # open_verify's checks, each with its own message.
    ident = {"version": lambda b: b.__setitem__(6, 0), "osabi": lambda b: b.__setitem__(7, 9),
             "pad": lambda b: b.__setitem__(12, 1), "order": lambda b: b.__setitem__(5, 2),
             "etype": lambda b: struct.pack_into("<H", b, 16, 1),
             "phentsize": lambda b: struct.pack_into("<H", b, 54, 32),
             "phoff": lambda b: struct.pack_into("<Q", b, 32, size - 100)}
    for k, fn in sorted(ident.items()):
        patched(good, "%s/bad/%s.so" % (d, k), fn)
    patched(good, d + "/bad/badsh.so", broken_sections)
    mkdirs(d + "/bad/dir.so")
    rn = runner(d + "/bin/runner", runpath="$ORIGIN/../d1:$ORIGIN/../d2")
    names = [
        d + "/d1/libu.so",
        "libu.so",
        "libw.so",
        d + "/only/libw.so",
        d + "/bad/trunc40.so",
        d + "/bad/trunc100.so",
        d + "/bad/cutend.so",
        d + "/bad/notelf.so",
        d + "/bad/badsh.so",
        d + "/bad/dir.so",
    ] + ["%s/bad/%s.so" % (d, k) for k in sorted(ident)] + [
        "libneedsn.so",
        "libneedsok.so",
        d + "/bad/half.so",
    ]
    return [("dlopen", rn, d, {}, names)]


LAYOUTS = [venv_interpreter, symlinked_prefix, lib64_link, dotdot_behind_symlink, dst_lib_platform,
           rpath_chain, needed_paths, same_inode, relative_runpath, notdir_in_path, ld_library_path_forms,
           unreadable, damaged, dlopen_symlinks, dlopen_dsts, dlopen_damaged]


# ─── running both sides ─────────────────────────────────────────────────────

class Sides:
    """How both sides are run: as an unprivileged user when this is root."""

    def __init__(self, tmp):
        self.prefix = []
        self.mldoctor = MLDOCTOR
        self.note = None
        if os.geteuid() != 0:
            return
        if not shutil.which("setpriv"):
            self.note = "setpriv is missing: running as root, where permissions do not block reads"
            return
        prefix = ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups"]
        # The binary may sit where that user cannot reach it: use a copy.
        # (Probe through env(1) as run() does: setpriv itself may still exec
        # what the user could not.)
        def usable(m):
            return subprocess.run(prefix + ["env", m, "--version"], capture_output=True).returncode == 0
        mld = os.path.abspath(shutil.which(MLDOCTOR) or MLDOCTOR)
        if not usable(mld):
            mld = copy(mld, os.path.join(tmp, "mldoctor"))
            os.chmod(mld, 0o755)
        probe = subprocess.run(prefix + ["test", "-r", os.path.join(tmp, "probe")], capture_output=True)
        if not usable(mld) or probe.returncode:
            self.note = "user %d cannot run mldoctor or reach %s: running as root" % (NOBODY, tmp)
            return
        self.prefix = prefix
        self.mldoctor = mld

    def unprivileged(self):
        return bool(self.prefix) or os.geteuid() != 0

    def run(self, argv, cwd, env, timeout=120):
        # The loader's variables must reach the command, not setpriv (whose
        # own start LD_TRACE_LOADED_OBJECTS would trace): env(1) sets them.
        ld = ["%s=%s" % kv for kv in sorted(env.items()) if kv[0].startswith("LD_")]
        rest = {k: v for k, v in env.items() if not k.startswith("LD_")}
        if self.prefix:
            argv = self.prefix + ["env"] + ld + argv
            env = rest
        p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=timeout)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def base_env(extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LD_") and k not in ("GLIBC_TUNABLES",)}
    env.update({"LC_ALL": "C", "LANG": "C"})
    env.update(extra)
    return env


def trace(sides, argv, cwd, env):
    rc, out, err = sides.run(argv, cwd, dict(env, LD_TRACE_LOADED_OBJECTS="1"))
    fatal = None
    if rc != 0:
        fatal = err.strip().splitlines()[-1] if err.strip() else ("signal %d" % -rc if rc < 0 else "exit %d" % rc)
    return {"objects": parse_trace(out), "fatal": fatal, "signal": rc < 0}


def model_libs(sides, args, cwd, env):
    rc, out, err = sides.run([sides.mldoctor, "libs", "--json", "--fail-on", "error"] + args, cwd, env)
    if rc not in (0, 1, 2) or not out.strip():
        raise SystemExit("mldoctor %s failed (%d): %s" % (" ".join(args), rc, err[-2000:]))
    return json.loads(out)


def errno_texts(message):
    """ld.so's own startup messages say "Error 21" where dlerror() and the
    model say "Is a directory" (rtld carries no strerror table)."""
    return re.sub(r"Error (\d+)$", lambda m: os.strerror(int(m.group(1))), message)


def compare_program(sides, run, report):
    _, path, cwd, extra, expect_differs = run
    env = base_env(extra)
    direct = trace(sides, [path], cwd, env)
    listed = trace(sides, [LDSO[0], path], cwd, env)
    doc = model_libs(sides, [path], cwd, env)
    inp = doc["inputs"][0]
    if "objects" in inp:
        model = {"objects": [(o["name"], o["path"]) for o in inp["objects"][1:]],
                 "fatal": (inp["errors"] or [None])[0]}
    else:
        model = {"objects": [], "fatal": inp.get("error")}
    problems = []
    differs = direct["objects"] != listed["objects"] or bool(direct["fatal"]) != bool(listed["fatal"])
    if differs:
        report["list_mode_differs"] += 1
    if expect_differs is not None and differs != expect_differs:
        problems.append("layout check: ld.so --list %s the direct execution, the layout expects it %s:\n"
                        "    direct: %s\n    --list: %s" % ("differs from" if differs else "agrees with",
                                                           "to differ" if expect_differs else "to agree",
                                                           direct["objects"], listed["objects"]))
    if direct["fatal"]:
        if not model["fatal"]:
            problems.append("ld.so failed (%s) but the model did not: %s" % (direct["fatal"], model["objects"]))
        elif not direct["signal"] and not errno_texts(direct["fatal"]).endswith(model["fatal"]):
            problems.append("errors differ:\n    ld.so: %s\n    model: %s" % (direct["fatal"], model["fatal"]))
        else:
            report["resolutions"] += 1
    elif model["fatal"]:
        problems.append("model failed (%s) but ld.so did not: %s" % (model["fatal"], direct["objects"]))
    elif direct["objects"] != model["objects"]:
        problems.append("objects differ:\n    ld.so: %s\n    model: %s" % (direct["objects"], model["objects"]))
    else:
        report["resolutions"] += len(direct["objects"])
    return problems


def compare_dlopen(sides, run, report):
    _, path, cwd, extra, names = run
    env = base_env(extra)
    rc, out, err = sides.run([path] + names, cwd, env)
    steps, objs = [], []
    for line in out.splitlines():
        if line.startswith("obj "):
            objs.append(line[4:])
        elif line.startswith("ok "):
            steps.append((True, None))
        elif line.startswith("fail "):
            steps.append((False, line[5:].split(": ", 1)[1] if ": " in line[5:] else line[5:]))
    crashed = rc < 0
    if rc != 0 and not crashed:
        return ["runner %s exited %d: %s" % (path, rc, err.strip()[-500:])]
    # The link map without the main program ("") and the vDSO.
    objs = [o for o in objs[1:] if not o.startswith("linux-vdso.so") and not o.startswith("linux-gate.so")]
    doc = model_libs(sides, [path, "--load-order", ",".join(names)], cwd, env)
    inp = doc["inputs"][0]
    if "objects" not in inp or inp["errors"]:
        return ["model could not load the runner: %s" % (inp.get("error") or inp["errors"])]
    m_objs = [o["path"] for o in inp["objects"][1:] if o["found"]]
    m_steps = []
    for st in doc["load_order"]["steps"]:
        m_steps.append((st["ok"], st["error"]))
        if st["ok"]:
            m_objs += st["loaded"]
    problems = []
    for i, name in enumerate(names):
        m = m_steps[i]
        if i >= len(steps):
            if crashed and i == len(steps):
                if m[0]:
                    problems.append("dlopen(%s) crashed the real process (signal %d); the model loads it"
                                    % (name, -rc))
                else:
                    report["resolutions"] += 1
            break
        r = steps[i]
        if r != m:
            problems.append("dlopen(%s):\n    real:  %s\n    model: %s" % (name, r, m))
        else:
            report["resolutions"] += 1
    if crashed:
        return problems
    if objs != m_objs:
        problems.append("link maps differ after %s:\n    real:  %s\n    model: %s" % (names, objs, m_objs))
    else:
        report["resolutions"] += len(objs)
    return problems


LDSO = [None]


def main():
    for tool in (CC, "patchelf"):
        if not shutil.which(tool):
            print("SKIP loader-layouts: %s is missing (scripts/install-deps.sh installs it)" % tool)
            return 77
    # Resolved: a TMPDIR behind a symlink would make every run a symlinked one.
    tmp = os.path.realpath(tempfile.mkdtemp(prefix="mld-layouts-"))
    os.chmod(tmp, 0o755)
    write(os.path.join(tmp, "probe"), b"")
    ROOT[0] = tmp
    keep = os.environ.get("MLD_LAYOUTS_KEEP") == "1"
    report = {"layouts": 0, "runs": 0, "resolutions": 0, "disagreements": 0, "list_mode_differs": 0,
              "skipped": [], "problems": []}
    try:
        sides = Sides(tmp)
        if sides.note:
            print("note: " + sides.note)
        all_runs = []
        for layout in LAYOUTS:
            d = os.path.join(tmp, layout.__name__)
            os.makedirs(d)
            os.chmod(d, 0o755)
            runs = layout(d)
            needs_user = layout in (unreadable, dlopen_damaged)
            if needs_user and not sides.unprivileged():
                report["skipped"].append("%s: needs an unprivileged user (%s)" % (layout.__name__, sides.note))
                print("SKIP %s: needs an unprivileged user to make permissions block reads (%s)"
                      % (layout.__name__, sides.note))
                continue
            report["layouts"] += 1
            all_runs += [(layout.__name__, r) for r in runs]
        LDSO[0] = interp_of(os.path.join(tmp, "venv_interpreter", "store", "bin", "python3.11"))
        for lname, r in all_runs:
            report["runs"] += 1
            problems = (compare_program if r[0] == "program" else compare_dlopen)(sides, r, report)
            what = "%s %s (cwd %s%s)" % (r[0], r[1], os.path.relpath(r[2], tmp),
                                         "".join(" %s=%s" % kv for kv in r[3].items()))
            for p in problems:
                report["problems"].append({"layout": lname, "run": what, "problem": p})
                print("DISAGREE [%s] %s: %s" % (lname, what.replace(tmp, "$T"), p.replace(tmp, "$T")))
        report["disagreements"] = len(report["problems"])
    finally:
        if keep:
            print("kept " + tmp)
        else:
            for dirpath, dirnames, _ in os.walk(tmp):
                for dn in dirnames:
                    try:
                        os.chmod(os.path.join(dirpath, dn), 0o755)
                    except OSError:
                        pass
            shutil.rmtree(tmp, ignore_errors=True)
    print("%d layouts, %d runs, %d resolutions compared, %d disagreements (ld.so --list differs from the "
          "direct execution in %d runs)" % (report["layouts"], report["runs"], report["resolutions"],
                                            report["disagreements"], report["list_mode_differs"]))
    if os.environ.get("MLD_DIFF_REPORT"):
        with open(os.environ["MLD_DIFF_REPORT"], "w") as f:
            json.dump(report, f, indent=1)
    if report["disagreements"]:
        print("loader-layouts: %d disagreements" % report["disagreements"])
        return 1
    print("loader-layouts: all agree with ld.so")
    return 0


if __name__ == "__main__":
    sys.exit(main())
