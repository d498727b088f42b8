// The one way the CPU kernels get threads: at::parallel_for, through this header.
//
// at::parallel_for is a header template. With torch's OpenMP backend (the Linux wheels)
// it splits work across threads only in code compiled with OpenMP; compiled without
// -fopenmp it quietly runs the whole range on the calling thread. setup.py passes
// -fopenmp; this check makes a build that lost the flag fail instead of running serial.
#pragma once

#include <ATen/Config.h>
#include <ATen/Parallel.h>

#if AT_PARALLEL_OPENMP && defined(__linux__) && !defined(_OPENMP)
#error "compile the CPU kernels with -fopenmp: without it at::parallel_for runs on one thread"
#endif
