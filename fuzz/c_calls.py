"""Hostile direct calls of picpac's C code (docs/reliability.md, "The C code under sanitizers"):
``python fuzz/c_calls.py --cases 20000 [--seed S]``.

Each case calls one of ``picpac.image._jpeg``'s ``decode``, ``image`` and ``sample`` or ``picpac.image._kernels``'
``resize``, ``warp``, ``nearest``, ``flip`` and ``finish`` with arguments drawn to hurt: mutated JPEGs, sides and
offsets at and past every limit (0, -1, 65535, 2**31 - 1, ...), geometry of NaNs, infinities and 1e300s, outputs of
the wrong size or type. The contract: each call returns, or raises ValueError, TypeError, OverflowError or
MemoryError; never another exception, and never undefined behaviour. Run in a build with
``-fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all`` (``.ci/run`` does), a memory error or
UB aborts the process with its report; plain, it checks the exceptions. The exit status is 1 when a call raised
anything else, naming the case to rerun.
"""
from __future__ import annotations

import argparse
import math
import os
import random
import sys
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fuzz.mutate import mutate  # noqa: E402
from fuzz.t_image import image_seeds  # noqa: E402
from picpac.image import _jpeg, _kernels  # noqa: E402

ALLOWED = (ValueError, TypeError, OverflowError, MemoryError)
INTS = (0, 1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 33, 255, 256, 4096, 32766, 32767, 65535, 65536, 2**31 - 1, -1, -2,
        -65536, -2**31, 2**63)
FLOATS = (0.0, -0.0, 0.5, 1.0, -1.0, 1e-300, 1e9, 1e10, -1e10, 1e300, -1e300, math.inf, -math.inf, math.nan,
          2.0**31, -2.0**31, 65535.5)


def number(rng: random.Random, low: int = -8, high: int = 200) -> int:
    """An int: an edge value a third of the time, else a plausible one."""
    return rng.choice(INTS) if rng.random() < 0.33 else rng.randint(low, high)


def real(rng: random.Random, low: float = -50.0, high: float = 250.0) -> float:
    return rng.choice(FLOATS) if rng.random() < 0.25 else rng.uniform(low, high)


def hurt(rng: random.Random, args: list, hostile: list) -> tuple:
    """``args`` as they are (60% of the cases, which reach the code past the checks), or with one of them replaced
    by its hostile draw."""
    if rng.random() < 0.6:
        return tuple(args)
    k = rng.randrange(len(args))
    args[k] = hostile[k]()
    return tuple(args)


def jpeg(rng: random.Random, seeds: list[bytes]) -> bytes:
    data = rng.choice(seeds)
    return data if rng.random() < 0.5 else mutate(data, rng)


def image_array(rng: random.Random, dtype: type = np.uint8, channels: int | None = None) -> np.ndarray:
    c = channels or rng.choice((1, 3, 3, 4))
    shape = (rng.randint(1, 48), rng.randint(1, 48))
    return np.zeros(shape if c == 1 and rng.random() < 0.5 else (*shape, c), dtype)


def odd_array(rng: random.Random) -> np.ndarray:
    """An array of any size, type and layout: empty, 1-d, 5 channels, a view with strides."""
    array = np.zeros((number(rng, 0, 9) % 70, number(rng, 0, 9) % 70, rng.choice((1, 2, 5))),
                     rng.choice((np.uint8, np.float32, np.int16)))
    return rng.choice((array, array[::2], array.reshape(-1), array[:, :, 0]))


def matrix(rng: random.Random) -> tuple:
    angle, scale = rng.uniform(-math.pi, math.pi), rng.uniform(0.2, 3.0)
    m = [scale * math.cos(angle), -scale * math.sin(angle), rng.uniform(-30, 60),
         scale * math.sin(angle), scale * math.cos(angle), rng.uniform(-30, 60)]
    if rng.random() < 0.3:
        m[1] = m[3] = 0.0  # axis-aligned: the warp's rows-first pass
    if rng.random() < 0.2:
        m[rng.randrange(6)] = rng.choice(FLOATS)
    return tuple(m)


def region(rng: random.Random) -> tuple[int, int, int, int]:
    x, y = rng.randint(0, 40), rng.randint(0, 40)
    return x, y, rng.randint(1, 48), rng.randint(1, 48)


def geometry(rng: random.Random, width: int, height: int) -> tuple[tuple, int, int]:
    """(12 numbers, output width, output height): a slice of the region resized and flipped, a warp, or none."""
    kind = rng.choice((0, 1, 2))
    if kind == 0:
        return (0,) * 12, width, height
    w, h = rng.randint(1, 64), rng.randint(1, 64)
    if kind == 1:
        x0, y0 = rng.randint(0, width - 1), rng.randint(0, height - 1)
        x1, y1 = rng.randint(x0 + 1, width), rng.randint(y0 + 1, height)
        resize = rng.choice((0, 1, 2))
        if resize == 0:
            w, h = x1 - x0, y1 - y0
        return (1, x0, y0, x1, y1, resize, rng.choice((-1, 0, 1, 2)), w, h, 0, 0, 0), w, h
    shrink = (0, 0) if rng.random() < 0.5 else (rng.randint(1, 64), rng.randint(1, 64))
    return (2, *shrink, *matrix(rng), rng.randint(0, 255), w, h), w, h


def odd_geometry(rng: random.Random) -> tuple:
    return tuple(rng.choice((-1, 0, 1, 2, 3)) if k == 0 else rng.choice(FLOATS) if rng.random() < 0.5
                 else number(rng) for k in range(12))


def out_for(rng: random.Random, width: int, height: int, channels: int) -> tuple[np.ndarray, int]:
    dtype = rng.choice((0, 1))
    return np.zeros(width * height * channels, (np.uint8, np.float32)[dtype]), dtype


def means(rng: random.Random, channels: int) -> tuple:
    return tuple(rng.uniform(-5, 5) for _ in range(rng.choice((0, 0, 1, channels))))


def call(case: int, seed: int, seeds: list[bytes]) -> tuple[str, object]:
    """Case ``case``'s call: (its name, what it returned or raised)."""
    rng = random.Random(seed * 1_000_003 + case)
    which = rng.choice(("decode", "image", "sample", "sample", "resize", "warp", "nearest", "flip", "finish"))
    limit = lambda: rng.choice((0, 1, 1 << 12, 1 << 28, 2**64 - 1))  # noqa: E731
    any_int = lambda: number(rng)  # noqa: E731
    if which == "decode":
        args = [jpeg(rng, seeds), rng.choice((1, 2, 4, 8)), *region(rng), rng.choice((0, 1, 2)), rng.choice((0, 1 << 28))]
        hostile = [lambda: rng.choice((b"", b"\xff\xd8", bytes(100))), any_int, any_int, any_int, any_int, any_int,
                   any_int, limit]
        return which, _jpeg.decode(*hurt(rng, args, hostile))
    if which == "image":
        args = [jpeg(rng, seeds), rng.choice((1, 2, 4, 8)), rng.choice((0, 1, 2, 3)), rng.choice((0, 1 << 28))]
        hostile = [lambda: rng.choice((b"", b"\xff\xd8\xff\xd9", bytes(100))), any_int, any_int, limit]
        return which, _jpeg.image(*hurt(rng, args, hostile))
    if which in ("sample", "finish"):
        x, y, width, height = region(rng)
        mode = rng.choice((0, 1, 2))
        channels = 1 if mode == 0 else 3
        g, w, h = geometry(rng, width, height)
        out, dtype = out_for(rng, w, h, channels)
        mean, std = (means(rng, channels), means(rng, channels)) if dtype == 1 else ((), ())
        if which == "sample":
            args = [jpeg(rng, seeds), rng.choice((1, 2, 4)), x, y, width, height, mode, g, out, dtype,
                    rng.random() < 0.5, mean, std, rng.choice((0, 1 << 28))]
            hostile = [lambda: b"", any_int, any_int, any_int, any_int, any_int, any_int, lambda: odd_geometry(rng),
                       lambda: odd_array(rng), any_int, lambda: rng.choice((None, 2, "x")),
                       lambda: (math.nan,) * rng.randint(0, 5), lambda: (0.0,) * rng.randint(0, 5), limit]
            return which, _jpeg.sample(*hurt(rng, args, hostile))
        pixels = bytes(rng.randrange(256) for _ in range(width * height * channels))
        args = [pixels, width, height, channels, g, out, dtype, rng.random() < 0.5, mean, std]
        hostile = [lambda: pixels[:-1], any_int, any_int, any_int, lambda: odd_geometry(rng), lambda: odd_array(rng),
                   any_int, lambda: None, lambda: (math.inf,) * rng.randint(0, 4), lambda: (0.0,) * rng.randint(0, 4)]
        return which, _kernels.finish(*hurt(rng, args, hostile))
    source = image_array(rng, np.uint8 if which in ("resize", "warp") else rng.choice((np.uint8, np.float32)))
    channels = 1 if source.ndim == 2 else source.shape[2]
    out = image_array(rng, source.dtype, channels)
    if out.ndim != source.ndim:
        out = out.reshape(out.shape[0], out.shape[1], *source.shape[2:]) if source.ndim == 3 else out[:, :, 0]
    if which == "flip":
        args = [source, rng.choice((-1, 0, 1)), np.zeros_like(source)]
        return which, _kernels.flip(*hurt(rng, args, [lambda: odd_array(rng), any_int, lambda: odd_array(rng)]))
    if which == "resize":
        args = [source, out, rng.choice((0, 1))]
        return which, _kernels.resize(*hurt(rng, args, [lambda: odd_array(rng), lambda: odd_array(rng), any_int]))
    if which == "warp":
        args = [source, matrix(rng), rng.choice((0, 1, 2, 3)), rng.randint(0, 255), out]
        hostile = [lambda: odd_array(rng), lambda: tuple(rng.choice(FLOATS) for _ in range(rng.choice((5, 6, 7)))),
                   any_int, any_int, lambda: odd_array(rng)]
        return which, _kernels.warp(*hurt(rng, args, hostile))
    args = [source, matrix(rng), out]
    hostile = [lambda: odd_array(rng), lambda: tuple(rng.choice(FLOATS) for _ in range(6)), lambda: odd_array(rng)]
    return which, _kernels.nearest(*hurt(rng, args, hostile))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=20_000)
    parser.add_argument("--first", type=int, default=0, help="the first case number (to rerun one)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    seeds = [s for s in image_seeds() if s[:2] == b"\xff\xd8"]
    outcomes: dict[str, int] = {}
    for case in range(args.first, args.first + args.cases):
        try:
            name, _ = call(case, args.seed, seeds)
            outcome = f"{name}: returned"
        except ALLOWED as exc:
            outcome = f"{type(exc).__name__}"
        except Exception:
            print(f"case {case} (seed {args.seed}) raised what no call may: rerun it with --first {case} --cases 1"
                  f"\n{traceback.format_exc()}", file=sys.stderr)
            return 1
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    print(f"{args.cases} direct C calls, seed {args.seed}: " +
          ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
