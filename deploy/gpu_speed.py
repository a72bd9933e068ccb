"""Each GPU codec's encode and decode speed on 64 MiB from a cost table that
`bytecomp-plan --calibrate` measured on this GPU, next to a device-to-device copy of 64 MiB timed
now (torch, CUDA events, median of 20): run by deploy/gpu_check.sh right after the calibration,
so both are from the same run on the same device. GB/s of fp32 input; the table's points are
interpolated linearly in bytes (its points straddle 64 MiB).

    python3 deploy/gpu_speed.py COSTS.pbtxt
"""
import re
import statistics
import sys

SIZE = 64 << 20
# Issue 33's targets: these encode at half the device's copy speed or more.
HALF_COPY = {"fp16", "onebit", "signsgd", "qsgd", "randomk"}


def gpu_costs(text):
    """[(label, encode points, decode points)] for each codec entry with GPU costs."""
    out = []
    for block in re.split(r"\n(?=codecs \{)", text):
        name = re.search(r'^codecs \{\s*name: "([^"]+)"', block)
        gpu = re.search(r"costs \{ device: DEVICE_GPU(.*?)\n  \}", block, re.S)
        if not name or not gpu:
            continue
        params = re.findall(r'params \{ key: "([^"]+)" value: "([^"]+)" \}', block)
        memory = re.search(r'memory: "([^"]+)"', block)
        label = name.group(1) + "".join(f" {k}={v}" for k, v in params) + \
            (f" +{memory.group(1)}" if memory else "")

        def points(kind):
            m = re.search(kind + r"\s*:\s*\[(.*?)\]", gpu.group(1), re.S)
            return [(int(b), float(u)) for b, u in
                    re.findall(r"bytes: (\d+) us: ([\d.]+)", m.group(1))] if m else []
        out.append((name.group(1), label, points("encode"), points("decode")))
    return out


def at(points, size):
    for (b0, u0), (b1, u1) in zip(points, points[1:]):
        if b0 <= size <= b1:
            return u0 + (u1 - u0) * (size - b0) / (b1 - b0)
    return None


def copy_gbps():
    import torch
    src = torch.empty(SIZE // 4, device="cuda")
    dst = torch.empty_like(src)
    times = []
    for _ in range(23):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return SIZE / statistics.median(times[3:]) / 1e9


def main():
    table = gpu_costs(open(sys.argv[1]).read())
    copy = copy_gbps()
    print(f"device-to-device copy of 64 MiB: {copy:.0f} GB/s (input bytes per second)")
    print(f"{'codec':<36} {'encode GB/s':>11} {'x copy':>7} {'decode GB/s':>11} {'x copy':>7}  target")
    for name, label, enc, dec in table:
        e, d = at(enc, SIZE), at(dec, SIZE)
        eg = SIZE / e / 1e3 if e else 0
        dg = SIZE / d / 1e3 if d else 0
        target = ""
        if name in HALF_COPY:
            target = "encode >= 0.5x copy: " + ("met" if eg >= 0.5 * copy else "MISSED")
        print(f"{label:<36} {eg:>11.0f} {eg / copy:>7.2f} {dg:>11.0f} {dg / copy:>7.2f}  {target}")


if __name__ == "__main__":
    main()
