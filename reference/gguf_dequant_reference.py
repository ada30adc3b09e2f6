#!/usr/bin/env python3
"""Dequantized values of Q2_K, Q3_K, F16 and BF16 data by the `gguf` Python
package (gguf.quants.dequantize), the reference for the Rust dequantization
(kernels/src/quant/dequant.rs, test `dequantization_equals_the_gguf_package`).

The blocks are deterministic bytes (a fixed-seed generator; quantize for
Q2_K / Q3_K is not in the package): all bits set, all clear, alternating and
random quant and scale bytes, under f16 scales from the largest finite to
subnormal, negative and zero. Float data covers zeros of both signs,
subnormals, infinities and the extremes (no NaNs: their payloads are not
part of the format).

Output: reference/data/gguf_dequant.txt, lines `<TYPE> <hex of the data>
<hex of each f32 result's bits, space separated>`.

    python3 reference/gguf_dequant_reference.py
"""
import importlib.metadata
import pathlib
import random

import gguf
import numpy as np
from gguf.constants import GGMLQuantizationType as T

OUT = pathlib.Path(__file__).parent / "data" / "gguf_dequant.txt"
F16S = [65504.0, 1.0, -3.5, 6.0e-8, 0.0, 0.0117, -0.002]


def f16_bytes(v):
    return np.float16(v).tobytes()


def blocks(size, d_offsets, rng):
    out = bytearray()
    patterns = [0xFF, 0x00, 0xAA, None, None, None, None]
    for i, p in enumerate(patterns):
        b = bytearray(rng.getrandbits(8) if p is None else p for _ in range(size))
        for k, o in enumerate(d_offsets):
            b[o:o + 2] = f16_bytes(F16S[(i + k) % len(F16S)])
        out += b
    return bytes(out)


def main():
    rng = random.Random(20261201)
    rows = []
    rows.append(("Q2_K", T.Q2_K, blocks(84, [80, 82], rng)))
    rows.append(("Q3_K", T.Q3_K, blocks(110, [108], rng)))
    f16 = [0.0, -0.0, 6.0e-8, -6.0e-8, 65504.0, -65504.0, float("inf"), float("-inf")]
    f16 += [rng.uniform(-4, 4) for _ in range(56)]
    rows.append(("F16", T.F16, np.array(f16, dtype=np.float16).tobytes()))
    bf = [0x0000, 0x8000, 0x0001, 0x807F, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80]
    while len(bf) < 64:
        v = rng.getrandbits(16)
        if (v & 0x7F80) == 0x7F80 and (v & 0x007F) != 0:
            continue  # NaN
        bf.append(v)
    rows.append(("BF16", T.BF16, np.array(bf, dtype=np.uint16).tobytes()))
    version = importlib.metadata.version("gguf")
    lines = [f"# made by reference/gguf_dequant_reference.py with gguf {version}"]
    for name, qt, data in rows:
        vals = gguf.quants.dequantize(np.frombuffer(data, dtype=np.uint8), qt).astype(np.float32).reshape(-1)
        bits = " ".join(f"{v:08x}" for v in vals.view(np.uint32))
        lines.append(f"{name} {data.hex()} {bits}")
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
