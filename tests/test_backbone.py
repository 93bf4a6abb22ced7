"""The project's BERT encoder: parity with transformers, memory recurrence, per-head masks,
the empty-row policy, loading errors and the `backbone check` command."""

from __future__ import annotations

import json
import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file
from typer.testing import CliRunner

from turnformer.backbones import (
    BackboneLoadError,
    StructuredEncoder,
    UnsupportedBackboneError,
    check_backbone,
    load_backbone,
    load_tokenizer,
    load_weights,
    random_backbone,
    resolve_backbone,
    tiny_config,
)
from turnformer.backbones.cli import backbone_app

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the Hub

TOL = 1e-5


@pytest.fixture
def tiny() -> StructuredEncoder:
    return random_backbone(tiny_config(vocab_size=50, hidden=32, layers=2, heads=4), seed=0)


def _ids(batch: int, length: int, vocab: int = 50, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab, (batch, length), generator=g)


# --- parity with transformers ---------------------------------------------------------------


@pytest.mark.parametrize("output_attentions", [False, True], ids=["sdpa", "explicit"])
def test_parity_with_transformers_on_tiny_random_bert(output_attentions):
    from transformers import BertModel

    config = tiny_config(vocab_size=50, hidden=32, layers=2, heads=4)
    torch.manual_seed(0)
    reference = BertModel(config).eval()
    ours = StructuredEncoder(config).eval()
    load_weights(ours, reference.state_dict())

    ids = _ids(3, 9)
    real = torch.ones(3, 9, dtype=torch.bool)
    real[1, 6:] = False
    real[2, 3:] = False
    ids[~real] = 0
    types = torch.zeros_like(ids)
    types[:, 4:] = 1
    with torch.no_grad():
        theirs = reference(input_ids=ids, token_type_ids=types, attention_mask=real.long())
        mine = ours(ids, token_type_ids=types, attention_mask=real, output_attentions=output_attentions)
    diff = (mine.last_hidden_state - theirs.last_hidden_state).abs()[real].max()
    assert diff < TOL
    assert (mine.pooler_output - theirs.pooler_output)[real[:, 0]].abs().max() < TOL


def test_parity_with_transformers_on_all_minilm_l6_v2():
    result = check_backbone("all-MiniLM-L6-v2")
    assert result["ok"], result
    assert result["max_abs_diff"] < TOL
    assert result["sentences"] >= 3 and result["tokens"] > result["sentences"]


def test_load_tokenizer_alone():
    tokenizer = load_tokenizer("minilm")
    assert tokenizer.is_fast
    assert tokenizer("hello there")["input_ids"][0] == tokenizer.cls_token_id


def test_load_errors_are_os_errors(tmp_path):
    # Callers that already handle file problems with `except OSError` catch these too.
    with pytest.raises(OSError, match="no such model folder"):
        load_backbone(str(tmp_path / "no" / "such" / "folder"))


def test_minilm_aliases_resolve_to_the_same_offline_folder():
    folders = {resolve_backbone(n) for n in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", "minilm")}
    assert len(folders) == 1
    assert (folders.pop() / "config.json").is_file()


def test_load_backbone_returns_eval_model_and_fast_tokenizer():
    model, tokenizer = load_backbone("minilm")
    assert not model.training and tokenizer.is_fast
    assert model.config.num_hidden_layers == 6 and model.pooler is not None
    batch = tokenizer(["hello there", "hi"], padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True)
    assert out.last_hidden_state.shape == (2, batch["input_ids"].shape[1], 384)
    assert len(out.hidden_states) == 7 and out.hidden_states[-1] is out.last_hidden_state


# --- memory (Transformer-XL recurrence) -------------------------------------------------------


def test_memory_recurrence_equals_one_pass_with_segment_causal_mask(tiny):
    batch, len_a, len_b = 2, 5, 4
    ids = _ids(batch, len_a + len_b, seed=1)
    types = torch.cat([torch.zeros(batch, len_a), torch.ones(batch, len_b)], dim=1).long()
    # Second dialogue's segment A has two padding tokens: padding is masked out as a key everywhere.
    real = torch.ones(batch, len_a + len_b, dtype=torch.bool)
    real[1, len_a - 2 : len_a] = False

    total = len_a + len_b
    seg_b = torch.arange(total) >= len_a
    # Query q may see key k if k is in A, or if q is in B: A sees only A, B sees A and B.
    causal = ~seg_b[None, :] | seg_b[:, None]
    joint_mask = causal[None] & real[:, None, :]
    with torch.no_grad():
        joint = tiny(ids, token_type_ids=types, attention_mask=joint_mask).last_hidden_state

        first = tiny(ids[:, :len_a], token_type_ids=types[:, :len_a], attention_mask=real[:, :len_a],
                     output_hidden_states=True)
        memory = list(first.hidden_states[:-1])  # input of each layer, for A's tokens
        second = tiny(
            ids[:, len_a:],
            token_type_ids=types[:, len_a:],
            position_ids=torch.arange(len_a, total).expand(batch, -1),
            memory=memory,
            memory_mask=real[:, :len_a],
        ).last_hidden_state

    assert (joint[:, :len_a] - first.last_hidden_state)[real[:, :len_a]].abs().max() < TOL
    assert (joint[:, len_a:] - second).abs().max() < TOL


def test_memory_with_full_key_mask_and_gradients(tiny):
    tiny.train()
    ids_a, ids_b = _ids(2, 3, seed=2), _ids(2, 4, seed=3)
    memory = [h.detach() for h in tiny(ids_a, output_hidden_states=True).hidden_states[:-1]]
    mask = torch.ones(2, 3 + 4, dtype=torch.bool)
    mask[0, :3] = False  # first dialogue ignores its memory
    out = tiny(ids_b, memory=memory, attention_mask=mask, output_attentions=True)
    assert out.attentions[0].shape == (2, 4, 4, 7)
    assert torch.all(out.attentions[0][0, :, :, :3] == 0)
    out.last_hidden_state.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for n, p in tiny.named_parameters()
               if n.startswith("encoder."))


def test_memory_shape_is_checked(tiny):
    with pytest.raises(ValueError, match="one per layer"):
        tiny(_ids(1, 3), memory=[torch.zeros(1, 2, 32)])
    with pytest.raises(ValueError, match=r"memory\[1\]"):
        tiny(_ids(1, 3), memory=[torch.zeros(1, 2, 32), torch.zeros(1, 3, 32)])


# --- per-head masks ---------------------------------------------------------------------------


def test_per_head_mask_gives_zero_probability_exactly_where_masked(tiny):
    batch, length, heads = 2, 6, 4
    g = torch.Generator().manual_seed(4)
    mask = torch.rand(batch, heads, length, length, generator=g) < 0.5
    mask |= torch.eye(length, dtype=torch.bool)  # every row sees at least itself
    assert not torch.equal(mask[:, 0], mask[:, 1])  # the heads really differ
    with torch.no_grad():
        explicit = tiny(_ids(batch, length), attention_mask=mask, output_attentions=True)
        fast = tiny(_ids(batch, length), attention_mask=mask)
    for probs in explicit.attentions:
        assert probs.shape == (batch, heads, length, length)
        assert torch.all(probs[~mask] == 0)
        assert torch.all(probs[mask] > 0)
        torch.testing.assert_close(probs.sum(-1), torch.ones(batch, heads, length))
    # The fast (SDPA) path and the explicit path compute the same thing.
    assert (explicit.last_hidden_state - fast.last_hidden_state).abs().max() < TOL


def test_mask_shapes_broadcast_alike(tiny):
    ids = _ids(2, 5)
    keys = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])  # integer 0/1 like a tokenizer's
    full = keys.bool()[:, None, None, :].expand(2, 4, 5, 5)
    with torch.no_grad():
        a = tiny(ids, attention_mask=keys).last_hidden_state
        b = tiny(ids, attention_mask=full).last_hidden_state
        c = tiny(ids, attention_mask=full[:, 0]).last_hidden_state
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(a, c, rtol=0, atol=0)
    with pytest.raises(TypeError, match="bool"):
        tiny(ids, attention_mask=keys.float())
    with pytest.raises(ValueError, match="does not cover"):
        tiny(ids, attention_mask=keys[:, :4])


# --- empty-row policy -------------------------------------------------------------------------


@pytest.mark.parametrize("output_attentions", [False, True], ids=["sdpa", "explicit"])
def test_empty_row_attends_to_nothing(tiny, output_attentions):
    """A query that may see no key gets exactly zero attention output for that head."""
    attention = tiny.encoder.layer[0].attention.self
    hidden = torch.randn(2, 5, 32)
    mask = torch.ones(2, 4, 5, 5, dtype=torch.bool)
    mask[0, 1, 2] = False  # batch 0, head 1, query 2: no visible key
    mask[1, :, 4] = False  # batch 1, query 4: no visible key in any head
    context, probs = attention(hidden, mask, output_attentions=output_attentions)
    per_head = context.view(2, 5, 4, 8)  # [B, T, H, d]
    assert torch.all(per_head[0, 2, 1] == 0)
    assert torch.all(per_head[1, 4] == 0)
    assert per_head[0, 2, 0].abs().sum() > 0  # the other heads still attend
    if output_attentions:
        assert torch.all(probs[0, 1, 2] == 0) and torch.all(probs[1, :, 4] == 0)
        torch.testing.assert_close(probs[0, 0, 2].sum(), torch.tensor(1.0))


@pytest.mark.parametrize("output_attentions", [False, True], ids=["sdpa", "explicit"])
def test_empty_rows_give_no_nan_in_outputs_or_gradients(tiny, output_attentions):
    tiny.train()
    ids = _ids(3, 5)
    mask = torch.ones(3, 4, 5, 5, dtype=torch.bool)
    mask[0, 2, 1] = False  # one head of one query
    mask[1, :, 3] = False  # every head of one query
    mask[2] = False  # a whole dialogue with nothing visible
    out = tiny(ids, attention_mask=mask, output_attentions=output_attentions, output_hidden_states=True)
    assert all(torch.isfinite(h).all() for h in out.hidden_states)
    (out.last_hidden_state.square().sum() + out.pooler_output.sum()).backward()
    for name, param in tiny.named_parameters():
        assert param.grad is None or torch.isfinite(param.grad).all(), name


def test_dropout_only_in_training(tiny):
    ids = _ids(2, 6)
    with torch.no_grad():
        a, b = tiny(ids).last_hidden_state, tiny(ids).last_hidden_state
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        tiny.train()
        torch.manual_seed(0)
        c = tiny(ids).last_hidden_state
    assert not torch.equal(a, c)


def test_position_embeddings_can_be_switched_off():
    config = tiny_config(vocab_size=50)
    with_pos = random_backbone(config, seed=0)
    without = random_backbone(config, seed=0, use_position_embeddings=False)
    ids = torch.full((1, 4), 7)
    with torch.no_grad():
        h = without(ids).last_hidden_state
        h_pos = with_pos(ids).last_hidden_state
    # Same token everywhere and no positions: every position gets the same vector.
    torch.testing.assert_close(h, h[:, :1].expand_as(h))
    assert not torch.allclose(h_pos[:, 0], h_pos[:, 1])
    assert set(with_pos.state_dict()) == set(without.state_dict())  # checkpoints still load


# --- loading errors ---------------------------------------------------------------------------


def _write_folder(folder, config, model=None):
    folder.mkdir(parents=True, exist_ok=True)
    config.to_json_file(str(folder / "config.json"))
    if model is not None:
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
    return folder


def test_local_folder_loads_with_prefix_and_without_pooler(tmp_path, tiny):
    state = {f"bert.{k}": v.contiguous() for k, v in tiny.state_dict().items() if not k.startswith("pooler.")}
    state["cls.predictions.bias"] = torch.zeros(50)  # a task head: not part of the encoder
    folder = _write_folder(tmp_path / "m", tiny.config)
    save_file(state, str(folder / "model.safetensors"))
    model, tokenizer = load_backbone(str(folder), with_tokenizer=False)
    assert tokenizer is None and model.pooler is None
    ids = _ids(1, 4)
    with torch.no_grad():
        torch.testing.assert_close(model(ids).last_hidden_state, tiny(ids).last_hidden_state, rtol=0, atol=0)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_weights_file_names_the_file(tmp_path, tiny, damage):
    folder = _write_folder(tmp_path / "m", tiny.config, tiny)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(b"not a safetensors file" if damage == "garbage" else data[: len(data) // 2])
    with pytest.raises(BackboneLoadError, match="model.safetensors") as err:
        load_backbone(str(folder), with_tokenizer=False)
    assert "corrupt or truncated" in str(err.value)


def test_mismatched_weights_list_missing_and_unexpected_keys(tmp_path, tiny):
    folder = _write_folder(tmp_path / "m", tiny.config)
    state = {k: v.contiguous() for k, v in tiny.state_dict().items() if "layer.1." not in k}
    state["encoder.layer.9.extra.weight"] = torch.zeros(1)
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(BackboneLoadError, match=r"missing \d+ keys: encoder\.layer\.1\..*unexpected 1 keys"):
        load_backbone(str(folder), with_tokenizer=False)


def test_unknown_model_type_is_a_clear_error(tmp_path):
    folder = tmp_path / "gpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2}))
    with pytest.raises(NotImplementedError, match="'gpt2'"):
        load_backbone(str(folder))
    with pytest.raises(UnsupportedBackboneError):
        load_backbone(str(folder))


def test_missing_folder_and_offline_hub_name_are_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(BackboneLoadError, match="no such model folder"):
        load_backbone(str(tmp_path / "nowhere" / "at" / "all"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BackboneLoadError, match="Hugging Face Hub"):
        load_backbone("turnformer-tests/no-such-model")
    with pytest.raises(BackboneLoadError, match="no weights found"):
        load_backbone(str(_write_folder(tmp_path / "empty", tiny_config())))


# --- CLI --------------------------------------------------------------------------------------


def test_cli_check_prints_the_difference():
    result = CliRunner().invoke(backbone_app, ["check", "all-MiniLM-L6-v2"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("all-MiniLM-L6-v2: max |ours - transformers| = ")
    assert "(OK, below 1e-05)" in result.output


def test_cli_check_json_and_exit_codes(tmp_path, monkeypatch):
    runner = CliRunner()
    result = runner.invoke(backbone_app, ["check", "minilm", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["ok"] and payload["max_abs_diff"] < TOL

    result = runner.invoke(backbone_app, ["check", str(tmp_path / "a" / "b" / "c")])
    assert result.exit_code == 2
    assert "no such model folder" in result.output
    result = runner.invoke(backbone_app, ["check", " "])
    assert result.exit_code == 2 and "backbone ' ': empty; give a name" in result.output

    import turnformer.backbones.check as check

    monkeypatch.setattr(
        check, "check_backbone",
        lambda name, tolerance: {"backbone": name, "max_abs_diff": 0.5, "tokens": 3, "sentences": 1,
                                 "tolerance": tolerance, "ok": False},
    )
    result = runner.invoke(backbone_app, ["check", "minilm"])
    assert result.exit_code == 1
    assert "FAIL" in result.output


# --- properties -------------------------------------------------------------------------------

_PROPERTY_MODEL = random_backbone(tiny_config(vocab_size=50, hidden=16, layers=2, heads=2), seed=5)


@settings(max_examples=30, deadline=None)
@given(
    batch=st.integers(1, 3),
    memory_length=st.integers(0, 4),
    length=st.integers(1, 5),
    per_head=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_fast_and_explicit_paths_agree_for_any_mask(batch, memory_length, length, per_head, seed):
    """Random masks (empty rows included) over [memory ; current]: both attention paths give the
    same finite output, and masked or empty-row probabilities are exactly zero."""
    g = torch.Generator().manual_seed(seed)
    keys = memory_length + length
    mask = torch.rand(batch, 2 if per_head else 1, length, keys, generator=g) < 0.4
    memory = [torch.randn(batch, memory_length, 16, generator=g) for _ in range(2)] if memory_length else None
    ids = torch.randint(1, 50, (batch, length), generator=g)
    with torch.no_grad():
        fast = _PROPERTY_MODEL(ids, attention_mask=mask, memory=memory).last_hidden_state
        explicit = _PROPERTY_MODEL(ids, attention_mask=mask, memory=memory, output_attentions=True)
    assert torch.isfinite(fast).all()
    assert (fast - explicit.last_hidden_state).abs().max() < TOL
    for probs in explicit.attentions:
        assert torch.all(probs[~mask.expand_as(probs)] == 0)
        row_sums = probs.sum(-1)
        has_key = mask.any(-1).expand_as(row_sums)
        assert torch.all(row_sums[~has_key] == 0)
        torch.testing.assert_close(row_sums[has_key], torch.ones_like(row_sums[has_key]))


def test_position_ids_out_of_range_is_a_clear_error(tiny):
    with pytest.raises(ValueError, match="max_position_embeddings=128"):
        tiny(_ids(1, 3), position_ids=torch.tensor([[126, 127, 128]]))


def test_the_command_line_starts_without_torch():
    """`turnformer --help` and argument errors answer at once: the CLI module loads neither torch nor transformers,
    and the backbone command's written-out tolerance is the check's."""
    import subprocess
    import sys

    from turnformer.backbones.check import DEFAULT_TOLERANCE
    from turnformer.backbones.cli import TOLERANCE

    assert TOLERANCE == DEFAULT_TOLERANCE
    probe = "import sys, turnformer.cli; print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]"
    # a command's own --help too: the app's callback (threads) runs before click answers it
    for command in ("train", "predict"):
        probe = ("import sys, turnformer.cli\n"
                 f"sys.argv = ['turnformer', '{command}', '--help']\n"
                 "try:\n    turnformer.cli.app()\nexcept SystemExit:\n    pass\n"
                 "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules), file=sys.stderr)")
        answer = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
        assert "Usage" in answer.stdout and answer.stderr.strip().splitlines()[-1] == "[]", command



def test_a_folder_whose_tokenizer_or_config_cannot_serve_its_weights_is_refused_naming_it(tiny_backbone_dir, tmp_path):
    """A folder without its vocabulary file trained on [UNK] alone (transformers builds a tokenizer of the special
    tokens from tokenizer_config.json), a tokenizer of a larger vocabulary than the weights crashed in the embeddings,
    and a config that builds no model, or too few positions for the check's sentences, or a shard index transformers
    cannot read, ended `backbone check` in a traceback (exit 1, which says "above the tolerance")."""
    import json as json_module
    import shutil

    from transformers import BertModel

    def copy(name, drop=(), **config):
        folder = tmp_path / name
        shutil.copytree(tiny_backbone_dir, folder)
        for pattern in drop:
            for path in folder.glob(pattern):
                path.unlink()
        if config:
            raw = json_module.loads((folder / "config.json").read_text())
            (folder / "config.json").write_text(json_module.dumps({**raw, **config}))
        return folder

    runner = CliRunner()
    no_vocabulary = copy("no-vocabulary", drop=("tokenizer.json", "vocab.txt", "special_tokens_map.json"))
    with pytest.raises(BackboneLoadError, match="the tokenizer has no vocabulary, only its special tokens"):
        load_backbone(str(no_vocabulary))
    small = copy("small-vocabulary", drop=("model.safetensors",))
    config = tiny_config(vocab_size=100, hidden=32, layers=2, heads=4, intermediate=64)
    BertModel(config).save_pretrained(small)  # the weights of a 100-word vocabulary beside MiniLM's tokenizer
    with pytest.raises(BackboneLoadError, match=r"gives ids up to 30521 but the model embeds 100 \(config.json's vocab_size\)"):
        load_backbone(str(small))
    assert load_backbone(str(tiny_backbone_dir))[1].vocab_size == 30522
    short = copy("short", drop=("model.safetensors",))
    BertModel(tiny_config(vocab_size=30522, hidden=32, layers=2, heads=4, intermediate=64, max_positions=8)).save_pretrained(short)
    cases = {
        no_vocabulary: "the tokenizer has no vocabulary",
        copy("five-heads", num_attention_heads=5): "config.json: hidden_size 32 is not a multiple of num_attention_heads 5",
        short: "the check's 5 sentences (23 tokens the longest) do not run through it",
    }
    for folder, message in cases.items():
        result = runner.invoke(backbone_app, ["check", str(folder)])
        assert result.exit_code == 2 and f"error: {folder}" in result.output and message in result.output, result.output
    for bad in ("nan", "-1", "0", "inf"):
        result = runner.invoke(backbone_app, ["check", str(tiny_backbone_dir), "--tolerance", bad])
        assert result.exit_code == 2 and "give a number above 0" in result.output, result.output
