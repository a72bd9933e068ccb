#!/usr/bin/python3
"""GRACE's torch signum compress against ours, each as a ratio to a memcpy of the same run.

GRACE's SignumCompressor.compress (grace_dl/torch/compressor/signum.py), as written there:
  m = (1 - beta) * g + beta * m_prev   (after the first call), kept as the next m_prev
  signs = (m >= 0).type(torch.uint8)    (one byte per element: GRACE packs no bits)
timed on one thread (torch.set_num_threads), on thread CPU time, against tensor.copy_ of the
same tensor (torch's memcpy); then bytecomp-codec-bench --codecs=signum on the same size, whose
signum encode is the same momentum update and signs, against C memcpy. Repeats both and prints
medians. Needs torch: run with the interpreter that has it (/usr/bin/python3 here).

  /usr/bin/python3 bench/compress/grace_signum.py [--size 16777216] [--reps 7] [--repeats 3]
      [--threads 1] [--bin build/bin]
"""
import argparse
import os
import re
import statistics
import subprocess
import time

import torch


def grace_signum_compress(state, tensor, momentum):
    """grace_dl/torch/compressor/signum.py SignumCompressor.compress, for one tensor name."""
    tensor = tensor.flatten()
    if "m" in state:
        tensor = (1.0 - momentum) * tensor + momentum * state["m"]
    state["m"] = tensor
    tensor_compressed = tensor >= 0
    return tensor_compressed.type(torch.uint8)


def torch_seconds(fn, reps, clock):
    fn()  # warm-up: allocations, page faults
    times = []
    for _ in range(reps):
        a = clock()
        fn()
        times.append(clock() - a)
    return statistics.median(times)


def torch_ratios(n, reps, momentum, clock):
    g = torch.randn(n, dtype=torch.float32) * 0.01
    dst = torch.empty_like(g)
    memcpy_s = torch_seconds(lambda: dst.copy_(g), reps, clock)
    state = {}
    grace_signum_compress(state, g, momentum)  # the first call only stores m
    signum_s = torch_seconds(lambda: grace_signum_compress(state, g, momentum), reps, clock)
    return 4 * n / memcpy_s / 1e9, 4 * n / signum_s / 1e9


def ours(bin_dir, n, reps):
    out = subprocess.run([os.path.join(bin_dir, "bytecomp-codec-bench"), "--codecs=signum",
                          f"--sizes={n}", f"--reps={reps}"], capture_output=True, text=True,
                         check=True, timeout=600).stdout
    row = re.search(r"^signum\s+([\d.]+)\s.*\s([\d.]+)$", out, re.M)  # enc GB/s ... memcpy GB/s
    return float(row.group(2)), float(row.group(1))


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=16 * 1024 * 1024, help="floats (64 MiB)")
    p.add_argument("--reps", type=int, default=7, help="timed calls per measurement")
    p.add_argument("--repeats", type=int, default=3, help="alternations of torch and ours")
    p.add_argument("--threads", type=int, default=1, help="torch threads (ours: one)")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--bin", default=os.environ.get("BYTECOMP_BIN_DIR",
                                                   os.path.join(root, "build", "bin")))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    # One thread: its CPU time, as bytecomp-codec-bench measures; several: wall time.
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    rows = {"torch memcpy": [], "grace signum": [], "memcpy": [], "signum": []}
    for _ in range(args.repeats):
        torch_memcpy, grace = torch_ratios(args.size, args.reps, args.momentum, clock)
        memcpy, enc = ours(args.bin, args.size, args.reps)
        for key, value in (("torch memcpy", torch_memcpy), ("grace signum", grace),
                           ("memcpy", memcpy), ("signum", enc)):
            rows[key].append(value)
    med = {key: statistics.median(values) for key, values in rows.items()}
    print(f"{args.size} floats ({4 * args.size / 2**20:.0f} MiB), torch {torch.__version__} on "
          f"{args.threads} thread(s), medians of {args.repeats} x {args.reps}; GB/s of fp32 input")
    print(f"{'':28s} {'GB/s':>8s} {'reference GB/s':>15s} {'/ reference':>12s}")
    print(f"{'GRACE signum (torch)':28s} {med['grace signum']:8.2f} "
          f"{med['torch memcpy']:15.2f} {100 * med['grace signum'] / med['torch memcpy']:11.1f}%"
          "   (reference: tensor.copy_)")
    print(f"{'bytecomp signum encode':28s} {med['signum']:8.2f} {med['memcpy']:15.2f} "
          f"{100 * med['signum'] / med['memcpy']:11.1f}%   (reference: memcpy)")
    print(f"bytecomp / GRACE: {med['signum'] / med['grace signum']:.2f}x")


if __name__ == "__main__":
    main()
