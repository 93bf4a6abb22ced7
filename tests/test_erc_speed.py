"""benchmarks/erc_speed.py: its measuring functions run on a tiny random backbone (no timing asserted)."""

from __future__ import annotations

import torch
from _benchmark_scripts import load_benchmark_script

from turnformer.backbones import random_backbone, tiny_config
from turnformer.dialogue import Dialogue, Turn
from turnformer.models.baselines import ConcatContext, ConcatContextConfig
from turnformer.models.dialogxl import DialogXL, DialogXLConfig
from turnformer.tasks.erc import encode_conversations, make_batches

CLS, SEP, PAD = 1, 2, 0
LABELS = ["joy", "sadness", "neutral"]


class WordTokenizer:
    """Words as token ids, [CLS] ... [SEP] when asked; one text or a list of texts."""

    cls_token_id, sep_token_id, pad_token_id = CLS, SEP, PAD

    def __call__(self, text, add_special_tokens=True, verbose=True):
        def one(s):
            ids = [5 + len(w) % 50 for w in s.split()]
            return [CLS] + ids + [SEP] if add_special_tokens else ids

        return {"input_ids": [one(t) for t in text] if isinstance(text, list) else one(text)}


def dialogues(n=6):
    words = "we were on a break oh my god fine guys what happened".split()
    return [
        Dialogue(tuple(Turn(f"s{(i + j) % 3}", " ".join(words[j % 5 : j % 5 + 2 + i % 4]), {"emotion": LABELS[(i + j) % 3]})
                       for j in range(2 + i % 4)), id=str(i))
        for i in range(n)
    ]


def models():
    encoder = random_backbone(tiny_config(vocab_size=60, hidden=32, layers=2, heads=4, max_positions=64), seed=0)
    torch.manual_seed(0)
    dialogxl = DialogXL(DialogXLConfig(num_labels=3, heads=(1, 1, 1, 1), window=2, mem_len=20), encoder, CLS, SEP, PAD)
    concat = ConcatContext(ConcatContextConfig(num_labels=3, max_length=24), encoder, CLS, SEP, PAD)
    return dialogxl, concat


def test_training_overhead_structure():
    bench = load_benchmark_script("erc_speed")
    dialogxl, _ = models()
    encoded, _ = encode_conversations(dialogues(), WordTokenizer(), "emotion", LABELS, 16)
    batches = bench.spread(make_batches(encoded, 2, PAD), 2)
    result = bench.training_overhead(dialogxl, batches, repeats=2, lr=1e-3)
    assert result["query_tokens"] == sum(bench.query_tokens(b, PAD) for b in batches) > 0
    for side in ("dialogxl", "bare"):
        assert result[side]["tokens_per_second"] > 0 and result[side]["forward_backward_tokens_per_second"] > 0
        assert len(result[side]["seconds_per_batch"]) == 2 and all(len(r) == len(batches) for r in result[side]["seconds_per_batch"])
    assert result["overhead"] > 0 and result["forward_backward_overhead"] > 0 and len(result["overhead_per_repeat"]) == 2


def test_streaming_latency_structure(tmp_path):
    bench = load_benchmark_script("erc_speed")
    dialogxl, concat = models()
    turns = bench.chain_turns(dialogues(), 12)
    assert len(turns) == 12 and len({s for s, _ in turns}) >= 2
    result = bench.streaming_latency(dialogxl, concat, WordTokenizer(), LABELS, turns, [1, 5, 12], repeats=2)
    assert result["lengths"] == [1, 5, 12]
    for side in ("dialogxl", "concat"):
        assert len(result[side]["median_ms"]) == 3 and all(x > 0 for x in result[side]["median_ms"])
        assert all(len(ms) == 2 for ms in result[side]["all_ms"])
    assert result["dialogxl"]["memory_tokens"][0] == 0 and max(result["dialogxl"]["memory_tokens"]) <= 20
    assert max(result["concat"]["sequence_tokens"]) <= 24  # truncated oldest-first to max_length
    assert all(r > 0 for r in result["speedup"])
    assert bench.plot_latency(result, tmp_path / "latency.png").read_bytes()[:4] == b"\x89PNG"


def test_concat_stream_packs_what_concat_context_packs():
    """The streamed row for utterance t is the row ConcatContext builds for (conversation, t)."""
    bench = load_benchmark_script("erc_speed")
    _, concat = models()
    tok = WordTokenizer()
    long = Dialogue(dialogues(1)[0].turns * 6, id="long")  # 12 turns, 37 tokens: truncated to 24
    encoded, _ = encode_conversations([long], tok, "emotion", LABELS, 16)
    chunks = concat.build_inputs(make_batches(encoded, 1, PAD)[0])
    rows = {row: (c.input_ids[i], c.token_type_ids[i], c.attention_mask[i]) for c in chunks for i, row in enumerate(c.rows)}
    stream = bench.ConcatStream(concat, tok)
    captured = []
    encode = concat.encoder.forward

    def spy(ids, token_type_ids=None, attention_mask=None):
        captured.append((ids, token_type_ids))
        return encode(ids, token_type_ids=token_type_ids, attention_mask=attention_mask)

    concat.encoder.forward = spy
    for t, turn in enumerate(long.turns):
        stream.add(turn.speaker, turn.text)
        ids, types, real = rows[(0, t)]
        assert captured[-1][0][0].tolist() == ids[real].tolist()
        assert captured[-1][1][0].tolist() == types[real].tolist()
