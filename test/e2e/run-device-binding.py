#!/usr/bin/env python3
"""`mldoctor run` and the calls that bind a rank to a GPU (issue 19 item 4).

Small C programs call cudaSetDevice/cudaGetDevice, cuDevicePrimaryCtxRetain/
cuCtxSetCurrent and NCCL's ncclGetUniqueId/ncclCommInitRank[Config]/
ncclCommInitAll/ncclCommSplit, linked against the real libcudart and libnccl
of /usr/local/cuda when it has them (a toolkit without a driver: the calls
fail with the libraries' own error codes and are still observed), and always
also against stand-in libraries built here with the same sonames and
function names (what they return depends on every byte of the arguments, the
128-byte ncclUniqueId passed by value included, so a wrapper that passed
anything differently changes the output).

Oracle: the libraries themselves. Each program prints every return code,
out-parameter and errno; that output must be byte-identical with and without
`mldoctor run`.

mldoctor half, with a launcher that starts 2 ranks with RANK/LOCAL_RANK/
WORLD_SIZE as torchrun does (rank 0 passes its unique id to rank 1 through a
file): (i) ranks that never call cudaSetDevice → DIST001 names rank 1, its
pid and device 0, with torch.cuda.set_device(local_rank) as the fix; (ii) both
ranks call cudaSetDevice(0) → DIST002 names both ranks, their pids and device
0, and says the call failed where it did; (iii) CUDA_VISIBLE_DEVICES=0 and
cudaSetDevice(LOCAL_RANK) → DIST003 for rank 1.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import CC, check, check_eq, check_in, finish, scratch  # noqa: E402
from scenarios import findings, run_traced, scenario_env  # noqa: E402

CUDA = "/usr/local/cuda"
t = scratch()

# Declared here, not from the toolkit's headers, so the same source builds
# against the stand-ins on a machine without CUDA. The types are the ABI's:
# enums are int, handles pointers, ncclUniqueId 128 bytes by value.
DECLS = r"""
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
typedef struct { char internal[128]; } ncclUniqueId;
typedef void* ncclComm_t;
typedef void* CUcontext;
int cudaSetDevice(int);
int cudaGetDevice(int*);
int cuDevicePrimaryCtxRetain(CUcontext*, int);
int cuCtxSetCurrent(CUcontext);
int ncclGetUniqueId(ncclUniqueId*);
int ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int);
int ncclCommInitRankConfig(ncclComm_t*, int, ncclUniqueId, int, void*);
int ncclCommInitAll(ncclComm_t*, int, const int*);
int ncclCommSplit(ncclComm_t, int, int, ncclComm_t*, void*);
/* A pointer the library wrote, as a fact that does not depend on ASLR. */
static const char* ptr(void* p, void* sentinel) {
  return p == sentinel ? "unchanged" : p ? "set" : "NULL";
}
"""

# Every wrapped function, edge arguments included.
TRANSPARENCY = DECLS + r"""
int main(void) {
  int d = -7, r;
  errno = 1234; r = cudaGetDevice(&d); printf("cudaGetDevice = %d, d = %d, errno %d\n", r, d, errno);
  errno = 1234; r = cudaGetDevice(NULL); printf("cudaGetDevice(NULL) = %d, errno %d\n", r, errno);
  errno = 1234; r = cudaSetDevice(-1); printf("cudaSetDevice(-1) = %d, errno %d\n", r, errno);
  errno = 1234; r = cudaSetDevice(1); printf("cudaSetDevice(1) = %d, errno %d\n", r, errno);
  d = -7; r = cudaGetDevice(&d); printf("cudaGetDevice = %d, d = %d\n", r, d);
  CUcontext ctx = (CUcontext)0x4321;
  errno = 1234; r = cuDevicePrimaryCtxRetain(&ctx, 0);
  printf("cuDevicePrimaryCtxRetain = %d, ctx %s, errno %d\n", r, ptr(ctx, (void*)0x4321), errno);
  errno = 1234; r = cuCtxSetCurrent(NULL); printf("cuCtxSetCurrent(NULL) = %d, errno %d\n", r, errno);
  ncclUniqueId id;
  memset(&id, 0x5a, sizeof id);
  errno = 1234; r = ncclGetUniqueId(&id);
  int written = 0;
  for (int i = 0; i < 128; i++) written |= id.internal[i] != 0x5a;
  printf("ncclGetUniqueId = %d, id %s, errno %d\n", r, written ? "written" : "unchanged", errno);
  for (int i = 0; i < 128; i++) id.internal[i] = (char)(i * 7 + 3);  /* a known id */
  ncclComm_t c = (ncclComm_t)0x1234;
  errno = 1234; r = ncclCommInitRank(&c, 1, id, 0);
  printf("ncclCommInitRank = %d, comm %s, errno %d\n", r, ptr(c, (void*)0x1234), errno);
  ncclComm_t c2 = (ncclComm_t)0x1234;
  id.internal[100] = 9;
  errno = 1234; r = ncclCommInitRankConfig(&c2, 1, id, 0, NULL);
  printf("ncclCommInitRankConfig = %d, comm %s, errno %d\n", r, ptr(c2, (void*)0x1234), errno);
  int devs[2] = {1, 0};
  ncclComm_t cs[2] = {(ncclComm_t)0x11, (ncclComm_t)0x22};
  errno = 1234; r = ncclCommInitAll(cs, 2, devs);
  printf("ncclCommInitAll = %d, comms %s %s, errno %d\n", r, ptr(cs[0], (void*)0x11), ptr(cs[1], (void*)0x22), errno);
  ncclComm_t nc = (ncclComm_t)0x99;
  errno = 1234; r = ncclCommSplit(NULL, 3, -1, &nc, NULL);
  printf("ncclCommSplit(NULL) = %d, newcomm %s, errno %d\n", r, ptr(nc, (void*)0x99), errno);
  return 0;
}
"""

# One rank: argv[1] says how it binds its device before ncclCommInitRank.
RANK = DECLS + r"""
int main(int argc, char** argv) {
  const char* how = argc > 1 ? argv[1] : "none";
  int rank = atoi(getenv("RANK")), nranks = atoi(getenv("WORLD_SIZE"));
  int local = atoi(getenv("LOCAL_RANK"));
  const char* idfile = getenv("ID_FILE");
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (rank == 0) {
    int r = ncclGetUniqueId(&id);
    printf("rank %d pid %d ncclGetUniqueId = %d\n", rank, (int)getpid(), r);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", idfile);
    FILE* f = fopen(tmp, "wb");
    fwrite(&id, sizeof id, 1, f);
    fclose(f);
    rename(tmp, idfile);
  } else {
    FILE* f = NULL;
    for (int i = 0; i < 3000 && !(f = fopen(idfile, "rb")); i++) usleep(10000);
    if (!f || fread(&id, sizeof id, 1, f) != 1) { printf("rank %d: no id\n", rank); return 3; }
    fclose(f);
  }
  if (!strcmp(how, "zero") || !strcmp(how, "local")) {
    int dev = !strcmp(how, "zero") ? 0 : local;
    int r = cudaSetDevice(dev);
    printf("rank %d pid %d cudaSetDevice(%d) = %d\n", rank, (int)getpid(), dev, r);
  }
  ncclComm_t comm = (ncclComm_t)0x1234;
  int r = ncclCommInitRank(&comm, nranks, id, rank);
  printf("rank %d pid %d ncclCommInitRank = %d comm %s\n", rank, (int)getpid(), r, ptr(comm, (void*)0x1234));
  return 0;
}
"""

LAUNCH = r"""
import os, subprocess, sys
n, idfile = int(sys.argv[1]), sys.argv[2]
procs = [subprocess.Popen(sys.argv[3:], env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r),
         WORLD_SIZE=str(n), ID_FILE=idfile)) for r in range(n)]
sys.exit(max(p.wait() for p in procs))
"""

# Stand-ins: same sonames and names; results computed from every argument
# byte, out-parameters and errno written, so a changed argument shows.
STANDIN_CUDART = r"""
#include <errno.h>
int cudaSetDevice(int d) { errno = 40 + (d & 7); return d < 0 ? 101 : 100; }
int cudaGetDevice(int* d) { if (!d) return 1; *d = 0; errno = 41; return 0; }
"""
STANDIN_CUDA = r"""
#include <errno.h>
#include <stdint.h>
int cuDevicePrimaryCtxRetain(void** c, int d) { if (c) *c = (void*)(uintptr_t)(0x100 + d); errno = 50; return d ? 101 : 0; }
int cuCtxSetCurrent(void* c) { errno = 51; return c ? 201 : 0; }
"""
STANDIN_NCCL = r"""
#include <errno.h>
#include <stdint.h>
#include <string.h>
typedef struct { char internal[128]; } ncclUniqueId;
static unsigned sum(ncclUniqueId id) { unsigned s = 0; for (int i = 0; i < 128; i++) s = s * 31 + (unsigned char)id.internal[i]; return s; }
int ncclGetUniqueId(ncclUniqueId* id) { if (!id) return 4; memset(id, 0x33, sizeof *id); errno = 60; return 0; }
int ncclCommInitRank(void** c, int n, ncclUniqueId id, int r) {
  unsigned s = sum(id) + (unsigned)n * 7 + (unsigned)r;
  if (c) *c = s % 2 ? (void*)0 : (void*)(uintptr_t)0x1234; errno = (int)(s % 97); return (int)(s % 8); }
int ncclCommInitRankConfig(void** c, int n, ncclUniqueId id, int r, void* cfg) {
  unsigned s = sum(id) * 3 + (unsigned)n + (unsigned)r + (cfg ? 1 : 0);
  if (c && s % 3) *c = (void*)(uintptr_t)s; errno = (int)(s % 89); return (int)(s % 8); }
int ncclCommInitAll(void** cs, int n, const int* devs) {
  int s = n; for (int i = 0; devs && i < n; i++) s = s * 10 + devs[i];
  if (cs && n > 0) cs[0] = (void*)0; errno = s % 83; return s % 8; }
int ncclCommSplit(void* c, int color, int key, void** nc, void* cfg) {
  if (nc) *nc = c ? (void*)0x1 : (void*)0; errno = 70 + color; return c ? 0 : 4 + (key & 1) + (cfg != 0); }
"""


def cc(out, source, *args):
    src = out + ".c"
    with open(src, "w") as f:
        f.write(source)
    subprocess.run([CC, "-o", out, src] + list(args), check=True)
    return out


def build_standins(d):
    os.makedirs(d, exist_ok=True)
    cc(os.path.join(d, "libcudart.so.13"), STANDIN_CUDART, "-shared", "-fPIC", "-Wl,-soname,libcudart.so.13")
    cc(os.path.join(d, "libcuda.so.1"), STANDIN_CUDA, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1")
    cc(os.path.join(d, "libnccl.so.2"), STANDIN_NCCL, "-shared", "-fPIC", "-Wl,-soname,libnccl.so.2")
    return d


def variants():
    """(name, link flags, the ranks' link flags) for the real toolkit when
    present, and the stand-ins."""
    out = []
    lib = os.path.join(CUDA, "lib64")
    have = [os.path.exists(os.path.join(lib, x)) for x in ("libcudart.so", "libnccl.so.2", "stubs/libcuda.so")]
    if all(have):
        # The driver when installed, else the toolkit's stub as libcuda.so.1
        # (its calls fail with CUDA_ERROR_STUB_LIBRARY).
        rpath = [lib]
        ldconfig = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout
        if "libcuda.so.1 " not in ldconfig:
            drv = os.path.join(t, "driver-stub")
            os.makedirs(drv, exist_ok=True)
            os.symlink(os.path.join(lib, "stubs", "libcuda.so"), os.path.join(drv, "libcuda.so.1"))
            rpath.append(drv)
        # The ranks link no libcuda: without a driver their runtime then
        # answers as a training job's would (cudaErrorInsufficientDriver).
        out.append(("real CUDA toolkit (%s)" % os.path.realpath(os.path.join(lib, "libcudart.so")),
                    ["-L" + lib, "-L" + os.path.join(lib, "stubs"), "-lcudart", "-lcuda", "-lnccl",
                     "-Wl,--disable-new-dtags", "-Wl,-rpath," + ":".join(rpath)],
                    ["-L" + lib, "-lcudart", "-lnccl", "-Wl,-rpath," + lib]))
    else:
        print("no CUDA toolkit with libcudart, libnccl and the libcuda stub under %s: stand-ins only" % CUDA)
    sd = build_standins(os.path.join(t, "standin"))
    out.append(("stand-in libraries (%s)" % sd,
                ["-L" + sd, "-l:libcudart.so.13", "-l:libcuda.so.1", "-l:libnccl.so.2", "-Wl,--disable-new-dtags", "-Wl,-rpath," + sd],
                ["-L" + sd, "-l:libcudart.so.13", "-l:libnccl.so.2", "-Wl,-rpath," + sd]))
    return out


def device_calls(doc):
    calls = []
    for p in doc.get("processes") or []:
        for c in p.get("device_calls") or []:
            calls.append((p["pid"], c))
    return calls


env = scenario_env()
real_seen = False
for name, flags, rank_flags in variants():
    real = name.startswith("real")
    tag = "real" if real else "standin"
    print("== %s" % name)

    # (iii) transparency: every result, out-parameter and errno unchanged.
    prog = cc(os.path.join(t, "transparency-" + tag), TRANSPARENCY, *flags)
    plain = subprocess.run([prog], env=env, capture_output=True, text=True, timeout=120)
    print(plain.stdout, end="")
    check(plain.returncode == 0, "%s: the program runs without mldoctor: %s" % (tag, plain.stderr))
    doc, job = run_traced([prog], env, timeout=300)
    check_eq(job.stdout, plain.stdout, "%s: output with and without mldoctor run" % tag)
    check_eq(job.returncode, plain.returncode, "%s: exit status with and without mldoctor run" % tag)
    if doc:
        seen = sorted(set(c["fn"] for _, c in device_calls(doc)))
        check_eq(seen, sorted(["cudaGetDevice", "cudaSetDevice", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent",
                               "ncclGetUniqueId", "ncclCommInitRank", "ncclCommInitRankConfig",
                               "ncclCommInitAll", "ncclCommSplit"]),
                 "%s: every wrapped function was observed" % tag)
        rets = dict((c["fn"] + ("(%s)" % c["device"] if c["fn"] == "cudaSetDevice" else ""), c["ret"])
                    for _, c in device_calls(doc))
        for line in plain.stdout.splitlines():
            m = re.match(r"(cudaSetDevice\((-?\d+)\)|ncclCommInitRank|ncclCommInitAll) = (-?\d+)", line)
            if m:
                check_eq(rets.get(m.group(1)), int(m.group(3)), "%s: the recorded result of %s" % (tag, m.group(1)))
        if real:
            real_seen = True
            print("real results without a driver:", {k: v for k, v in rets.items()})

    # The 2-rank scenarios.
    rank = cc(os.path.join(t, "rank-" + tag), RANK, *rank_flags)
    launch = os.path.join(t, "launch.py")
    with open(launch, "w") as f:
        f.write(LAUNCH)
    for how, extra, rule in (("none", {}, "DIST001"), ("zero", {}, "DIST002"),
                             ("local", {"CUDA_VISIBLE_DEVICES": "0"}, "DIST003")):
        idfile = os.path.join(t, "id-%s-%s" % (tag, how))
        e = dict(env, **extra)
        doc, job = run_traced([sys.executable, launch, "2", idfile, rank, how], e, timeout=300)
        print("-- %s, ranks bind %s:\n%s" % (tag, how, job.stdout), end="")
        pids = dict((int(r), int(p)) for r, p in re.findall(r"rank (\d+) pid (\d+) ncclCommInitRank", job.stdout))
        if not check(sorted(pids) == [0, 1], "%s/%s: both ranks reached ncclCommInitRank: %r %s" % (tag, how, job.stdout, job.stderr)):
            continue
        if not doc:
            continue
        fs = findings(doc, rule)
        if not check(bool(fs), "%s/%s: a %s finding; findings: %s" % (tag, how, rule, [f["rule"] for f in doc["findings"]])):
            continue
        f = fs[0]
        text = f["message"] + "\n" + "\n".join(x.get("text", "") for x in f.get("evidence") or []) + "\n" + f.get("fix", "")
        print("%s: %s" % (rule, f["message"]))
        if rule == "DIST001":
            check_in("rank 1 (pid %d) created its NCCL communicator (ncclCommInitRank) on device 0 without binding a GPU first, while its LOCAL_RANK is 1" % pids[1],
                     f["message"], "%s: DIST001 names rank 1, its pid and device 0" % tag)
            check_in("torch.cuda.set_device(local_rank)", f.get("fix", ""), "%s: DIST001's fix" % tag)
            check(not any("rank 0 (pid" in x["message"] for x in fs), "%s: rank 0 (LOCAL_RANK 0) is not reported: %r" % (tag, fs))
        elif rule == "DIST002":
            check_in("rank 0 (pid %d), rank 1 (pid %d) created one NCCL communicator on the same GPU 0" % (pids[0], pids[1]),
                     f["message"], "%s: DIST002 names both ranks, their pids and the device" % tag)
            set_ret = re.findall(r"rank 1 pid \d+ cudaSetDevice\(0\) = (-?\d+)", job.stdout)
            if set_ret and set_ret[0] != "0":
                check_in("the device was asked for with a call that failed", f["message"],
                         "%s: DIST002 says cudaSetDevice failed (= %s)" % (tag, set_ret[0]))
                check_in("cudaSetDevice(0), which failed", text, "%s: the evidence names the failed call" % tag)
            check(not findings(doc, "DIST001"), "%s: ranks that asked for a device are not unbound (DIST001)" % tag)
        else:
            check_in("rank 1 (pid %d) asked for device 1 (its LOCAL_RANK), but CUDA_VISIBLE_DEVICES=0 makes 1 device (0) visible" % pids[1],
                     f["message"], "%s: DIST003 names rank 1, its pid and its device" % tag)
            check_in("torch.cuda.set_device(0)", f.get("fix", ""), "%s: DIST003's fix" % tag)
            check(len(fs) == 1, "%s: rank 0's device 0 is visible: %r" % (tag, [x["message"] for x in fs]))

if os.path.isdir(os.path.join(CUDA, "lib64")) and os.path.exists(os.path.join(CUDA, "lib64", "libnccl.so.2")):
    check(real_seen, "the real toolkit under %s was used" % CUDA)
finish(os.path.basename(__file__))
