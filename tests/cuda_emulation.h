// Runs CUDA kernels on the CPU, for the emulation tests (test_rwkv.py, test_lltm.py): one
// std::thread per CUDA thread, std::barrier for __syncthreads, the blocks of a grid one after
// another. Kernels written with the CUDA keywords compile as host C++ with the macros below
// (static shared memory becomes a static local, which the threads of a block share); kernels
// that take dynamic shared memory read it from emu_smem. Also: the float64 helpers that the
// tests' reference computations use. Thread-block clusters (sm_90) too: launch_cluster runs
// the CTAs of one cluster concurrently, with a cluster-wide barrier and each CTA's dynamic
// shared memory reachable from the others (emu_map_shared_rank, as distributed shared memory).
#pragma once

#include <algorithm>
#include <barrier>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <type_traits>
#include <vector>

#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

// csrc/common/mma_tf32.h: its warp operation is emu_mma_m16n8k8_tf32 below.
#define FUSED_OPS_EMULATE
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static
#define __syncthreads() emu_syncthreads()

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local Dim3 threadIdx, blockIdx;
inline Dim3 blockDim, gridDim;
inline thread_local unsigned char* emu_smem;
inline std::barrier<>* emu_barrier;
// A cluster's CTAs run at the same time, each with its own block barrier (launch runs one
// block at a time and uses emu_barrier).
inline thread_local std::barrier<>* emu_block_barrier;

// A GPU access of `bytes` bytes faults unless p is aligned to as many, where the CPU would
// not notice: the TimeX kernels' emulated cp.async copies call this.
inline void emu_require_aligned(const void* p, size_t bytes) {
  if (reinterpret_cast<uintptr_t>(p) % bytes != 0) {
    std::printf("FAIL misaligned %zu-byte access at %p\n", bytes, p);
    std::fflush(stdout);
    std::abort();
  }
}

inline void emu_syncthreads() {
  (emu_block_barrier != nullptr ? emu_block_barrier : emu_barrier)->arrive_and_wait();
}

// A warp's meeting point for the warp-wide operations below (mma): its own barrier and the
// fragments its lanes hand in.
struct EmuWarp {
  explicit EmuWarp(int lanes) : barrier(lanes) {}
  std::barrier<> barrier;
  float a[2][32][4], b[2][32][2];  // consecutive operations alternate between two slots
  float shfl[2][32];                // the same for __shfl_xor_sync
  const unsigned char* rows[2][32];  // ldmatrix: each lane's row address
  uint32_t ha[2][32][4], hb[2][32][2];  // mma m16n8k16 (half types): the packed fragments
};
inline thread_local EmuWarp* emu_warp;

// Runs body() as `grid` blocks of `threads` threads with smem_bytes of dynamic shared memory,
// filled with huge values before each block so that a read of unstaged memory shows.
inline void launch(int grid, int threads, int smem_bytes, const std::function<void()>& body) {
  std::vector<double> store(smem_bytes / 8 + 2);
  auto* base = reinterpret_cast<unsigned char*>(store.data());
  blockDim.x = threads;
  gridDim.x = grid;
  for (int b = 0; b < grid; ++b) {
    std::memset(base, 0x7f, smem_bytes);
    std::barrier<> bar(threads);
    emu_barrier = &bar;
    std::vector<std::unique_ptr<EmuWarp>> warps;
    for (int w = 0; w < (threads + 31) / 32; ++w) {
      warps.push_back(std::make_unique<EmuWarp>(std::min(32, threads - 32 * w)));
    }
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t, b] {
        threadIdx.x = t;
        blockIdx.x = b;
        emu_smem = base;
        emu_warp = warps[t / 32].get();
        body();
      });
    }
    for (auto& t : pool) t.join();
  }
}

// __shfl_xor_sync on floats for the calling warp (every lane calls it, full mask): lane i gets
// lane (i ^ lane_mask)'s value. Two slots, as emu_mma_m16n8k8_tf32 explains.
inline float __shfl_xor_sync(unsigned /*mask*/, float v, int lane_mask) {
  EmuWarp& w = *emu_warp;
  thread_local int slot = 0;
  const int lane = static_cast<int>(threadIdx.x % 32);
  float (&s)[32] = w.shfl[slot];
  slot ^= 1;
  s[lane] = v;
  w.barrier.arrive_and_wait();
  return s[lane ^ lane_mask];
}

// __syncwarp for the calling warp (every lane calls it, full mask): its lanes meet.
inline void __syncwarp(unsigned /*mask*/ = 0xffffffffu) { emu_warp->barrier.arrive_and_wait(); }

// Thread-block clusters. The calling thread's CTA rank in its cluster, the cluster barrier
// (barrier.cluster arrive + wait: every thread of every CTA of the cluster), and a pointer
// into the dynamic shared memory of CTA `rank` at the offset that p has in the caller's.
inline thread_local int emu_cluster_rank_v;
inline thread_local std::barrier<>* emu_cluster_barrier;
inline thread_local unsigned char* const* emu_cluster_smem;
inline unsigned emu_cluster_size_v;

inline unsigned emu_cluster_rank() { return static_cast<unsigned>(emu_cluster_rank_v); }
inline unsigned emu_cluster_size() { return emu_cluster_size_v; }
inline void emu_cluster_sync() { emu_cluster_barrier->arrive_and_wait(); }

template <typename P>
P* emu_map_shared_rank(P* p, unsigned rank) {
  const auto offset = reinterpret_cast<unsigned char*>(p) - emu_smem;
  return reinterpret_cast<P*>(emu_cluster_smem[rank] + offset);
}

// Runs body() as `grid` blocks of `threads` threads in clusters of `cluster` consecutive
// blocks (grid a multiple of cluster): the clusters one after another, the blocks of a
// cluster at the same time, each with smem_bytes of dynamic shared memory filled with huge
// values first (as launch does).
inline void launch_cluster(int grid, int cluster, int threads, int smem_bytes,
                           const std::function<void()>& body) {
  blockDim.x = threads;
  gridDim.x = grid;
  emu_cluster_size_v = cluster;
  std::vector<std::vector<double>> stores(cluster, std::vector<double>(smem_bytes / 8 + 2));
  std::vector<unsigned char*> bases;
  for (auto& st : stores) bases.push_back(reinterpret_cast<unsigned char*>(st.data()));
  for (int c0 = 0; c0 < grid; c0 += cluster) {
    for (auto* base : bases) std::memset(base, 0x7f, smem_bytes);
    std::barrier<> cluster_bar(cluster * threads);
    std::vector<std::unique_ptr<std::barrier<>>> block_bars;
    std::vector<std::unique_ptr<EmuWarp>> warps;
    for (int r = 0; r < cluster; ++r) {
      block_bars.push_back(std::make_unique<std::barrier<>>(threads));
      for (int w = 0; w < (threads + 31) / 32; ++w) {
        warps.push_back(std::make_unique<EmuWarp>(std::min(32, threads - 32 * w)));
      }
    }
    const int warps_per_block = (threads + 31) / 32;
    std::vector<std::thread> pool;
    for (int r = 0; r < cluster; ++r) {
      for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, r, t] {
          threadIdx.x = t;
          blockIdx.x = c0 + r;
          emu_smem = bases[r];
          emu_warp = warps[r * warps_per_block + t / 32].get();
          emu_block_barrier = block_bars[r].get();
          emu_cluster_rank_v = r;
          emu_cluster_barrier = &cluster_bar;
          emu_cluster_smem = bases.data();
          body();
        });
      }
    }
    for (auto& t : pool) t.join();
  }
}

// float32 bits <-> float.
inline float emu_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint32_t emu_as_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// mma.sync.m16n8k8 .tf32 with float accumulation for the calling warp (every lane calls it):
// c += A * B with the fragment layout of PTX (g = lane / 4, q = lane % 4): a = A[g][q],
// A[g+8][q], A[g][q+4], A[g+8][q+4]; b = B[q][g], B[q+4][g]; c = C[g][2q], C[g][2q+1],
// C[g+8][2q], C[g+8][2q+1]. Operands are read as tf32 (low 13 bits dropped, as the tensor
// cores do), so products are exact in float; the sum runs in k order.
inline void emu_mma_m16n8k8_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  // One barrier per operation: a lane writes the other slot next time, which no lane reads
  // before every lane has passed this operation's barrier, i.e. finished the previous one.
  EmuWarp& w = *emu_warp;
  thread_local int slot = 0;
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, q = lane % 4;
  float (&wa)[32][4] = w.a[slot];
  float (&wb)[32][2] = w.b[slot];
  slot ^= 1;
  for (int e = 0; e < 4; ++e) wa[lane][e] = emu_as_float(a[e] & 0xffffe000u);
  for (int e = 0; e < 2; ++e) wb[lane][e] = emu_as_float(b[e] & 0xffffe000u);
  w.barrier.arrive_and_wait();
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e >> 1), col = 2 * q + (e & 1);
    float sum = c[e];
    for (int k = 0; k < 8; ++k) {
      const float av = wa[(row % 8) * 4 + k % 4][(row >= 8) + 2 * (k >= 4)];
      const float bv = wb[col * 4 + k % 4][k >= 4];
      sum += av * bv;
    }
    c[e] = sum;
  }
}

// ldmatrix.sync.aligned.m8n8.x{count}.shared.b16 (not transposed) for the calling warp (every
// lane calls it): lane l gives the address of row l % 8 of matrix l / 8 (16 bytes); lane
// (g = lane / 4, q = lane % 4) gets in r[i] the 4 bytes at offset 4q of row g of matrix i.
// What ldmatrix's lanes exchange: every lane of the calling warp posts its row address and
// gets the 32 addresses back (two slots used in turn, so that a lane still reading one call's
// addresses is not overwritten by the next call's).
inline const unsigned char* const* emu_ldmatrix_rows(const void* row) {
  EmuWarp& w = *emu_warp;
  thread_local int slot = 0;
  const unsigned char* (&rows)[32] = w.rows[slot];
  slot ^= 1;
  rows[threadIdx.x % 32] = static_cast<const unsigned char*>(row);
  w.barrier.arrive_and_wait();
  return rows;
}

inline void emu_ldmatrix(uint32_t* r, int count, const void* row) {
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, q = lane % 4;
  const unsigned char* const* rows = emu_ldmatrix_rows(row);
  for (int i = 0; i < count; ++i) std::memcpy(&r[i], rows[8 * i + g] + 4 * q, 4);
}

// ldmatrix.sync.aligned.m8n8.x{count}.trans.shared.b16 for the calling warp (every lane calls
// it): lane l gives the address of row l % 8 of matrix l / 8 (16 bytes); lane (g = lane / 4,
// q = lane % 4) gets in r[i] element g of row 2q (low half) and of row 2q + 1 (high half) of
// matrix i: the matrix transposed.
inline void emu_ldmatrix_trans(uint32_t* r, int count, const void* row) {
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, q = lane % 4;
  const unsigned char* const* rows = emu_ldmatrix_rows(row);
  for (int i = 0; i < count; ++i) {
    uint16_t lo, hi;
    std::memcpy(&lo, rows[8 * i + 2 * q] + 2 * g, 2);
    std::memcpy(&hi, rows[8 * i + 2 * q + 1] + 2 * g, 2);
    r[i] = uint32_t(lo) | (uint32_t(hi) << 16);
  }
}

// The 16-bit element e (0: low half, 1: high) of a packed register, as float.
template <typename T>
float emu_half_of(uint32_t v, int e) {
  const uint16_t bits = static_cast<uint16_t>(v >> (16 * e));
  T x;
  std::memcpy(&x, &bits, 2);
  return static_cast<float>(x);
}

// mma.sync.m16n8k16.row.col.f32.{bf16,f16} for the calling warp (every lane calls it):
// c += A * B with PTX's fragment layout (g = lane / 4, q = lane % 4; two elements per
// register, the lower k in the low half): a = A[g][2q..], A[g+8][2q..], A[g][2q+8..],
// A[g+8][2q+8..]; b = B[2q..][g], B[2q+8..][g]; c = C[g][2q], C[g][2q+1], C[g+8][2q],
// C[g+8][2q+1]. Products of the half-type values are exact in float; the sum runs in k order
// (the tensor cores' own order and rounding differ within float accuracy).
template <typename T>
void emu_mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  EmuWarp& w = *emu_warp;
  thread_local int slot = 0;
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, q = lane % 4;
  uint32_t (&wa)[32][4] = w.ha[slot];
  uint32_t (&wb)[32][2] = w.hb[slot];
  slot ^= 1;
  for (int e = 0; e < 4; ++e) wa[lane][e] = a[e];
  for (int e = 0; e < 2; ++e) wb[lane][e] = b[e];
  w.barrier.arrive_and_wait();
  // A[row][k]: held by lane (row % 8) * 4 + (k % 8) / 2, register (row >= 8) + 2 (k >= 8),
  // half k % 2; B[k][col]: lane col * 4 + (k % 8) / 2, register k >= 8, half k % 2.
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e >> 1), col = 2 * q + (e & 1);
    float sum = c[e];
    for (int k = 0; k < 16; ++k) {
      const float av =
          emu_half_of<T>(wa[(row % 8) * 4 + (k % 8) / 2][(row >= 8) + 2 * (k >= 8)], k % 2);
      const float bv = emu_half_of<T>(wb[col * 4 + (k % 8) / 2][k >= 8], k % 2);
      sum += av * bv;
    }
    c[e] = sum;
  }
}

template <typename S>
double as_double(S v) {
  if constexpr (std::is_same_v<S, double>) {
    return v;
  } else {
    return static_cast<double>(static_cast<float>(v));
  }
}

// Relative error of got against want in the 2-norm; infinite if got has a non-finite value.
inline double rel_err(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}
