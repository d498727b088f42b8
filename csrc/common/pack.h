// Vector packs for kernel loads and stores; plain C++, so that kernel headers that need only
// these also compile as host code (the CPU emulation tests in tests/).
#pragma once

namespace fused_ops {

// V elements of T loaded or stored as one aligned access (16 bytes at most).
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Elements of T in one 16-byte access.
template <typename T>
constexpr int pack16 = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;

}  // namespace fused_ops
