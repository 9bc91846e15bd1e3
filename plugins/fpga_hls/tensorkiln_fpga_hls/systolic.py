"""systolic.py: the HLS C++ template of gemm_accelerator, an R x C output-stationary systolic array.

PE (i, j) keeps C[i, j] in a register. A's row i enters PE (i, 0) delayed by i cycles
and moves right one PE per cycle; B's column j enters PE (0, j) delayed by j cycles and
moves down; so at cycle t PE (i, j) multiplies A[i, k] and B[k, j] with k = t - i - j.
The t loop (K + R + C - 2 cycles) is pipelined with II=1; the PE array, its
accumulators and the A / B pipeline registers are completely partitioned (registers).
Updating PEs from the last row / column backwards reads each neighbour's register value
of the previous cycle, which is what the hardware registers hold.

The same array exists as Verilog (rtl.py); tests compare them.
"""
from __future__ import annotations

__all__ = ["systolic_source", "systolic_symbol"]


def systolic_symbol(rows: int, cols: int) -> str:
    return f"tk_gemm_accelerator_{rows}x{cols}"


def systolic_source(rows: int, cols: int) -> str:
    """C++ of `template <TA, TB, TC> void tk_gemm_accelerator_RxC(A, B, C, lda, ldb, ldc, K, accumulate)`,
    the tensor-intrinsic calling convention (sdk/intrinsic_impl.py): tile pointers, the row strides
    of A, B and C, the reduction extent K, and whether to add into C."""
    symbol = systolic_symbol(rows, cols)
    return f"""\
// gemm_accelerator: C[{rows}][{cols}] (+)= A[{rows}][K] * B[K][{cols}] on a {rows}x{cols} systolic array
template <typename TA, typename TB, typename TC>
static void {symbol}(const TA* A, const TB* B, TC* C, int64_t lda, int64_t ldb, int64_t ldc, int64_t K,
                     int32_t accumulate) {{
    TC acc[{rows}][{cols}];
    TA a_reg[{rows}][{cols}];
    TB b_reg[{rows}][{cols}];
    #pragma HLS ARRAY_PARTITION variable=acc type=complete dim=0
    #pragma HLS ARRAY_PARTITION variable=a_reg type=complete dim=0
    #pragma HLS ARRAY_PARTITION variable=b_reg type=complete dim=0
    L_init: for (int i = 0; i < {rows}; ++i) {{
        for (int j = 0; j < {cols}; ++j) {{
            #pragma HLS PIPELINE II=1
            acc[i][j] = accumulate ? C[i * ldc + j] : (TC)0;
            a_reg[i][j] = (TA)0;
            b_reg[i][j] = (TB)0;
        }}
    }}
    L_k: for (int64_t t = 0; t < K + {rows + cols - 2}; ++t) {{
        #pragma HLS PIPELINE II=1
        L_row: for (int i = {rows - 1}; i >= 0; --i) {{
            #pragma HLS UNROLL
            L_col: for (int j = {cols - 1}; j >= 0; --j) {{
                #pragma HLS UNROLL
                int64_t k = t - i - j;
                bool live = k >= 0 && k < K;
                TA a_in = j == 0 ? (live ? A[i * lda + k] : (TA)0) : a_reg[i][j - 1];
                TB b_in = i == 0 ? (live ? B[k * ldb + j] : (TB)0) : b_reg[i - 1][j];
                acc[i][j] += a_in * b_in;
                a_reg[i][j] = a_in;
                b_reg[i][j] = b_in;
            }}
        }}
    }}
    L_drain: for (int i = 0; i < {rows}; ++i) {{
        for (int j = 0; j < {cols}; ++j) {{
            #pragma HLS PIPELINE II=1
            C[i * ldc + j] = acc[i][j];
        }}
    }}
}}
"""
