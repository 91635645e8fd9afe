"""mldoctor inside a Debian test root, and other machines' CPUs presented to
a process (not a test itself).

- mldoctor_binds(), mldoctor_argv(args): the built binary runs inside any
  root, bullseye's glibc 2.31 included (the binary needs 2.34): it is
  started through this machine's own ld.so with this machine's copies of the
  libraries it needs (`ldd`'s list, so a sanitizer build brings its runtime),
  all bound under /tmp/mld. Only mldoctor's own process uses them: the
  root's interpreter that `check` asks, and everything `check` reads, are the
  root's own, so the prediction is made for the root's environment, with the
  live /proc, /sys and CPUID the real process also sees.
- presenting(fixture, ...): the bind mounts that show a CPU fixture's CPU
  lists and /proc/cpuinfo (test/fixtures/cpus) in place of this machine's,
  as issue 15's tests do, plus the CPUs a task may run on there (a real
  kernel never lets a mask hold an offline CPU).
"""
import os
import subprocess

CPU_FILES = ("sys/devices/system/cpu/online", "sys/devices/system/cpu/possible", "sys/devices/system/cpu/present",
             "sys/devices/system/cpu/kernel_max", "proc/cpuinfo")


def _ldd(binary):
    """[(name in the root, real path here)] of the loader and the libraries
    `binary` needs, as this machine's ldd resolves them."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    libs = []
    for line in out.splitlines():
        line = line.strip()
        if "=>" in line:
            name, _, rest = line.partition("=>")
            path = rest.strip().rsplit(" (0x", 1)[0]
            if path and path != "not found":
                libs.append((name.strip(), os.path.realpath(path)))
        elif line.startswith("/"):
            path = line.rsplit(" (0x", 1)[0]
            libs.append((os.path.basename(path), os.path.realpath(path)))
    return libs


def mldoctor_binds(binary):
    """Bind mounts (source, target, "ro") that put `binary` and what it needs
    under /tmp/mld in a root (roots.run's `binds`)."""
    binds = [(os.path.realpath(binary), "/tmp/mld/mldoctor", "ro")]
    binds += [(path, "/tmp/mld/lib/" + name, "ro") for name, path in _ldd(binary)]
    return binds


def mldoctor_argv(binary, args):
    """The command line that runs mldoctor `args` in a root set up with
    mldoctor_binds(binary)."""
    ldso = [name for name, _ in _ldd(binary) if name.startswith("ld-linux")]
    return ["/tmp/mld/lib/" + ldso[0], "--library-path", "/tmp/mld/lib", "/tmp/mld/mldoctor"] + list(args)


def cpu_list(text):
    cpus = set()
    for part in text.strip().strip("\0").split(","):
        if part:
            a, _, b = part.partition("-")
            cpus.update(range(int(a), int(b or a) + 1))
    return cpus


def presenting(fixture_dir, cpuinfo=None):
    """(binds, allowed): bind mounts (source, target) of the fixture's CPU
    files over this machine's, `cpuinfo` (a file) in place of the fixture's
    /proc/cpuinfo when given, and the sorted CPUs both this task's mask and
    the fixture's online list hold (run the command under taskset -c with
    them when they differ from the mask)."""
    binds = []
    for f in CPU_FILES:
        src = os.path.join(fixture_dir, f)
        if f == "proc/cpuinfo" and cpuinfo:
            src = cpuinfo
        if os.path.exists(src) and os.path.exists("/" + f):
            binds.append((src, "/" + f))
    with open(os.path.join(fixture_dir, "sys/devices/system/cpu/online")) as f:
        allowed = sorted(cpu_list(f.read()) & os.sched_getaffinity(0))
    return binds, allowed


def host_prefix(binds, cpus=None):
    """A command prefix that runs a command on this machine in a private
    mount namespace with `binds` mounted (and under taskset -c `cpus`)."""
    mounts = " && ".join("mount --bind %s %s" % (s, t) for s, t in binds) or "true"
    prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mounts + ' && exec "$@"', "sh"]
    if cpus:
        prefix += ["taskset", "-c", ",".join(map(str, cpus))]
    return prefix
