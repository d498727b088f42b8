// Each family has two Python extension modules, `<package>._C` (schemas and CPU kernels) and
// `<package>._C_cuda` (CUDA kernels), whose only job is to load their shared library, so that
// its STABLE_TORCH_LIBRARY blocks register the ops with the dispatcher. The ops are then
// reached through torch.ops.<namespace>.<op>; the modules themselves are empty and use only
// the limited Python API (abi3), so one build serves every Python.
#pragma once

#include <Python.h>

#define FUSED_OPS_PYTHON_MODULE(NAME)                                                  \
  extern "C" PyObject* PyInit_##NAME(void) {                                           \
    static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, #NAME, nullptr, -1, \
                                            nullptr};                                  \
    return PyModule_Create(&module_def);                                               \
  }
