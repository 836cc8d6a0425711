"""Prepared files load in verl's own RLHFDataset with the real Qwen3 tokenizer, as the trainer loads them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from cleaner.data.prepare import PrepareConfig, prepare_rows
from cleaner.data.rows import read_rows
from cleaner.names import AGENT_NAME

pytestmark = pytest.mark.slow  # verl's RLHFDataset with a real tokenizer

SAMPLES = Path(__file__).resolve().parents[2] / "dataset" / "samples"


def test_prepared_rows_feed_verl_rlhf_dataset(tmp_path, qwen3_tokenizer):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    files = []
    for sample, split in (("open-agentrl-30k", "train"), ("livecodebench-v6", "test"), ("gpqa-diamond", "test")):
        rows = prepare_rows(read_rows(SAMPLES / f"{sample}.sample.jsonl"), PrepareConfig(split=split)).rows
        path = tmp_path / f"{sample}.parquet"
        pd.DataFrame(rows).to_parquet(path)
        files.append(str(path))
    config = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": 2560,
            "return_raw_chat": True,
            "filter_overlong_prompts": True,
            "truncation": "error",
            "cache_dir": str(tmp_path / "cache"),
        }
    )
    dataset = RLHFDataset(data_files=files, tokenizer=qwen3_tokenizer, config=config)
    assert len(dataset) == 7 + 2 + 2  # the three files, none filtered as overlong
    item = dataset[7]
    assert item["data_source"] == "LiveCodeBench_v6" and item["agent_name"] == AGENT_NAME
    assert item["raw_prompt"][0]["role"] == "user" and "standard input" in item["raw_prompt"][0]["content"]
    assert item["extra_info"]["question_id"] == "synthetic-lcb-001"
    assert item["reward_model"]["ground_truth"].startswith('{"inputs"')
