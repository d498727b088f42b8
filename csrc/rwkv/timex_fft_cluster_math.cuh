// RWKV TimeX past T = 16384: the building blocks of the fused FFT convolution whose row
// transform is spread over a thread-block cluster of P CTAs (sm_90), each CTA holding
// L = M / P complex values in its shared memory, the partners' values read and written
// through distributed shared memory (DSMEM). timex_fft_cluster_kernels.cuh has the kernels.
//
// The four-step split of DFT_M, M = P L (k = k1 + P k2, n = n2 + L n1; k1, n1 < P; k2, n2 < L):
//   Z[k1 + P k2] = sum_{n2} W_L^{n2 k2} [ sum_{n1} z[n2 + L n1] W_M^{k1 (n2 + L n1)} ]
// CTA of cluster rank r = k1 first forms y_r[n2] = sum_{n1} z[n2 + L n1] W_M^{r (n2 + L n1)}
// while loading the row from global memory (ClusterLoad: the row's z entries past T/2 are zero,
// not read), then runs the one-CTA Stockham DFT_L (timex_fft_stages.cuh) in its shared memory:
// it holds the frequencies k = r (mod P), frequency k at local index k2 = k / P (the "cluster
// layout"; global spectra and scratch use the same order, position r L + k2). The inverse is
// the same split transposed: each CTA runs DFT_L over its own k2 (merge stored conj U, as in
// the one-CTA kernels), and output n = n2 + L n1 = sum_r W_M^{r n} A_r[n2] reads the P CTAs'
// shared memory (cluster_combine): no DFT across CTAs beyond these P-term sums.
//
// A real row's half spectrum pairs frequency k with M - k, which lives in CTA (P - r) % P.
// cluster_pairs gives each pair one owner, the CTA holding k <= M/2: the owner reads both
// entries (one of them remotely), computes both results and writes both (remotely again), so
// no two threads touch one entry and a pass needs no barrier between its reads and writes.
//
// P is 2, 3, 4, 5 or 8 (1 in the emulation test): M = 3 L and 5 L are the lengths that are no
// power of two, so that a row of T <= 3 L is padded to 3 L instead of 4 L (25% fewer points)
// and one of T <= 5 L to 5 L instead of 6 L (17% fewer). L itself may be 3 2^k or 5 2^k (the
// one-CTA kernels' odd lengths: M = 20480 runs as 2 x 10240, 40960 as 4 x 10240, 49152 as 4 x
// 12288).
//
// Twiddles: the one-CTA table tw (e^{-2 pi i m / 32768}) for the DFT_L stages, and the
// cluster table twc of 2M entries (cluster_twiddle_kernel, in double, rounded once), laid out
// so that the threads of a warp read consecutive entries (a natural-order table read at
// stride 2r or P made every load of a warp touch up to 32 sectors):
//   twc[r L + n2]     = W_M^{r n2}        (r < P, n2 < L: the four-step's, per CTA rank)
//   twc[M + r L + k2] = W_{2M}^{r + P k2}  (the split's W_{2M}^k in the cluster layout)
// The four-step's W_M^{r n} for n = n2 + L n1 is W_M^{r n2} W_P^{r n1}: a table entry turned
// by a P-th root of unity (root_turn: exact for P = 2 and 4, a swap and sign changes; one
// rounding per product for P = 3, 5 and 8).
#pragma once

#include "rwkv/timex_fft_kernels.cuh"

#if !defined(TIMEX_EMULATE)
#include <cooperative_groups.h>
#endif

namespace rwkv::fft {

// The longest row of the cluster kernels: M <= kClusterMaxM, P = M / L <= 8.
constexpr int kClusterMaxM = 65536;

// The cluster primitives: rank in the cluster, the cluster-wide barrier (arrive.release +
// wait.acquire: it also publishes shared, distributed shared and global memory writes to
// the whole cluster) and a pointer to the same offset in another CTA's shared memory. The
// kernels exist for sm_90 and newer (the host launches them nowhere else: cluster_supported
// checks the device); for older targets the primitives are traps that no kernel body calls.
//
// cluster_sync_reads: the same barrier with a relaxed arrive, for the one use that publishes
// nothing: "every CTA's reads of my shared memory are done" before this CTA overwrites it or
// exits. Those reads (loads whose values the thread has already used, for a global store or
// a sum, before it arrives) are complete once their threads arrive. The release of
// cluster_sync would also wait for this CTA's pending global stores (the spectra, the
// output rows) to complete; ncu counted that wait as membar stalls.
//
// TIMEX_CLUSTER_CODE: whether the kernels get their bodies in this compilation pass: the
// host pass, the emulation and device code for sm_90 and newer. For older targets (most of
// the build's SM list) each kernel is an empty stub, which keeps their nvcc time down; the
// host never launches one there.
#if defined(TIMEX_EMULATE) || !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define TIMEX_CLUSTER_CODE 1
#else
#define TIMEX_CLUSTER_CODE 0
#endif
#if defined(TIMEX_EMULATE)
inline unsigned cluster_rank() { return emu_cluster_rank(); }
inline void cluster_sync() { emu_cluster_sync(); }
inline void cluster_sync_reads() { emu_cluster_sync(); }
template <typename T>
T* cluster_map(T* p, unsigned rank) {
  return emu_map_shared_rank(p, rank);
}
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
__device__ __forceinline__ unsigned cluster_rank() {
  __trap();
  return 0;
}
__device__ __forceinline__ void cluster_sync() { __trap(); }
__device__ __forceinline__ void cluster_sync_reads() { __trap(); }
template <typename T>
__device__ __forceinline__ T* cluster_map(T* p, unsigned) {
  __trap();
  return p;
}
#else
__device__ __forceinline__ unsigned cluster_rank() {
  return cooperative_groups::this_cluster().block_rank();
}
__device__ __forceinline__ void cluster_sync() { cooperative_groups::this_cluster().sync(); }
__device__ __forceinline__ void cluster_sync_reads() {
  asm volatile("barrier.cluster.arrive.relaxed;\n\tbarrier.cluster.wait;" ::: "memory");
}
template <typename T>
__device__ __forceinline__ T* cluster_map(T* p, unsigned rank) {
  return cooperative_groups::this_cluster().map_shared_rank(p, rank);
}
#endif

// A row of M = P * Sh::M spread over P CTAs of Sh's shape. MIN_BLOCKS: the CTAs per SM that the
// kernels' __launch_bounds__ ask for (TIMEX_CLUSTER_KERNEL): as many as the shared memory and the
// threads allow, so that ptxas caps the registers to fit them: 1 at L = 16384 (136 KiB, 1024
// threads, up to 64 registers), 2 at L = 10240 (85 KiB, 640 threads: 48 registers, 12-16 bytes
// spilled in the wgrad and backward kernels at P = 3 and 4) and at L = 12288 (102 KiB, 768 threads:
// 40 registers, 16-48 bytes spilled), 3 at L = 8192 (68 KiB, 512 threads: 40 registers, a few bytes
// spilled; at two CTAs, 52 to 64 registers, the 3-CTA kernels took 6-13% more time from 100
// channels on at T = 17000-24000 on the H200, 7% less at 39: benchmarks/results/
// issue29_runs/run42_kept_k_h200.md (f)).
template <class Sh, int P_>
struct ClusterShape {
  static_assert((P_ == 3 || P_ == 5 || (P_ >= 1 && P_ <= 8 && (P_ & (P_ - 1)) == 0)) &&
                    Sh::M >= 2,
                "P: 1, 2, 3, 4, 5 or 8");
  using Local = Sh;
  static constexpr int P = P_, L = Sh::M, M = P_ * Sh::M, THREADS = Sh::THREADS;
  static_assert(M <= kClusterMaxM, "M");
  // sm_90: 228 KiB of shared memory an SM, 1 KiB of it reserved per CTA; 2048 threads.
  static constexpr int BY_SMEM = 228 * 1024 / (Sh::SMEM + 1024), BY_THREADS = 2048 / THREADS;
  static constexpr int MIN_BLOCKS = BY_SMEM < BY_THREADS ? BY_SMEM : BY_THREADS;
  static_assert(MIN_BLOCKS >= 1, "MIN_BLOCKS");
};

// A cluster kernel's declaration for CS (the emulation tests' TIMEX_FFT_KERNEL elsewhere).
#if defined(TIMEX_EMULATE)
#define TIMEX_CLUSTER_KERNEL(CS) TIMEX_FFT_KERNEL(CS::THREADS)
#else
#define TIMEX_CLUSTER_KERNEL(CS) __global__ void __launch_bounds__(CS::THREADS, CS::MIN_BLOCKS)
#endif

// twc (see the top of the file) for CS's P, L, M and, in the same launch, the one-CTA
// stages' table tw (twiddle_value, the same bits as twiddle_kernel's) and the staged table of
// the local DFT_L (staged_value, timex_fft_stages.cuh; where staged is not null): any grid, any
// block size. Each twc entry is e^{-2 pi i e / (2M)} for an integer e < 2M: e / M is exact
// in double for M a power of two, and within half a double ulp (2^-53 relative) for M = 3 L
// and 5 L, far under the float rounding of the result.
template <class CS>
TIMEX_FFT_KERNEL(256) cluster_twiddle_kernel(cf32* __restrict__ twc, cf32* __restrict__ tw,
                                             cf32* __restrict__ staged = nullptr) {
  constexpr int M = CS::M, L = CS::L;
  const int n = 2 * M + kTwiddles + (staged != nullptr ? staged_size<typename CS::Local>() : 0);
  for (int m = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); m < n;
       m += static_cast<int>(gridDim.x * blockDim.x)) {
    if (m >= 2 * M + kTwiddles) {
      staged[m - 2 * M - kTwiddles] = staged_value<typename CS::Local>(m - 2 * M - kTwiddles);
      continue;
    }
    if (m >= 2 * M) {
      tw[m - 2 * M] = twiddle_value(m - 2 * M);
      continue;
    }
    const int i = m % M, r = i / L, j = i % L;
    const int e = m < M ? 2 * r * j : r + CS::P * j;  // W_M^{r j} = W_{2M}^{2 r j}
    const double x = static_cast<double>(e) / M;
#ifdef TIMEX_EMULATE
    const double s = std::sin(3.14159265358979323846 * x), c = std::cos(3.14159265358979323846 * x);
#else
    double s, c;
    sincospi(x, &s, &c);
#endif
    twc[m] = {static_cast<float>(c), static_cast<float>(-s)};
  }
}

// x mod P for x >= 0 (a mask where P is a power of two: the same code as before P = 3).
template <int P>
TIMEX_FFT_DEVICE int mod_p(int x) {
  if constexpr ((P & (P - 1)) == 0) {
    return x & (P - 1);
  } else {
    return x % P;
  }
}

// v W_P^e = v e^{-2 pi i e / P} for 0 <= e < P. P = 3: W_3^{1,2} = -1/2 -+ i sqrt(3)/2, a
// complex product in float (sqrt(3)/2 rounded once; the 1/2 exact); P = 5 likewise, W_5^e =
// cos(2 pi e / 5) - i sin(2 pi e / 5), each rounded once. Else -v past the half turn, then
// rotate's sixteenth turns (exact for P <= 4).
template <int P>
TIMEX_FFT_DEVICE cf32 root_turn(cf32 v, int e) {
  if constexpr (P == 3) {
    if (e == 0) return v;
    constexpr float kSin60 = 0.866025403784438646763723170752936183f;
    const float h = e == 1 ? kSin60 : -kSin60;  // W_3^e = -1/2 - i h
    return {fmaf(h, v.y, -0.5f * v.x), fmaf(-h, v.x, -0.5f * v.y)};
  }
  if constexpr (P == 5) {
    if (e == 0) return v;
    constexpr float kCos72 = 0.309016994374947424102293417182819059f;
    constexpr float kSin72 = 0.951056516295153572116439333379382143f;
    constexpr float kCos144 = -0.809016994374947424102293417182819059f;
    constexpr float kSin144 = 0.587785252292473129168705954639072769f;
    const float c = e == 1 || e == 4 ? kCos72 : kCos144;
    const float s = e == 1 ? kSin72 : e == 2 ? kSin144 : e == 3 ? -kSin144 : -kSin72;
    return {fmaf(c, v.x, s * v.y), fmaf(c, v.y, -s * v.x)};  // v (c - i s)
  }
  int e16 = e * (16 / P);
  if (e16 >= 8) {
    v = {-v.x, -v.y};
    e16 -= 8;
  }
  return rotate<16>(v, e16);
}

// W_{2M}^k for 0 <= k < M, the split's twiddle: twc's entry M + (k % P) L + k / P.
template <class CS>
TIMEX_FFT_DEVICE cf32 split_twiddle(const cf32* __restrict__ twc, int k) {
  return twc[CS::M + mod_p<CS::P>(k) * CS::L + k / CS::P];
}

// y_r[n2] = sum_{n1 < P} z[n2 + L n1] W_M^{r (n2 + L n1)}
//        = W_M^{r n2} sum_{n1 < P} z[n2 + L n1] W_P^{r n1}: the four-step's first step, as the
// load of the local DFT_L's first stage (z entries at 2n >= T are zero and not read); one
// table entry per value, read by a warp at consecutive addresses.
template <typename S, class CS>
struct ClusterLoad {
  RowLoad<S> row;
  unsigned rank;
  const cf32* twc;
  TIMEX_FFT_DEVICE cf32 operator()(int n2) const {
    const int r = static_cast<int>(rank);
    cf32 acc{0.f, 0.f};
#pragma unroll
    for (int n1 = 0; n1 < CS::P; ++n1) {
      const int n = n2 + n1 * CS::L;
      if (2 * n >= row.T) break;  // the rest of the row is zero padding
      acc = acc + root_turn<CS::P>(row(n), mod_p<CS::P>(r * n1));
    }
    return r == 0 ? acc : acc * twc[r * CS::L + n2];
  }
};

// For every frequency pair (k, j = M - k) that this CTA owns (k = r + P k2 <= M/2; k = 0 pairs
// with itself as P[0] = (X[0], X[M]), k = M/2 too), with the whole DFT_M in the cluster's
// shared memory: visit(k, pk, pj, Xk, Xj, slot_k, slot_j), X the real row's spectrum at k and
// j (packed at k = 0: Xk = Xj = P[0]), pk / pj the cluster-layout positions of k and j, and
// slot_k / slot_j their shared-memory entries (slot_j perhaps in another CTA; the owner is the
// only thread that touches both in this pass, so visit may write there: merge does).
template <class CS, typename Visit>
TIMEX_FFT_DEVICE void cluster_pairs(cf32* sm, const cf32* __restrict__ twc, const Visit& visit) {
  constexpr int P = CS::P, L = CS::L;
  const int r = static_cast<int>(cluster_rank()), rj = (P - r) % P;
  cf32* smj = cluster_map(sm, static_cast<unsigned>(rj));
  const int last = r == 0 ? L / 2 : L / 2 - 1;  // largest k2 with r + P k2 <= M/2
  for (int k2 = static_cast<int>(threadIdx.x); k2 <= last; k2 += CS::THREADS) {
    const int k = r + P * k2;
    cf32* slot_k = sm + pad(k2);
    if (k == 0) {
      const cf32 z = *slot_k;
      const cf32 p{z.x + z.y, z.x - z.y};
      visit(0, 0, 0, p, p, slot_k, slot_k);
      continue;
    }
    // j = M - k = rj + P k2j: k2j = L - k2 where r = 0, else L - 1 - k2.
    const int k2j = r == 0 ? L - k2 : L - 1 - k2;
    cf32* slot_j = smj + pad(k2j);
    const cf32 zk = *slot_k, zj = *slot_j;
    const cf32 sum = scale(zk + conj(zj), 0.5f), diff = zk - conj(zj);
    const cf32 t = twc[CS::M + r * L + k2] * cf32{diff.y * 0.5f, -diff.x * 0.5f};  // W_2M^k
    visit(k, r * L + k2, rj * L + k2j, sum + t, conj(sum - t), slot_k, slot_j);
  }
}

// visit(k, pk, pj, slot_k, slot_j) for the frequency pairs this CTA owns, the same pairs on
// the same threads as cluster_pairs (so that a scratch entry written in one of its passes is
// read back by its writer), without reading shared memory: for merging a spectrum kept in
// scratch into the (free) shared memory.
template <class CS, typename Visit>
TIMEX_FFT_DEVICE void cluster_owned(cf32* sm, const Visit& visit) {
  constexpr int P = CS::P, L = CS::L;
  const int r = static_cast<int>(cluster_rank()), rj = (P - r) % P;
  cf32* smj = cluster_map(sm, static_cast<unsigned>(rj));
  const int last = r == 0 ? L / 2 : L / 2 - 1;
  for (int k2 = static_cast<int>(threadIdx.x); k2 <= last; k2 += CS::THREADS) {
    const int k = r + P * k2;
    if (k == 0) {
      visit(0, 0, 0, sm, sm);
      continue;
    }
    const int k2j = r == 0 ? L - k2 : L - 1 - k2;
    visit(k, r * L + k2, rj * L + k2j, sm + pad(k2), smj + pad(k2j));
  }
}

// A cluster_pairs visitor that stores the pair's spectrum values to s (cluster layout).
struct StorePairs {
  cf32* s;
  TIMEX_FFT_DEVICE void operator()(int, int pk, int pj, cf32 xk, cf32 xj, cf32*, cf32*) const {
    s[pk] = xk;
    s[pj] = xj;
  }
};

// merge (timex_fft_pairs.cuh) for a pair of cluster_pairs, 1/(2M) folded in: conj(U[k]) to
// slot_k, conj(U[j]) to slot_j (for k = 0, the one entry).
template <class CS>
TIMEX_FFT_DEVICE void cluster_merge(const cf32* __restrict__ twc, int k, cf32 yk, cf32 yj,
                                    cf32* slot_k, cf32* slot_j) {
  constexpr float h = 1.0f / (2.0f * CS::M);
  if (k == 0) {  // yk = (Y[0], Y[M])
    *slot_k = {(yk.x + yk.y) * h, -(yk.x - yk.y) * h};
    return;
  }
  const cf32 e = scale(yk + conj(yj), h);
  const cf32 o = scale(mul_conj(yk - conj(yj), split_twiddle<CS>(twc, k)), h);
  *slot_k = {e.x - o.y, -(e.y + o.x)};  // conj(e + i o)
  *slot_j = {e.x + o.y, e.y - o.x};     // conj(conj(e) + i conj(o))
}

// The inverse's last step after every CTA's DFT_L of its conj(U) (A_r in shared memory):
// store(n, sum_r W_M^{r n} A_r[n2]) for the outputs n = n2 + L n1 < M/2 (the real row's first
// M >= T values; the store conjugates and drops 2n >= T), L/2 of them per CTA, consecutive
// n across a warp (coalesced global stores, conflict-free remote reads).
template <class CS, typename S>
TIMEX_FFT_DEVICE void cluster_combine(cf32* sm, const cf32* __restrict__ twc,
                                      const RowStore<S>& store) {
  constexpr int P = CS::P, L = CS::L;
  const unsigned r = cluster_rank();
  const cf32* src[P];
#pragma unroll
  for (int q = 0; q < P; ++q) src[q] = cluster_map(sm, static_cast<unsigned>(q));
  for (int i = static_cast<int>(threadIdx.x); i < L / 2; i += CS::THREADS) {
    // n2 = n mod L (a mask where L is a power of two; L = 10240 is not).
    const int n = static_cast<int>(r) * (L / 2) + i, n2 = static_cast<int>(unsigned(n) % L);
    if (2 * n >= store.T) break;  // n grows with i: the rest is past the row
    cf32 acc = src[0][pad(n2)];
#pragma unroll
    for (int q = 1; q < P; ++q) {
      // W_M^{q n} = W_M^{q n2} W_P^{q n1}, n1 = n / L
      const cf32 t = root_turn<P>(twc[q * L + n2], mod_p<P>(q * (n / L)));
      acc = acc + src[q][pad(n2)] * t;
    }
    store(n, acc);
  }
}

}  // namespace rwkv::fft
