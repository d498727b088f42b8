// An on/off switch read from the environment: kept to measure a variant in one process (a test
// or benchmark sets it between calls), so it is read at every call.
#pragma once

#include <cstdlib>
#include <cstring>

namespace fused_ops {

// On unless the variable `name` is set to 0.
inline bool switch_on(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

}  // namespace fused_ops
