"""Drop-in for the tutorial's `lltm_cuda` (and `lltm_cpp`) extension module.

`forward` and `backward` take the tutorial's arguments in its order and return its
outputs; they run on whichever device the tensors are on. The outputs are:
forward  -> [new_h, new_cell, input_gate, output_gate, candidate_cell, X, gate_weights]
backward -> [d_old_h, d_input, d_weights, d_bias, d_old_cell]
where gate_weights (B, 3S) holds the gate pre-activations and d_bias has bias's shape (3S,).
"""

import torch
import torch.nn.functional as F

import lltm  # noqa: F401  (registers torch.ops.lltm.*)

_ALL_GRADIENTS = (True, True, True, True)  # lltm_backward's output_mask


def forward(input, weights, bias, old_h, old_cell):
    new_h, new_cell, X, gate_weights = torch.ops.lltm.lltm_forward(
        input, weights, bias, old_h, old_cell
    )
    z_i, z_o, z_c = gate_weights.chunk(3, dim=1)
    return [new_h, new_cell, torch.sigmoid(z_i), torch.sigmoid(z_o), F.elu(z_c), X, gate_weights]


def backward(grad_h, grad_cell, new_cell, input_gate, output_gate, candidate_cell, X,
             gate_weights, weights):
    # The fused kernel recomputes the activations from gate_weights; the tutorial's CUDA
    # module hands gate_weights over as (B, 3, S), which is the same memory as (B, 3S).
    gate_weights = gate_weights.reshape(new_cell.shape[0], -1)
    d_input, d_weights, d_bias, d_old_h, d_old_cell = torch.ops.lltm.lltm_backward(
        grad_h, grad_cell, new_cell, gate_weights, X, weights, _ALL_GRADIENTS
    )
    return [d_old_h, d_input, d_weights, d_bias, d_old_cell]
