#!/usr/bin/env python3
"""Writes nominal.pbtxt, the default codec cost table (bytecomp.proto.CostTable).

NOT MEASURED. The numbers are nominal throughputs: CPU per pool thread on a 2020s x86 core
(the host this was written on was not measured because the codec registry was not linked
yet), GPU for a nominal V100-class GPU (launch overhead plus a memory-bound rate). Replace
with `bytecomp-plan --calibrate --costs=<file>` on the real hosts.

Each curve: us = fixed + bytes / (GB/s * 1e3), at sizes 4 KiB .. 256 MiB.

The compressed sizes are not nominal: topk's and dgc's ratios are the ones --calibrate measured
(4-byte values and bit-packed index deltas: 1.32% and 1.15% of fp32 for 1% of the elements,
not the 2% of values with raw int32 indices), and powersgd's sizes follow its format (rank 1
on a near-square matrix: two payloads of 4 + 4 * ceil(sqrt(n)) bytes each, n = bytes / 4).
"""
import math
import os

SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20]

# name, params, memory, ratio, overhead, summable, reencodable,
#   CPU (fixed us, encode GB/s, decode GB/s), GPU (fixed us, encode GB/s, decode GB/s) or None
#   (no kernels), and optionally the exchange fields (proto CostTable.CodecCost).
CODECS = [
    ("fp16", {}, "", 0.5, 0, True, True, (1, 4.0, 4.0), (8, 400, 400)),
    ("topk", {"ratio": "0.01"}, "residual", 0.0132, 8, False, True, (2, 0.2, 8.0), (30, 20, 200),
     {"kept_fraction": 0.01, "union_pull": True}),
    ("randomk", {"ratio": "0.01"}, "residual", 0.01, 8, True, True, (2, 16.0, 8.0), (10, 200, 300)),
    ("onebit", {}, "residual", 1 / 32, 8, False, True, (2, 1.5, 3.0), (15, 200, 300)),
    ("dgc", {"ratio": "0.01"}, "dgc_momentum", 0.0115, 8, False, False, (3, 1.0, 8.0),
     (25, 50, 200)),
    ("qsgd", {"quantum_num": "127"}, "", 0.2578, 0, False, True, (2, 1.0, 3.0), (15, 150, 300)),
    # artopk's single payload is topk's message (values and raw indices): ratio 0.02, of which
    # kept_fraction 0.01 are the values; its encode is the chooser's (topk's selection).
    ("artopk", {"ratio": "0.01"}, "residual", 0.02, 8, False, False, (2, 0.2, 8.0), None,
     {"exchange": "EXCHANGE_SUMMED_INDICES", "kept_fraction": 0.01}),
    # blocksparse's sizes follow each tensor's block_density (the profile); dense here.
    ("blocksparse", {}, "", 1.0, 16, False, False, (2, 4.0, 8.0), None,
     {"exchange": "EXCHANGE_BLOCK_SPARSE"}),
]

# Two-round codecs (CPU costs only here; GPU costs come from calibration on a GPU): name,
# params, memory, CPU (fixed us, encode GB/s, between-rounds GB/s, decode GB/s), and the
# compressed size of an input of this many bytes.
TWO_ROUND = [
    ("powersgd", {}, "powersgd", (2, 2.0, 1.0, 2.0),
     lambda b: 2 * (4 + 4 * math.ceil(math.sqrt(b / 4)))),
]


def curve(fixed, gbps):
    return ": [" + ", ".join(f"{{ bytes: {s} us: {fixed + s / (gbps * 1e3):.3f} }}"
                             for s in SIZES) + "]"


def main():
    lines = [
        "# Default codec cost table: NOMINAL, NOT MEASURED (see gen_nominal_costs.py).",
        "# Replace with `bytecomp-plan --calibrate` output measured on your hosts.",
        'source: "nominal: CPU per thread of a 2020s x86 core, GPU a V100-class device; '
        'not measured"',
    ]
    for name, params, memory, ratio, overhead, summable, reenc, cpu, gpu, *extra in CODECS:
        lines.append("codecs {")
        lines.append(f'  name: "{name}"')
        for k, v in params.items():
            lines.append(f'  params {{ key: "{k}" value: "{v}" }}')
        if memory:
            lines.append(f'  memory: "{memory}"')
        lines.append(f"  ratio: {ratio:.6f}")
        lines.append(f"  overhead_bytes: {overhead}")
        lines.append(f"  summable: {str(summable).lower()}")
        lines.append(f"  reencodable: {str(reenc).lower()}")
        for key, value in (extra[0] if extra else {}).items():
            text = str(value).lower() if isinstance(value, bool) else value
            lines.append(f"  {key}: {text}")
        for device, curves in (("DEVICE_CPU", cpu), ("DEVICE_GPU", gpu)):
            if curves is None:
                continue
            fixed, enc, dec = curves
            lines.append(f"  costs {{ device: {device}")
            lines.append(f"    encode {curve(fixed, enc)}")
            lines.append(f"    decode {curve(fixed, dec)}")
            lines.append("  }")
        lines.append("}")
    for name, params, memory, (fixed, enc, between, dec), size in TWO_ROUND:
        lines.append("codecs {")
        lines.append(f'  name: "{name}"')
        for k, v in params.items():
            lines.append(f'  params {{ key: "{k}" value: "{v}" }}')
        lines.append(f'  memory: "{memory}"')
        big = SIZES[-1]
        lines.append(f"  ratio: {size(big) / big:.8f}")
        lines.append("  two_round: true")
        lines.append("  costs { device: DEVICE_CPU")
        lines.append(f"    encode {curve(fixed, enc)}")
        lines.append(f"    between_rounds {curve(fixed, between)}")
        lines.append(f"    decode {curve(fixed, dec)}")
        lines.append("  }")
        lines.append("  sizes: [" + ", ".join(
            f"{{ bytes: {s} encoded_bytes: {size(s)} }}" for s in SIZES) + "]")
        lines.append("}")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nominal.pbtxt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
