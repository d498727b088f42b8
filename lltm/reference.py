"""The tutorial's pure-PyTorch LLTM: the reference that tests and benchmarks compare against."""

import torch
import torch.nn.functional as F


def lltm_cell_reference(input, weights, bias, old_h, old_cell):
    X = torch.cat([old_h, input], dim=1)
    gate_weights = F.linear(X, weights, bias)
    gates = gate_weights.chunk(3, dim=1)
    input_gate = torch.sigmoid(gates[0])
    output_gate = torch.sigmoid(gates[1])
    candidate_cell = F.elu(gates[2])
    new_cell = old_cell + candidate_cell * input_gate
    new_h = torch.tanh(new_cell) * output_gate
    return new_h, new_cell
