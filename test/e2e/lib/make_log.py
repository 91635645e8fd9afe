#!/usr/bin/env python3
"""Writes a realistic training log for golden tests: deterministic noise
(tqdm bars with '\\r', NCCL INFO lines of several ranks, loss lines, Python
warnings, ANSI-coloured logger lines, tracebacks that are harmless) with
incident files inserted at fixed lines.

Usage: make_log.py OUT --lines N [--seed S] [--ranks R] [--gzip] [AT:FILE ...]
AT is the 1-based output line where FILE's lines start; with --ranks, noise
lines carry "[rankK]:" prefixes (incident lines are inserted as written).
"""
import argparse
import gzip
import random


def noise(rnd, ranks):
    host = "gpu-node-%02d" % rnd.randrange(4)
    pid, dev, rank = rnd.randrange(1000, 99999), rnd.randrange(8), rnd.randrange(max(ranks, 1))
    choices = [
        "Epoch %d:  %d%%|%s| %d/5000 [00:%02d<00:%02d, %.2fit/s, loss=%.4f]\r" % (
            rnd.randrange(10), rnd.randrange(100), "#" * rnd.randrange(20), rnd.randrange(5000), rnd.randrange(60),
            rnd.randrange(60), rnd.random() * 9, rnd.random() * 3),
        "%s:%d:%d [%d] NCCL INFO Channel %02d/0 : %d[%d] -> %d[%d] via P2P/IPC" % (
            host, pid, pid + 7, dev, rnd.randrange(24), dev, dev, (dev + 1) % 8, (dev + 1) % 8),
        "%s:%d:%d [%d] NCCL INFO comm 0x%x rank %d nRanks 8 nNodes 1 localRanks 8 localRank %d MNNVL 0" % (
            host, pid, pid + 7, dev, rnd.getrandbits(40), dev, dev),
        "step %d loss %.5f lr %.2e grad_norm %.3f tokens/s %d" % (
            rnd.randrange(10**5), rnd.random() * 4, rnd.random() / 1000, rnd.random() * 5, rnd.randrange(1000, 90000)),
        "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:%d: UserWarning: "
        "The given NumPy array is not writable, and PyTorch does not support non-writable tensors." % rnd.randrange(1, 900),
        "\x1b[32m[INFO]\x1b[0m 2026-11-%02d %02d:%02d:%02d checkpoint saved to /data/ckpt/step_%d.pt" % (
            rnd.randrange(1, 29), rnd.randrange(24), rnd.randrange(60), rnd.randrange(60), rnd.randrange(10**5)),
        "%s | INFO | train.py:%d | throughput %d samples/s, memory %d MiB" % (
            "2026-11-22 10:%02d:%02d" % (rnd.randrange(60), rnd.randrange(60)), rnd.randrange(1, 500),
            rnd.randrange(100, 9000), rnd.randrange(1000, 80000)),
        "Loading extension module fused_adam...",
        "Using /root/.cache/torch_extensions/py311_cu121 as PyTorch extensions root...",
        "NCCL version 2.18.5+cuda12.1",
        "[W socket.cpp:436] [c10d] The server socket has started to listen on [::]:29500.",
        "%s:%d:%d [%d] NCCL INFO Connected all rings" % (host, pid, pid + 7, dev),
        "wandb: Tracking run with wandb version 0.16.0",
    ]
    line = rnd.choice(choices)
    if ranks and not line.endswith("\r"):
        line = "[rank%d]:%s" % (rank, line)
    return line


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--lines", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ranks", type=int, default=0)
    ap.add_argument("--gzip", action="store_true")
    ap.add_argument("incidents", nargs="*")
    args = ap.parse_intermixed_args()
    rnd = random.Random(args.seed)
    inserts = {}
    for spec in args.incidents:
        at, path = spec.split(":", 1)
        with open(path, encoding="utf-8", newline="") as f:
            inserts[int(at)] = f.read().splitlines()
    out = []
    n = 1
    while n <= args.lines:
        if n in inserts:
            for line in inserts[n]:
                out.append(line)
                n += 1
            continue
        line = noise(rnd, args.ranks)
        while n == args.lines and "extensions root" in line:  # a noise line never ends the log:
            line = noise(rnd, args.ranks)                      # that would be a real stall
        # tqdm redraws its bar with '\r': several redraws share one line.
        while line.endswith("\r") and rnd.random() < 0.8:
            line += noise(rnd, 0) if rnd.random() < 0.2 else line.split("\r")[-2] + "\r"
        out.append(line)
        n += 1
    text = "\n".join(out) + "\n"
    opener = gzip.open if args.gzip else open
    with opener(args.out, "wt", encoding="utf-8", newline="") as f:
        f.write(text)


if __name__ == "__main__":
    main()
