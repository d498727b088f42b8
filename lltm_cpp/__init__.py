"""Drop-in for the C++ tutorial's `lltm_cpp` extension module (PyTorch's C++/CUDA extension
tutorial): `forward` and `backward` take its arguments in its order and return its outputs,
on whichever device the tensors are (CPU or CUDA):

forward  -> [new_h, new_cell, input_gate, output_gate, candidate_cell, X, gate_weights]
backward -> [d_old_h, d_input, d_weights, d_bias, d_old_cell]

gate_weights is (B, 3S) (the gate pre-activations), bias may be (3S,) or (1, 3S), d_bias is
(1, 3S). The CUDA tutorial's module is `lltm_cuda`.
"""

from lltm import _tutorial


def forward(input, weights, bias, old_h, old_cell):
    return _tutorial.forward(input, weights, bias, old_h, old_cell, split_gates=False)


def backward(grad_h, grad_cell, new_cell, input_gate, output_gate, candidate_cell, X,
             gate_weights, weights):
    return _tutorial.backward(grad_h, grad_cell, new_cell, input_gate, output_gate,
                              candidate_cell, X, gate_weights, weights, split_gates=False)[:5]


__all__ = ["forward", "backward"]
