"""Standard normals for the copula's latent draws, by the Box–Muller transform of raw bits.

A wide copula draws d normals per row (2,000 on the Art2 shape), and NumPy's float32 ziggurat
took as long as the latent product itself there (21.8 against 22.5 µs a row on one core,
benchmarks/SESSIONS.md "Copula sampling: the normals"). The transform below is exact for uniform
inputs and runs on NumPy's vectorised float32 log, sqrt, sin and cos over cache-sized chunks:
2.5–3× the ziggurat's speed on the same bit generator. Hand-written because NumPy offers only
the ziggurat, and SciPy's samplers are slower still.

Each 64-bit word from the bit generator gives two 32-bit uniforms. The radius takes
u = (k + ½)·2⁻³², never 0, so -2 ln u is finite; its smallest step is 2⁻³² in probability, far
below the 10⁻⁶ floor on a category's probability (the tails the thresholds reach). The angle
takes k·2⁻³²·2π.
"""

from __future__ import annotations

import numpy as np

# Values per pass: the chunk's temporaries stay in the core's L1/L2 cache.
CHUNK = 1 << 14
_UNIT = np.float32(2.0**-32)
_HALF = np.float32(0.5)
_MINUS_TWO = np.float32(-2.0)
_ANGLE = np.float32(2.0**-32 * 2.0 * np.pi)


def fill_standard_normal(bit_generator: np.random.BitGenerator, out: np.ndarray) -> np.ndarray:
    """Fill a C-ordered float32 ``out`` with independent N(0, 1) draws from ``bit_generator``;
    the values depend only on the generator's state and ``out.size``."""
    if out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError("fill_standard_normal needs a C-ordered float32 array")
    flat = out.reshape(-1)
    half = CHUNK // 2
    radius = np.empty(half, dtype=np.float32)
    angle = np.empty(half, dtype=np.float32)
    for start in range(0, flat.size, CHUNK):
        block = flat[start : start + CHUNK]
        pairs = (len(block) + 1) // 2
        bits = bit_generator.random_raw(pairs).view(np.uint32)
        r, a = radius[:pairs], angle[:pairs]
        np.copyto(r, bits[:pairs], casting="unsafe")
        r += _HALF
        r *= _UNIT
        np.log(r, out=r)
        r *= _MINUS_TWO
        np.sqrt(r, out=r)
        np.copyto(a, bits[pairs:], casting="unsafe")
        a *= _ANGLE
        cosine, sine = block[:pairs], block[pairs:]
        np.cos(a, out=cosine)
        cosine *= r
        np.sin(a[: len(sine)], out=sine)
        sine *= r[: len(sine)]
    return out
