"""mma.py: mma.sync.m16n8k16 (fp16 in, fp32 accumulate) as a tensor intrinsic, with its per-lane layout as data.

PTX's warp-level `mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32` spreads each operand
over the 32 lanes of a warp. With g = lane / 4 and t = lane % 4 (PTX ISA, "Matrix fragments
for mma.m16n8k16 with floating point type"), element i of a lane's fragment is:

    A (16 x 16, row-major)    row g + A_OFFSETS[i][0],  column 2t + A_OFFSETS[i][1]    (8 halves)
    B (16 x 8, as W[n][k])    k   2t + B_OFFSETS[i][0], n      g + B_OFFSETS[i][1]     (4 halves)
    C, D (16 x 8, fp32)       row g + C_OFFSETS[i][0],  column 2t + C_OFFSETS[i][1]    (4 floats)

The same tables generate the CUDA code (which element each lane loads, packs and stores) and
the numpy emulation (`emulate_mma`), so a test on the CPU checks that the layout covers every
element exactly once and that distributing, multiplying lane by lane and gathering gives the
matrix product. A operands in shared memory are loaded with `ldmatrix.x4` (four 8x8 halves
tiles, lane l giving the address of row l % 8 of tile l / 8, which lands exactly on the A layout);
B (W rows) with `ldmatrix.x2`; global operands are gathered element by element.

The intrinsic `cuda_mma_m16n8k16_f16_nt` computes C[16, 8] (+)= A[16, 16] @ W[8, 16]^T. On the
CPU shim (no PTX) each lane computes the whole tile and stores its own C elements (by C_OFFSETS).
"""
from __future__ import annotations

import numpy as np

from tensorkiln import te
from tensorkiln.sdk.intrinsic_impl import SourceImpl

from .intrinsics import serial_tile_code

__all__ = ["A_OFFSETS", "B_OFFSETS", "C_OFFSETS", "lane_elements", "distribute", "gather", "emulate_mma",
           "MMA_NT", "mma_intrinsic", "mma_code"]

A_OFFSETS = ((0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9))
B_OFFSETS = ((0, 0), (1, 0), (8, 0), (9, 0))
C_OFFSETS = ((0, 0), (0, 1), (8, 0), (8, 1))
_BASES = {"a": lambda g, t: (g, 2 * t), "b": lambda g, t: (2 * t, g), "c": lambda g, t: (g, 2 * t)}
_OFFSETS = {"a": A_OFFSETS, "b": B_OFFSETS, "c": C_OFFSETS}
SHAPES = {"a": (16, 16), "b": (16, 8), "c": (16, 8)}

MMA_NT = "cuda_mma_m16n8k16_f16_nt"


def lane_elements(operand: str, lane: int) -> list[tuple[int, int]]:
    """(row, column) of each fragment element of `lane` in operand "a" (16x16), "b" (16x8, k x n) or "c"."""
    base_row, base_col = _BASES[operand](lane // 4, lane % 4)
    return [(base_row + dr, base_col + dc) for dr, dc in _OFFSETS[operand]]


def distribute(operand: str, matrix: np.ndarray) -> np.ndarray:
    """(32, elements) fragments of `matrix` as the lanes hold them."""
    return np.array([[matrix[r, c] for r, c in lane_elements(operand, lane)] for lane in range(32)])


def gather(operand: str, fragments: np.ndarray) -> np.ndarray:
    """The matrix the lanes' `fragments` describe (inverse of distribute)."""
    matrix = np.zeros(SHAPES[operand], fragments.dtype)
    for lane in range(32):
        for value, (r, c) in zip(fragments[lane], lane_elements(operand, lane)):
            matrix[r, c] = value
    return matrix


def emulate_mma(a_fragments: np.ndarray, b_fragments: np.ndarray, c_fragments: np.ndarray) -> np.ndarray:
    """What mma.sync returns to each lane: D = A @ B + C in fp32, from the lanes' fragments."""
    a = gather("a", a_fragments).astype(np.float32)
    b = gather("b", b_fragments).astype(np.float32)
    d = a @ b + gather("c", c_fragments).astype(np.float32)
    return distribute("c", d)


def _element_index(operand: str, i: int, row_stride: str) -> str:
    """C expression of the offset of fragment element `i` from the tile origin (g, t in scope)."""
    dr, dc = _OFFSETS[operand][i]
    if operand == "b":   # W[n][k]: n = g + dc, k = 2t + dr
        return f"(g + {dc}) * {row_stride} + 2 * t + {dr}"
    return f"(g + {dr}) * {row_stride} + 2 * t + {dc}"


def mma_code(symbol: str = f"tk_{MMA_NT}") -> str:
    a_loads = "\n".join(f"        ah[{i}] = a[{_element_index('a', i, 'lda')}];" for i in range(8))
    b_loads = "\n".join(f"        bh[{i}] = w[{_element_index('b', i, 'ldw')}];" for i in range(4))
    c_loads = "\n".join(f"    c[{i}] = accumulate ? out[{_element_index('c', i, 'ldc')}] : 0.0f;" for i in range(4))
    c_stores = "\n".join(f"    out[{_element_index('c', i, 'ldc')}] = d[{i}];" for i in range(4))
    shim_stores = "\n".join(f"        out[{_element_index('c', i, 'ldc')}] = tile[{_element_index('c', i, '8')}];"
                            for i in range(4))
    serial_tile = serial_tile_code(8, "a", "w", "out", "i * lda + k", "j * ldw + k", "i * ldc + j")
    return f"""\
__device__ __forceinline__ void {symbol}(const half* a, const half* w, float* out, int64_t lda, int64_t ldw,
                                         int64_t ldc, int32_t accumulate) {{
{serial_tile}
    const unsigned lane = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32;
    const int g = lane / 4, t = lane % 4;
#ifdef TK_CUDA_SHIM
    {{  // no PTX on the CPU: every lane computes the whole tile, then stores its own C elements
        __syncwarp();
        float tile[16 * 8];
        for (int r = 0; r < 16; ++r)
            for (int n = 0; n < 8; ++n) {{
                float sum = accumulate ? out[r * ldc + n] : 0.0f;
                for (int k = 0; k < 16; ++k) sum += float(a[r * lda + k]) * float(w[n * ldw + k]);
                tile[r * 8 + n] = sum;
            }}
        __syncwarp();
{shim_stores}
    }}
#else
    unsigned ar[4], br[2];
    if (__isShared(a) && __isShared(w)) {{
        const unsigned a_row = (lane % 8) + 8 * ((lane / 8) % 2), a_col = 8 * (lane / 16);
        const unsigned a_address = (unsigned)__cvta_generic_to_shared(a + a_row * lda + a_col);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%0, %1, %2, %3}}, [%4];"
                     : "=r"(ar[0]), "=r"(ar[1]), "=r"(ar[2]), "=r"(ar[3]) : "r"(a_address));
        const unsigned w_row = lane % 8, w_col = 8 * ((lane / 8) % 2);
        const unsigned w_address = (unsigned)__cvta_generic_to_shared(w + w_row * ldw + w_col);
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {{%0, %1}}, [%2];"
                     : "=r"(br[0]), "=r"(br[1]) : "r"(w_address));
    }} else {{
        half ah[8], bh[4];
{a_loads}
{b_loads}
        for (int i = 0; i < 4; ++i) ar[i] = (unsigned)__half_as_ushort(ah[2 * i]) | ((unsigned)__half_as_ushort(ah[2 * i + 1]) << 16);
        for (int i = 0; i < 2; ++i) br[i] = (unsigned)__half_as_ushort(bh[2 * i]) | ((unsigned)__half_as_ushort(bh[2 * i + 1]) << 16);
    }}
    float c[4], d[4];
{c_loads}
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, "
                 "{{%8, %9}}, {{%10, %11, %12, %13}};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
{c_stores}
#endif
}}"""


def mma_intrinsic():
    """C[16, 8] (+)= A[16, 16] @ W[8, 16]^T (fp16 in, fp32 accumulate), one warp per call."""
    a = te.placeholder((16, 16), dtype="float16", name="a")
    w = te.placeholder((8, 16), dtype="float16", name="w")
    k = te.reduce_axis((0, 16), name="k")
    c = te.compute((16, 8), lambda i, j: te.sum(te.cast(a[i, k], "float32") * te.cast(w[j, k], "float32"), axis=k),
                   name="c")
    return te.decl_tensor_intrin(c, MMA_NT, inputs=[a, w],
                                 implementations={"cuda": SourceImpl("cuda", mma_code(), f"tk_{MMA_NT}")})
