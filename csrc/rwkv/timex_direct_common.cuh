// RWKV TimeX direct kernels: what the Toeplitz and grad_w kernels share (integer helpers,
// 16-byte vectors, cp.async staging of zero-filled tiles) and the macros that let the
// CPU emulation compile them (timex_kernels.cuh has the whole picture).
#pragma once

#include <cstdint>
#include <type_traits>

// tests/test_rwkv.py defines TIMEX_EMULATE and these four macros itself to compile these
// headers as host C++ and run the kernels on a CPU (a thread per CUDA thread).
#ifndef TIMEX_EMULATE
#define TIMEX_DEVICE __device__ __forceinline__
#define TIMEX_KERNEL(threads, min_blocks) __global__ void __launch_bounds__(threads, min_blocks)
#define TIMEX_SHARED_BYTES(name) extern __shared__ __align__(16) unsigned char name[]
#define TIMEX_SYNC() __syncthreads()
#endif

namespace rwkv {
namespace kernels {

constexpr int cdiv(int a, int b) { return (a + b - 1) / b; }
constexpr int imin(int a, int b) { return a < b ? a : b; }
// Smallest p >= 0 with (x + p) % 32 == r % 32: pads a shared-memory stride so that it lands
// on a chosen bank (in 4-byte words).
constexpr int pad_to(int x, int r) { return (((r - x) % 32) + 32) % 32; }
// x mod m in [0, m) for negative x too (register-ring slots; constant after unrolling).
constexpr int wrap(int x, int m) { return ((x % m) + m) % m; }

template <typename T>
struct alignas(4 * sizeof(T)) Vec4 {
  T v[4];
};

template <typename T>
TIMEX_DEVICE Vec4<T> load4(const T* p) {
  return *reinterpret_cast<const Vec4<T>*>(p);
}

// p[3], p[2], p[1], p[0]: four consecutive elements read in reverse order.
template <typename T>
TIMEX_DEVICE Vec4<T> load4_rev(const T* p) {
  const Vec4<T> v = load4(p);
  return {{v.v[3], v.v[2], v.v[1], v.v[0]}};
}

// Copies BYTES bytes from global to shared memory, or writes zeros there when !valid (src
// is then not read). Asynchronous on sm_80 and newer (cp.async; copy_wait completes it),
// an ordinary load and store before.
template <int BYTES>
TIMEX_DEVICE void copy_async(void* dst, const void* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(s), "l"(src), "n"(BYTES),
               "r"(valid ? BYTES : 0)
               : "memory");
#else
#ifdef TIMEX_EMULATE
  emu_require_aligned(dst, BYTES);
  if (valid) emu_require_aligned(src, BYTES);
#endif
  struct alignas(BYTES) Raw {
    unsigned char b[BYTES];
  };
  *reinterpret_cast<Raw*>(dst) = valid ? *reinterpret_cast<const Raw*>(src) : Raw{};
#endif
}

TIMEX_DEVICE void copy_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most N of this thread's committed copy groups are still in flight.
template <int N>
TIMEX_DEVICE void copy_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// Stages a tile of ROWS rows x 4 * GPR elements into shared memory: element x of tile row r
// is src[n0 + x] as acc_t, with zeros outside [0, T) and in rows that row_of marks invalid.
// row_of(r, src, dst) sets src to the row's first element (any valid pointer when it returns
// false) and dst to its first element in shared memory (aligned to 4 elements). Where the
// ROWS * GPR groups of 4 split evenly, each thread copies GPT consecutive groups of one row,
// so one row address serves GPT copies; otherwise a thread copies one group per pass (the
// last pass part empty). vec promises 16-byte aligned rows, T % 4 == 0 and n0 % 4 == 0: the
// 4 elements of a group are then all inside or all outside [0, T), and one vector copy does.
template <int THREADS, int ROWS, int GPR, typename scalar_t, typename acc_t, typename RowFn>
TIMEX_DEVICE void stage_tile(int tid, int n0, int T, bool vec, const RowFn& row_of) {
  constexpr int GROUPS = ROWS * GPR;
  constexpr bool EVEN = GROUPS % THREADS == 0 && GPR % (GROUPS / THREADS) == 0;
  constexpr int GPT = EVEN ? GROUPS / THREADS : 1;
  constexpr int PASSES = EVEN ? 1 : cdiv(GROUPS, THREADS);
#pragma unroll
  for (int pass = 0; pass < PASSES; ++pass) {
    const int i = tid + pass * THREADS;  // in units of GPT groups
    if (!EVEN && i >= GROUPS) return;
    const int r = i / (GPR / GPT), x = (i % (GPR / GPT)) * GPT * 4;
    const scalar_t* src;
    acc_t* dst;
    const bool row_ok = row_of(r, src, dst);
    dst += x;
    const int n = n0 + x;
    if constexpr (std::is_same_v<scalar_t, acc_t>) {
      if (vec) {
        const scalar_t* p = row_ok ? src + n : src;
#pragma unroll
        for (int g = 0; g < GPT; ++g) {
          const bool ok = row_ok && n + 4 * g >= 0 && n + 4 * g < T;
#pragma unroll
          for (int h = 0; h < int(sizeof(acc_t)) / 4; ++h) {
            const int e = 4 * g + h * 16 / int(sizeof(acc_t));
            copy_async<16>(dst + e, ok ? p + e : src, ok);
          }
        }
        continue;
      }
    }
#pragma unroll
    for (int e = 0; e < 4 * GPT; ++e) {
      const bool ok = row_ok && n + e >= 0 && n + e < T;
      if constexpr (std::is_same_v<scalar_t, acc_t>) {
        copy_async<sizeof(acc_t)>(dst + e, ok ? src + n + e : src, ok);
      } else {
        dst[e] = ok ? static_cast<acc_t>(src[n + e]) : acc_t(0);
      }
    }
  }
}

// The block of a Toeplitz kernel's grid (one block per channel x group of BB batch rows x
// tile of TT outputs, the channel fastest; the heaviest tiles first: causal, the last tile's
// outputs sum the most inputs): its channel, first batch row and first output.
struct ToeplitzBlock {
  int c, b0, ot0;
};
template <int BB, int TT, bool CAUSAL>
TIMEX_DEVICE ToeplitzBlock toeplitz_block(int B, int C, int T) {
  const int n_bg = cdiv(B, BB), n_tiles = cdiv(T, TT);
  int bid = static_cast<int>(blockIdx.x);
  const int c = bid % C;
  bid /= C;
  const int bg = bid % n_bg;
  bid /= n_bg;
  const int tile = CAUSAL ? n_tiles - 1 - bid : bid;
  return {c, bg * BB, tile * TT};
}

}  // namespace kernels
}  // namespace rwkv
