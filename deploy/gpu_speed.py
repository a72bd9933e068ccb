"""Each GPU codec's encode and decode speed on 64 MiB from cost tables that
`bytecomp-plan --calibrate` measured on this GPU, next to a device-to-device copy of 64 MiB timed
now (torch, CUDA events, median of 20), and each top-k entry next to torch.topk on a tensor of
the same size and distribution with the same k: run by deploy/gpu_check.sh right after the
calibration, so that all of it is from one run on one device. GB/s of fp32 input; a table's
points are interpolated linearly in bytes where none is at 64 MiB.

    python3 deploy/gpu_speed.py COSTS.pbtxt [COSTS.pbtxt ...]
"""
import math
import re
import statistics
import sys

SIZE = 64 << 20
# Issue 33's targets: these encode at half the device's copy speed or more.
HALF_COPY = {"fp16", "onebit", "signsgd", "qsgd", "randomk"}


def blocks(text, name):
    """The top-level `name { ... }` blocks of protobuf text format (nested braces counted)."""
    out, depth, start = [], 0, None
    for m in re.finditer(r"(\w+)\s*\{|\}", text):
        if m.group(0) == "}":
            depth -= 1
            if depth == 0 and start is not None:
                out.append(text[start:m.end()])
                start = None
        else:
            if depth == 0 and m.group(1) == name:
                start = m.start()
            depth += 1
    return out


def gpu_costs(text):
    """[(name, label, params, encode points, decode points)] for each codec with GPU costs."""
    out = []
    for block in blocks(text, "codecs"):
        name = re.search(r'^codecs \{\s*name: "([^"]+)"', block)
        gpu = [c for c in re.findall(r"\n  costs \{.*?\n  \}", block, re.S) if "DEVICE_GPU" in c]
        if not name or not gpu:
            continue
        params = dict(re.findall(r'params \{\s*key: "([^"]+)"\s*value: "([^"]+)"\s*\}', block))
        memory = re.search(r'\n  memory: "([^"]+)"', block)
        label = name.group(1) + "".join(f" {k}={v}" for k, v in params.items()) + \
            (f" +{memory.group(1)}" if memory else "")

        def points(kind):
            return sorted((int(b), float(u)) for b, u in re.findall(
                kind + r"\s*\{\s*bytes:\s*(\d+)\s*us:\s*([\d.eE+-]+)\s*\}", gpu[0]))
        out.append((name.group(1), label, params, points("encode"), points("decode")))
    return out


def at(points, size):
    for b, u in points:
        if b == size:
            return u
    for (b0, u0), (b1, u1) in zip(points, points[1:]):
        if b0 <= size <= b1:
            return u0 + (u1 - u0) * (size - b0) / (b1 - b0)
    return None


def timed(torch, call, reps=20):
    times = []
    for _ in range(reps + 3):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        call()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3)  # us
    return statistics.median(times[3:])


def main():
    import torch
    tables = [(path, gpu_costs(open(path).read())) for path in sys.argv[1:]]
    src = torch.empty(SIZE // 4, device="cuda")
    dst = torch.empty_like(src)
    copy = SIZE / timed(torch, lambda: dst.copy_(src)) / 1e3
    print(f"device-to-device copy of 64 MiB: {copy:.0f} GB/s (input bytes per second)")
    gen = torch.Generator(device="cuda").manual_seed(12345)
    x = torch.randn(SIZE // 4, device="cuda", generator=gen)
    for path, table in tables:
        print(f"\n{path}: encode and decode of 64 MiB (16M fp32), GB/s of input and x copy")
        print(f"{'codec':<40} {'encode':>8} {'x copy':>7} {'decode':>8} {'x copy':>7}  target")
        for name, label, params, enc, dec in table:
            e, d = at(enc, SIZE), at(dec, SIZE)
            eg = SIZE / e / 1e3 if e else 0.0
            dg = SIZE / d / 1e3 if d else 0.0
            target = ""
            if name in HALF_COPY:
                target = "encode >= 0.5x copy: " + ("met" if eg >= 0.5 * copy else "MISSED")
            if name == "topk":
                ratio = float(params.get("ratio", "0.3"))
                k = min(len(x), max(1, math.ceil(ratio * len(x))))
                ours = e or float("inf")
                theirs = timed(torch, lambda: torch.topk(x.abs(), k, sorted=False), reps=10)
                target = (f"torch.topk(k={k}) {theirs:.0f} us, ours {ours:.0f} us: " +
                          ("met" if ours <= theirs else "MISSED"))
            print(f"{label:<40} {eg:>8.0f} {eg / copy:>7.2f} {dg:>8.0f} {dg / copy:>7.2f}  {target}")


if __name__ == "__main__":
    main()
