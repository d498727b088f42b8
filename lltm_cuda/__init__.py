"""Drop-in for the CUDA tutorial's `lltm_cuda` extension module (PyTorch's C++/CUDA
extension tutorial): `forward` and `backward` take its arguments in its order and return its
outputs, on whichever device the tensors are (CPU or CUDA):

forward  -> [new_h, new_cell, input_gate, output_gate, candidate_cell, X, gates]
backward -> [d_old_h, d_input, d_weights, d_bias, d_old_cell, d_gates]

gates and d_gates are (B, 3, S) (gate pre-activations and their gradient), bias may be (3S,)
or (1, 3S), d_bias is (1, 3S). The C++ tutorial's module is `lltm_cpp`.
"""

from lltm import _tutorial


def forward(input, weights, bias, old_h, old_cell):
    return _tutorial.forward(input, weights, bias, old_h, old_cell, split_gates=True)


def backward(grad_h, grad_cell, new_cell, input_gate, output_gate, candidate_cell, X, gates,
             weights):
    return _tutorial.backward(grad_h, grad_cell, new_cell, input_gate, output_gate,
                              candidate_cell, X, gates, weights, split_gates=True)


__all__ = ["forward", "backward"]
