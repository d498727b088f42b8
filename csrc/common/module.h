// Each family is a Python extension module `<package>._C` whose only job is to load the
// shared library, so that its TORCH_LIBRARY blocks register the ops with the dispatcher.
// The ops are then reached through torch.ops.<namespace>.<op>; the module itself is
// empty and uses only the limited Python API (abi3), so one build serves every Python.
#pragma once

#include <Python.h>

#define FUSED_OPS_PYTHON_MODULE()                                                     \
  extern "C" PyObject* PyInit__C(void) {                                              \
    static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, \
                                            nullptr};                                 \
    return PyModule_Create(&module_def);                                              \
  }
