"""Weight-major matrix products for the few rows a decoding step feeds through each linear layer.

`nn.Linear` computes x·Wᵀ. With a handful of rows (one token for each of ≤ 8 decoding rows) MKL's float32
GEMM handles that layout poorly; the same product taken as (W·xᵀ)ᵀ, the weight's output dimension as the long
side, makes one float32 decoding step of the 0.5B model take 199 ms instead of 218 ms for 8 rows and 73 instead
of 82 ms for one (bf16: 118 against 112 ms for 8 rows, 102 against 125 ms for one; benchmarks/README.md). From about 256 rows
(prefills) the two layouts cost the same and the copy back to row-major would be wasted, so those keep x·Wᵀ.
The values are the same product up to float32 rounding order."""

from __future__ import annotations

import types

import torch

# Up to this many rows the weight-major product is faster (measured on the 0.5B model's layer shapes).
MAX_WEIGHT_MAJOR_ROWS = 64


def _weight_major_forward(self: torch.nn.Linear, inputs: torch.Tensor) -> torch.Tensor:
    rows = inputs.reshape(-1, self.in_features)
    if rows.shape[0] > MAX_WEIGHT_MAJOR_ROWS:
        return torch.nn.functional.linear(inputs, self.weight, self.bias)
    # Contiguous again: the attention layers reshape these outputs into heads and run faster on dense tensors.
    outputs = torch.mm(self.weight, rows.t()).t().contiguous()
    if self.bias is not None:
        outputs += self.bias
    return outputs.reshape(*inputs.shape[:-1], self.out_features)


def use_weight_major_matmul(model: torch.nn.Module) -> int:
    """Make every plain `nn.Linear` of `model` use the weight-major product for few rows; returns how many.

    The layers keep their parameters (a weight sync copies into the same tensors), only `forward` changes."""
    layers = [module for module in model.modules() if type(module) is torch.nn.Linear]
    for layer in layers:
        layer.forward = types.MethodType(_weight_major_forward, layer)
    return len(layers)
