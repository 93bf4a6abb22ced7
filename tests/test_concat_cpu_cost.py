"""benchmarks/concat_cpu_cost.py: its measures on a tiny random backbone (no timing asserted): a shorter history
encodes fewer tokens and cuts rows, the largest batch is the one with the most padded tokens, a step's memory is read."""

from __future__ import annotations

import copy
import dataclasses

import torch
from _benchmark_scripts import load_benchmark_script
from test_erc_speed import LABELS, PAD, WordTokenizer, dialogues, models

from turnformer.models.baselines import ConcatContext
from turnformer.tasks.erc import encode_conversations, make_batches


def test_the_cheaper_settings_encode_fewer_tokens():
    bench = load_benchmark_script("concat_cpu_cost")
    _, base = models()
    settings = bench.settings_for(base.encoder.num_layers)
    assert settings == {"recipe": {}, "frozen-half": {"frozen_layers": 1}, "len128": {"max_length": 128},
                        "frozen-half-len128": {"frozen_layers": 1, "max_length": 128}}
    encoded, _ = encode_conversations(dialogues(12), WordTokenizer(), "emotion", LABELS, 16)
    batches = make_batches(encoded, 4, PAD)
    built = {}
    for name, changes in {"recipe": {"max_length": 64}, "frozen": {"max_length": 64, "frozen_layers": 1},
                          "short": {"max_length": 8}}.items():
        model = ConcatContext(dataclasses.replace(base.config, **changes), copy.deepcopy(base.encoder), base.cls_id,
                              base.sep_id, base.pad_id)
        model.load_state_dict(base.state_dict())
        built[name] = model
    rows = sum(sum(b.lengths) for b in batches)
    tokens, cut = bench.epoch_tokens(built["recipe"], batches)
    short_tokens, short_cut = bench.epoch_tokens(built["short"], batches)
    assert cut == 0 and tokens > short_tokens >= rows * 3 and 0 < short_cut < rows
    assert bench.epoch_tokens(built["frozen"], batches) == (tokens, 0)
    padded = [sum(c.input_ids.numel() for c in built["recipe"].build_inputs(b)) for b in batches]
    assert bench.largest_batch(built["recipe"], batches) is batches[padded.index(max(padded))]
    assert bench.spread(list(range(10)), 3) == [0, 4, 9] and bench.spread([1, 2], 5) == [1, 2]
    with torch.no_grad():  # the models measured are the same model
        assert torch.equal(built["frozen"].eval().logits(batches[0]), built["recipe"].eval().logits(batches[0]))
    optimizer = torch.optim.AdamW(built["recipe"].parameters())
    step = bench.peak_step(built["recipe"], optimizer, batches[-1])
    assert step["seconds"] > 0 and 0 < step["resident_gb_before"] <= step["peak_resident_gb"]
