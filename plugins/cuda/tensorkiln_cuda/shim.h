// shim.h: tensorkiln's CPU shim for the CUDA C it emits (g++ -std=c++20, no CUDA anywhere).
//
// The same .cu text NVRTC compiles builds here: every CUDA thread of a block is one OS
// thread, __syncthreads() is a std::barrier of the block's threads, and the blocks of a
// launch run one after another, so a function-local `static` array (what __shared__ means
// here) is exactly one block's shared memory. half is _Float16. Kernels with no barrier and
// no shared memory run their threads in order on the calling thread (no thread can observe
// another one there), which keeps elementwise kernels fast. ThreadSanitizer sees the
// threaded mode as it is: a missing barrier is a data race it reports.
#pragma once
#define TK_CUDA_SHIM 1
#include <atomic>
#include <barrier>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

struct uint3 { unsigned int x, y, z; };
struct dim3 { unsigned int x = 1, y = 1, z = 1; };
inline thread_local uint3 threadIdx{0, 0, 0};
inline thread_local uint3 blockIdx{0, 0, 0};
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
inline constexpr int warpSize = 32;

namespace tk_shim {
inline thread_local std::barrier<>* block_barrier = nullptr;
inline thread_local std::barrier<>* warp_barrier = nullptr;   // blocks of whole warps, threaded mode
inline unsigned char* dynamic_shared = nullptr;
inline unsigned char* shuffle_slots = nullptr;   // 8 bytes per thread of the block, threaded mode
}  // namespace tk_shim

#define TK_DYNAMIC_SHARED(type, name, offset) type* name = reinterpret_cast<type*>(tk_shim::dynamic_shared + (offset))

inline void __syncthreads() { if (tk_shim::block_barrier) tk_shim::block_barrier->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { if (tk_shim::warp_barrier) tk_shim::warp_barrier->arrive_and_wait(); }
// ---- warp shuffles -----------------------------------------------------------------------------
// Every thread of the block posts its value and reads its source's after a block barrier, so
// the block's threads must all call the same shuffles in the same order (tensorkiln's lowering
// of cross-thread reductions only emits such uniform shuffles); lanes are linear thread ids % 32.
namespace tk_shim {
inline unsigned linear_thread() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
template <class T>
inline T exchange(T value, unsigned source) {
  static_assert(sizeof(T) <= 8, "shuffles move values of at most 8 bytes");
  std::memcpy(shuffle_slots + 8 * linear_thread(), &value, sizeof(T));
  block_barrier->arrive_and_wait();
  T out;
  std::memcpy(&out, shuffle_slots + 8 * source, sizeof(T));
  block_barrier->arrive_and_wait();   // nobody posts the next value before everyone has read this one
  return out;
}
}  // namespace tk_shim
template <class T>
inline T __shfl_down_sync(unsigned, T value, unsigned delta, int width = 32) {
  const unsigned me = tk_shim::linear_thread(), in_segment = me % 32 % unsigned(width);
  return tk_shim::exchange(value, in_segment + delta < unsigned(width) ? me + delta : me);
}
template <class T>
inline T __shfl_sync(unsigned, T value, int lane, int width = 32) {
  const unsigned me = tk_shim::linear_thread();
  return tk_shim::exchange(value, me - me % 32 % unsigned(width) + unsigned(lane) % unsigned(width));
}

inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline float __int_as_float(int v) { return std::bit_cast<float>(v); }
inline int __float_as_int(float v) { return std::bit_cast<int>(v); }

// ---- 16-bit floats --------------------------------------------------------------------------
typedef _Float16 half;
inline float __half2float(half h) { return static_cast<float>(h); }
inline half __float2half(float f) { return static_cast<half>(f); }
struct __nv_bfloat16 {   // storage only; arithmetic in float, rounding to nearest even like CUDA
  uint16_t bits;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    bits = (f != f) ? uint16_t(0x7fc0) : uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  operator float() const { return std::bit_cast<float>(uint32_t(bits) << 16); }
};

// ---- CUDA's vector structs (no alignment promise: numpy buffers are only 16-byte aligned by luck) --
struct float4 { float x, y, z, w; };
struct int4 { int x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }

// ---- device math that C++ lacks -------------------------------------------------------------
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }

// ---- wmma (tensor cores): fragments held whole by every lane -----------------------------------
// Each lane loads and multiplies the whole 16x16 tile; a store writes only the lane's share
// (element e goes to lane e % 32), so the 32 threads of a warp write each element once, as
// on the GPU. Loading and storing an accumulator synchronise the warp first: on the GPU each
// lane reads back only its own elements, here every lane reads all of them. Only the
// 16x16x16 shape tensorkiln uses.
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the shim implements wmma 16x16x16 only");
  static constexpr int num_elements = 256;
  T x[256];
};
template <class Use, class T, class Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r * 16 + c] = std::is_same_v<Layout, row_major> ? p[r * ldm + c] : p[c * ldm + r];
}
template <class T>
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, T>& f, const T* p, unsigned ldm, layout_t layout) {
  __syncwarp();   // every lane's share of an earlier store is there
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.x[r * 16 + c] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
}
template <class Use, class T, class Layout>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, T value) {
  for (auto& element : f.x) element = value;
}
template <class TA, class LA, class LB, class TC>
inline void mma_sync(fragment<accumulator, 16, 16, 16, TC>& d, const fragment<matrix_a, 16, 16, 16, TA, LA>& a,
                     const fragment<matrix_b, 16, 16, 16, TA, LB>& b, const fragment<accumulator, 16, 16, 16, TC>& c) {
  fragment<accumulator, 16, 16, 16, TC> out;
  for (int r = 0; r < 16; ++r)
    for (int col = 0; col < 16; ++col) {
      TC sum = c.x[r * 16 + col];
      for (int k = 0; k < 16; ++k) sum += TC(float(a.x[r * 16 + k]) * float(b.x[k * 16 + col]));
      out.x[r * 16 + col] = sum;
    }
  d = out;
}
template <class T>
inline void store_matrix_sync(T* p, const fragment<accumulator, 16, 16, 16, T>& f, unsigned ldm, layout_t layout) {
  const unsigned lane = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32;
  __syncwarp();   // no lane still reads what this store overwrites
  for (unsigned e = lane; e < 256; e += 32) {
    const unsigned r = e / 16, c = e % 16;
    (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[e];
  }
}
}  // namespace wmma
}  // namespace nvcuda

namespace tk_shim {
// Run `kernel` (a lambda calling the __global__ function) over grid x block.
template <class Kernel>
void launch(dim3 grid, dim3 block, std::size_t dynamic_bytes, bool threaded, Kernel kernel) {
  std::vector<unsigned char> dynamic(dynamic_bytes + 16);
  dynamic_shared = dynamic.data() + (16 - reinterpret_cast<std::uintptr_t>(dynamic.data()) % 16) % 16;
  const unsigned threads = block.x * block.y * block.z;
  const unsigned blocks = grid.x * grid.y * grid.z;
  auto enter_block = [&](unsigned b) { blockIdx = {b % grid.x, (b / grid.x) % grid.y, b / (grid.x * grid.y)}; };
  auto enter_thread = [&](unsigned t) { threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)}; };
  if (!threaded) {
    gridDim = grid;
    blockDim = block;
    for (unsigned b = 0; b < blocks; ++b) {
      enter_block(b);
      for (unsigned t = 0; t < threads; ++t) {
        enter_thread(t);
        kernel();
      }
    }
    return;
  }
  std::barrier<> barrier(threads);
  std::vector<unsigned char> slots(8 * threads);
  shuffle_slots = slots.data();
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  if (threads % 32 == 0)
    for (unsigned w = 0; w < threads / 32; ++w) warps.push_back(std::make_unique<std::barrier<>>(32));
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      gridDim = grid;
      blockDim = block;
      block_barrier = &barrier;
      warp_barrier = warps.empty() ? nullptr : warps[t / 32].get();
      enter_thread(t);
      for (unsigned b = 0; b < blocks; ++b) {
        enter_block(b);
        kernel();
        barrier.arrive_and_wait();   // the next block reuses the static (shared) arrays
      }
      block_barrier = nullptr;
      warp_barrier = nullptr;
    });
  }
  for (auto& thread : pool) thread.join();
}
}  // namespace tk_shim
