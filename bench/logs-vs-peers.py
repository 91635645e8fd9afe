#!/usr/bin/env python3
"""Benchmark: `mldoctor logs` against ripgrep and `grep -E -f` on one big log.

Generates (once, reused while the generator is unchanged) a training log of
at least SIZE bytes (default 1 GiB): tqdm progress bars with '\\r', NCCL INFO
lines from several ranks, loss lines, Python warnings, ANSI-coloured lines,
and about one line in 20,000 that a rule matches. Then runs, one after the
other on the same file with a warm page cache:

  mldoctor logs FILE                   the full knowledge base (threads: usable CPUs, at most 4)
  mldoctor logs -j1 FILE               the same on one thread
  rg -c -f PATTERNS FILE               every log pattern of the knowledge base
  grep -c -E -f PATTERNS FILE          the same patterns in ERE syntax

PATTERNS are taken from `mldoctor rules --json` (every signature pattern and
follow-up pattern), so all three tools look for the same set. Prints wall
time, GB/s, peak RSS and the ratios to mldoctor.

Usage: bench/logs-vs-peers.py [MLDOCTOR] [--size BYTES] [--file PATH]
"""
import argparse
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import time

GEN_VERSION = "1"

NOISE = [
    "Epoch {e}:  {p}%|{bar}| {i}/{n} [00:{s:02d}<00:{r:02d}, {it:.2f}it/s, loss={loss:.4f}]\r",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO Channel {c:02d}/0 : {dev} -> {peer} via P2P/IPC\n",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO comm 0x{comm:x} rank {rank} nranks 8 cudaDev {dev} busId {bus}000 - Init COMPLETE\n",
    "[rank{rank}]: step {i} loss {loss:.5f} lr {lr:.2e} grad_norm {g:.3f} tokens/s {tps}\n",
    "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:{ln}: UserWarning: The given NumPy array is not writable\n",
    "\x1b[32m[INFO]\x1b[0m {date} checkpoint saved to /data/ckpt/step_{i}.pt ({mb} MB)\n",
    "{date} | INFO | train.py:{ln} | throughput {tps} samples/s, memory {mb} MiB, eta 0:{s:02d}:{r:02d}\n",
    "  File \"/opt/app/model/layers_{c}.py\", line {ln}, in forward\n",
]
# Lines some rule matches (one of these per ~20,000 lines).
SIGNALS = [
    "[rank{rank}]: OMP: Error #15: Initializing libiomp5.so, but found libomp.so already initialized.\n",
    "{host}:{pid}:{tid} [{dev}] NCCL WARN Call to ibv_create_qp failed\n",
    "ImportError: /usr/lib/aarch64-linux-gnu/libgomp.so.1: cannot allocate memory in static TLS block\n",
    "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.15 GiB total capacity)\n",
]


def generate(path, size):
    rnd = random.Random(42)
    hosts = ["gpu-node-%02d" % i for i in range(4)]
    written = 0
    lines = 0
    with open(path, "w", buffering=1 << 22, encoding="utf-8", newline="") as f:
        chunk = []
        while written < size:
            lines += 1
            v = dict(
                e=rnd.randrange(100), p=rnd.randrange(100), bar="#" * rnd.randrange(30), i=rnd.randrange(10**6),
                n=10**6, s=rnd.randrange(60), r=rnd.randrange(60), it=rnd.random() * 10, loss=rnd.random() * 4,
                host=rnd.choice(hosts), pid=rnd.randrange(1000, 99999), tid=rnd.randrange(1000, 99999),
                dev=rnd.randrange(8), peer=rnd.randrange(8), c=rnd.randrange(32), comm=rnd.getrandbits(48),
                rank=rnd.randrange(64), bus=rnd.randrange(16, 255), lr=rnd.random() / 1000, g=rnd.random() * 5,
                tps=rnd.randrange(1000, 90000), ln=rnd.randrange(1, 3000), mb=rnd.randrange(100, 90000),
                date="2026-11-%02d %02d:%02d:%02d" % (rnd.randrange(1, 29), rnd.randrange(24), rnd.randrange(60),
                                                       rnd.randrange(60)))
            tmpl = rnd.choice(SIGNALS) if lines % 20000 == 0 else rnd.choice(NOISE)
            line = tmpl.format(**v)
            chunk.append(line)
            written += len(line.encode())
            if len(chunk) >= 4096:
                f.write("".join(chunk))
                chunk = []
        f.write("".join(chunk) + "\n")
    return lines


def patterns(mldoctor):
    doc = json.loads(subprocess.run([mldoctor, "rules", "--json"], check=True, capture_output=True, text=True).stdout)
    pats = []
    for r in doc["rules"]:
        for s in r.get("signatures", []):
            pats.append(s["pattern"])
            if s.get("followed_by"):
                pats.append(s["followed_by"])
    return pats


def to_ere(p):
    # GNU grep -E knows \w \s \S \b but not \d; (?i) is not ERE.
    return p.replace(r"\d", "[0-9]")


def run(cmd):
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    return wall, proc.returncode, out, err


def peak_rss_kb(cmd):
    # GNU time's %M is the peak RSS of the child alone.
    if not shutil.which("/usr/bin/time"):
        return None
    r = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True)
    try:
        return int(r.stderr.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mldoctor", nargs="?", default="build/mldoctor")
    ap.add_argument("--size", type=int, default=1 << 30)
    ap.add_argument("--file", default="/tmp/mldoctor-bench-%s.log")
    args = ap.parse_args()
    path = args.file % args.size if "%s" in args.file else args.file
    stamp = path + ".gen"
    if not (os.path.exists(path) and os.path.exists(stamp) and open(stamp).read() == GEN_VERSION):
        print("generating %s (%d bytes)..." % (path, args.size), file=sys.stderr)
        generate(path, args.size)
        open(stamp, "w").write(GEN_VERSION)
    size = os.path.getsize(path)
    pats = patterns(args.mldoctor)
    pat_file = path + ".patterns"
    ere_file = path + ".ere"
    with open(pat_file, "w") as f:
        f.write("\n".join(pats) + "\n")
    with open(ere_file, "w") as f:
        f.write("\n".join(to_ere(p) for p in pats) + "\n")
    subprocess.run(["cat", path], stdout=subprocess.DEVNULL)  # warm the page cache

    tools = [("mldoctor logs", [args.mldoctor, "logs", path]),
             ("mldoctor logs -j1", [args.mldoctor, "logs", "-j1", path])]
    if shutil.which("rg"):
        tools.append(("rg -c -f", ["rg", "-c", "-f", pat_file, path]))
    tools.append(("grep -c -E -f", ["grep", "-c", "-E", "-f", ere_file, path]))
    print("file: %s, %.2f GB, %d patterns" % (path, size / 1e9, len(pats)))
    results = []
    for name, cmd in tools:
        wall, rc, out, err = run(cmd)
        rss = peak_rss_kb(cmd)
        results.append((name, wall, rc, rss))
        if rc not in (0, 1):
            print("  %s exited %d: %s" % (name, rc, err.decode(errors="replace")[:300]))
    base = results[0][1]
    print("| tool | wall s | GB/s | peak RSS MiB | time vs mldoctor |")
    print("|---|---|---|---|---|")
    for name, wall, rc, rss in results:
        print("| `%s` | %.2f | %.2f | %s | %.2f× |" % (name, wall, size / wall / 1e9,
                                                     "%.0f" % (rss / 1024) if rss else "?", wall / base))


if __name__ == "__main__":
    main()
