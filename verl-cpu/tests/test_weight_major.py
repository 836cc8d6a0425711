"""Weight-major linear layers in the CPU rollout: same outputs as nn.Linear, and the sampler's tokens unchanged."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl_cpu.decoding import generate_batch
from verl_cpu.sampling import SamplingRequest
from verl_cpu.weight_major import MAX_WEIGHT_MAJOR_ROWS, use_weight_major_matmul


@pytest.mark.parametrize("rows", [1, 8, MAX_WEIGHT_MAJOR_ROWS, MAX_WEIGHT_MAJOR_ROWS + 1, 300])
@pytest.mark.parametrize("bias", [True, False])
def test_a_weight_major_layer_computes_what_nn_linear_computes(rows, bias):
    torch.manual_seed(rows)
    layer = torch.nn.Linear(48, 80, bias=bias)
    inputs = torch.randn(rows, 3, 48)[:, 1]  # a strided view, as the attention layers hand over
    expected = layer(inputs)
    patched = copy.deepcopy(layer)
    assert use_weight_major_matmul(patched) == 1
    outputs = patched(inputs)
    assert outputs.shape == expected.shape and outputs.is_contiguous()
    torch.testing.assert_close(outputs, expected, atol=1e-5, rtol=1e-5)


def test_a_weight_major_layer_follows_its_weights_when_they_are_overwritten():
    layer = torch.nn.Linear(4, 3)
    use_weight_major_matmul(layer)
    with torch.no_grad():
        layer.weight.copy_(torch.zeros(3, 4))  # what a weight sync does: copy into the same tensor
        layer.bias.copy_(torch.tensor([1.0, 2.0, 3.0]))
    assert layer(torch.ones(2, 4)).tolist() == [[1.0, 2.0, 3.0]] * 2


@pytest.mark.slow
def test_the_tiny_model_samples_the_same_tokens_with_weight_major_layers(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    requests = [
        SamplingRequest(list(range(10, 10 + length)), max_tokens=12, temperature=1.0, seed=row)
        for row, length in enumerate([5, 17, 40, 9])
    ]
    plain = generate_batch(model, requests, pad_id=0, rng=torch.Generator())
    # Every nn.Linear of the model, its LM head included.
    assert use_weight_major_matmul(model) == sum(type(m) is torch.nn.Linear for m in model.modules())
    assert "forward" in vars(model.lm_head)
    patched = generate_batch(model, requests, pad_id=0, rng=torch.Generator())
    for before, after in zip(plain, patched, strict=True):
        assert after.token_ids == before.token_ids
        assert after.log_probs == pytest.approx(before.log_probs, abs=1e-4)
