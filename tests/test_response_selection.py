"""Response selection: ranking metrics by hand, the tab-separated loader, packing, MDFN's channels and
variants, training from the command line on a slice of MuTual, ranking for users."""

from __future__ import annotations

import dataclasses
import json
import re
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from turnformer.cli import app
from turnformer.data import load_split, write_jsonl
from turnformer.data.report import DataNotFoundError
from turnformer.dialogue import Dialogue, DialogueError, ResponseSelectionItem, Turn
from turnformer.models.mdfn import MDFN_VARIANTS, MDFNConfig, MaskedAttentionBlock, build_mdfn, pool_turns, turn_slots
from turnformer.structure import SPEAKER, TokenMeta
from turnformer.tasks.ranking import rank_candidates, ranking_metrics
from turnformer.tasks.response_selection import (
    ResponseRanker, count_tokens, dialogue_to_item, encode_items, item_blocks, make_selection_batches, special_tokens, truncation_note,
    write_submission,
)

runner = CliRunner()


# --------------------------------------------------------------------------- metrics, by hand


def test_ranking_metrics_hand_computed():
    # group 1: the answer (index 2) ranked 2nd; group 2: ranked 1st; group 3: ranked 4th
    scores = [[0.9, 0.1, 0.5, 0.2], [0.3, 0.8, 0.1, 0.0], [0.9, 0.8, 0.7, 0.1]]
    relevance = [[0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]]
    m = ranking_metrics(scores, relevance)
    assert m["R4@1"] == pytest.approx(1 / 3)
    assert m["R4@2"] == pytest.approx(2 / 3)
    assert m["MRR"] == pytest.approx((1 / 2 + 1 + 1 / 4) / 3)
    assert m["P@1"] == pytest.approx(1 / 3)
    assert m["MAP"] == pytest.approx(m["MRR"])  # one relevant candidate: average precision = reciprocal rank
    assert m["groups"] == 3 and m["skipped"] == 0


def test_ranking_metrics_several_relevant_and_skipped_groups():
    # ranking: c0 (rel), c1, c2 (rel), c3 -> AP = (1/1 + 2/3) / 2; R@1 = 1/2; R@2 = 1/2; R@5 (all 4) = 1
    m = ranking_metrics([[4, 3, 2, 1], [1, 2, 3, 4]], [[1, 0, 1, 0], [0, 0, 0, 0]], ks=(1, 2, 5))
    assert m["skipped"] == 1 and m["groups"] == 1
    assert m["MAP"] == pytest.approx((1 + 2 / 3) / 2)
    assert m["R4@1"] == pytest.approx(0.5) and m["R4@2"] == pytest.approx(0.5) and m["MRR"] == 1.0 and m["P@1"] == 1.0
    assert "R4@5" not in m  # k above the group size is not defined


def test_ranking_metrics_of_groups_of_several_sizes_do_not_depend_on_their_order():
    """R@k up to the smallest group's size, each mean over every group: the same keys and values in any order."""
    groups = ([[0.9, 0.1], [1, 0]], [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [1, 0, 0, 0, 0, 0]])
    forward = ranking_metrics([g[0] for g in groups], [g[1] for g in groups])
    backward = ranking_metrics([g[0] for g in groups[::-1]], [g[1] for g in groups[::-1]])
    assert forward == backward
    assert forward["R@1"] == pytest.approx(0.5) and forward["R@2"] == pytest.approx(0.5) and "R@5" not in forward


def test_a_report_over_items_of_several_sizes_says_what_r_at_k_mixes(caplog):
    """An item of 2 candidates is found at R@2 whatever the model: a file mixing 2 and 10 candidates said nothing."""
    from turnformer.tasks.response_selection import ranking_report

    gold, scores = [[0, 1], [1] + [0] * 9], [[0.9, 0.1], [0.0] + [0.5] * 9]
    with caplog.at_level("WARNING", logger="turnformer"):
        mixed = ranking_report(gold, scores)
        assert mixed["candidates_per_item"] == [2, 10] and mixed["R@2"] == pytest.approx(0.5)
        assert "the items have 2 to 10 candidates: R@k counts an item of k candidates or fewer as found" in caplog.text
        caplog.clear()
        assert "candidates_per_item" not in ranking_report(gold[1:], scores[1:]) and not caplog.text


def test_ties_keep_the_original_order_and_bad_input_fails():
    assert rank_candidates([1.0, 2.0, 2.0, 0.5]) == [1, 2, 0, 3]
    with pytest.raises(ValueError, match="group 0"):
        ranking_metrics([[1.0, 2.0]], [[1]])
    with pytest.raises(ValueError, match="0 or 1"):
        ranking_metrics([[1.0, 2.0]], [[2, 0]])


# --------------------------------------------------------------------------- data


def test_selection_tsv_groups_lines_and_names_bad_lines(tmp_path):
    from turnformer.data.selection_tsv import read_selection_tsv

    path = tmp_path / "ubuntu.tsv"
    path.write_text("1\thi there __eou__\thello\thow are you ?\tfine thanks\n"
                    "0\thi there __eou__\thello\thow are you ?\tthe printer is on fire\n"
                    "\n"
                    "1\tanother context\tits response\n", encoding="utf-8")
    items = read_selection_tsv(path)
    assert len(items) == 2
    first = items[0]
    assert [t.text for t in first.context.turns] == ["hi there", "hello", "how are you ?"]
    assert [t.speaker for t in first.context.turns] == ["A", "B", "A"]
    assert [c.speaker for c in first.candidates] == ["B", "B"] and first.gold() == (1, 0)
    assert items[1].candidates[0].speaker == "B" and items[1].id == "ubuntu-4"
    import gzip  # compressed, the same ids (they were "ubuntu.tsv-1": a submission file differed by compression)

    (tmp_path / "ubuntu.tsv.gz").write_bytes(gzip.compress(path.read_bytes()))
    assert [item.id for item in read_selection_tsv(tmp_path / "ubuntu.tsv.gz")] == ["ubuntu-1", "ubuntu-4"]

    for bad, message in [("2\ta\tb\n", ":1: label"), ("1\tonly a response\n", ":1: expected a label"),
                         ("1\ta\t \tc\n", ":1: column 3: empty utterance"),
                         ('[{"turns": []}]\n', ":1: label: .*this looks like JSON: give items as JSON Lines"),
                         ('1\ta\tb\n{"x": 1}\n', r":2: label: expected 0 or 1 in the first column, got '\{\"x\": 1\}'$"),
                         ("label\tcontext\tresponse\n1\ta\tb\n", ":1: label: .*got 'label'; a header line is not part of the format"),
                         ("1\ta\tb\nlabel\tcontext\tresponse\n", ":2: label: .*got 'label'$")]:
        path.write_text(bad, encoding="utf-8")
        with pytest.raises(DialogueError, match=message):
            read_selection_tsv(path)


def test_mutuals_dev_set_alone_is_read_where_only_it_is_scored(data_dir, tmp_path):
    """`evaluate --split test` (MuTual's dev set) read, and needed, all 7,088 training files."""
    import shutil

    from turnformer.tasks.response_selection import load_selection_data

    dev = tmp_path / "mutual" / "mutual" / "dev"
    dev.mkdir(parents=True)
    for name in ("dev_1.txt", "dev_2.txt"):
        shutil.copy(data_dir / "mutual" / "mutual" / "dev" / name, dev / name)
    only_dev = load_selection_data({"dataset": "mutual"}, tmp_path, only=["test"])
    assert list(only_dev) == ["test"] and len(only_dev["test"]) == 2
    with pytest.raises(DataNotFoundError, match="train"):  # the held-out validation items are training items
        load_selection_data({"dataset": "mutual"}, tmp_path, only=["validation"])


def test_prediction_rows_keep_the_candidates_relevance(tmp_path):
    """predict's rows on items labelled by relevance (a TSV's 0/1 lines, several right candidates, no single answer)
    left the labels out: a user scoring the rows had only the item's id to find them again."""
    from turnformer.tasks.response_selection import prediction_rows, read_selection_file

    path = tmp_path / "items.tsv"
    path.write_text("1\thi\tyes\n1\thi\tsure\n0\thi\tthe printer\n0\tbye\tok\n1\tbye\tsee you\n", encoding="utf-8")
    rows = prediction_rows(read_selection_file(path), [[0.3, 0.2, 0.1], [0.1, 0.9]])
    assert [row["relevance"] for row in rows] == [[1, 1, 0], [0, 1]] and "answer" not in rows[0]
    assert rows[1]["best"] == 1 and rows[1]["scores"] == [0.1, 0.9]
    jsonl = tmp_path / "items.jsonl"
    jsonl.write_text(json.dumps({"turns": [{"speaker": "A", "text": "hi"}], "meta": {"candidates": ["a", "b"], "answer": 0}}) + "\n")
    assert "relevance" not in prediction_rows(read_selection_file(jsonl), [[0.1, 0.2]])[0]  # an answer alone


def test_selection_tsv_a_label_written_as_a_number_is_not_called_a_header(tmp_path):
    from turnformer.data.selection_tsv import read_selection_tsv

    path = tmp_path / "items.tsv"
    path.write_text("1.0\thi\tthere\n", encoding="utf-8")
    with pytest.raises(DialogueError, match=r":1: label: expected 0 or 1 in the first column, got '1\.0'; write it 0 or 1$"):
        read_selection_tsv(path)


def test_selection_tsv_repairs_and_uneven_items_are_reported_and_said(tmp_path, caplog):
    """The removed __eou__ marks and blank lines are counted and logged once the file is read, as JSON Lines' repairs
    are; an item made of two identical consecutive contexts (4 candidates where the others have 2) is named by line."""
    from turnformer.data.report import LoadReport
    from turnformer.data.selection_tsv import read_selection_tsv
    from turnformer.tasks.response_selection import item_blocks

    path = tmp_path / "train.tsv"
    path.write_text("1\thi __eou__\tfine\n0\thi __eou__\tblue\n\n"
                    "1\tsee you\tbye\n0\tsee you\tred\n1\tsee you\tlater\n0\tsee you\tgreen\n"
                    "1\tnew\tthing\n0\tnew\tone\n", encoding="utf-8")
    report = LoadReport(source=str(path))
    with caplog.at_level("INFO", logger="turnformer"):
        items = read_selection_tsv(path, report)
    assert [len(i.candidates) for i in items] == [2, 4, 2]
    assert report.counts == {"turn_marker_removed": 2, "blank_line": 1, "items_of_another_size": 1}
    assert f"{path}: 1 item(s) of 4 candidates, most of 2 (lines 4): consecutive lines with the same context make one item" \
        in report.messages
    assert f"{path}: blank_line: 1, items_of_another_size: 1, turn_marker_removed: 2" in caplog.text
    caplog.clear()
    with caplog.at_level("INFO", logger="turnformer"):
        blocks = item_blocks(str(path))
    assert caplog.text.count("turn_marker_removed: 2") == 1 and len(blocks) == 3  # said once, by the pass that checks
    even = tmp_path / "even.tsv"
    even.write_text("1\ta\tb\n0\ta\tc\n", encoding="utf-8")
    caplog.clear()
    with caplog.at_level("INFO", logger="turnformer"):
        read_selection_tsv(even)
    assert caplog.text == ""  # nothing repaired: nothing said


def test_a_gzip_compressed_selection_file_is_told_by_its_content(tmp_path):
    import gzip

    from turnformer.tasks.response_selection import read_selection_file

    jsonl, tsv = tmp_path / "items.gz", tmp_path / "pairs.gz"
    jsonl.write_bytes(gzip.compress(b'{"id": "q", "turns": [{"speaker": "A", "text": "where to ?"}], '
                                    b'"meta": {"candidates": [{"text": "the bank ."}, {"text": "blue ."}], "answer": 0}}\n'))
    tsv.write_bytes(gzip.compress(b"1\thi\tthere\n0\thi\tblue\n"))
    assert [(i.id, i.gold()) for i in read_selection_file(jsonl)] == [("q", (1, 0))]
    assert [i.gold() for i in read_selection_file(tsv)] == [(1, 0)]


def test_mutuals_own_item_files_are_read_as_input(data_dir, tmp_path):
    """A MuTual file (one JSON object on one line), or a file of such objects one a line, is read as the loader reads
    the split's files; a fault names its line and MuTual's field."""
    from turnformer.tasks.response_selection import read_selection_file

    dev = data_dir / "mutual" / "mutual" / "dev"
    expected = load_split("mutual", "validation", data_dir).items[:3]
    first = dev / "dev_1.txt"
    def read(path):  # what a ranker reads of each item
        return [(item.id, item.context.turns, item.candidates, item.answer) for item in read_selection_file(path)]

    assert read(first) == [(item.id, item.context.turns, item.candidates, item.answer) for item in expected[:1]]
    joined = tmp_path / "three.txt"
    joined.write_text("".join((dev / f"{item.id}.txt").read_text().strip() + "\n" for item in expected))
    assert read(joined) == [(item.id, item.context.turns, item.candidates, item.answer) for item in expected]
    assert [item.id for _, block in item_blocks(str(joined)) for item in block] == [item.id for item in expected]
    nameless = json.loads(first.read_text())
    del nameless["id"]
    joined.write_text(json.dumps(nameless) + "\n" + json.dumps(nameless) + "\n")
    assert [item.id for item in read_selection_file(joined)] == [None, None]  # named by their place, as conversations are
    joined.write_text(first.read_text().strip() + "\n" + first.read_text().strip() + "\n")
    with pytest.raises(DialogueError, match=r"three\.txt:2: id: 'dev_1' is already the id of the conversation on line 1"):
        read_selection_file(joined)
    for field, value, said in (("answers", "E", "answers: unknown label 'E'"), ("id", 7, "id: expected a non-empty string"),
                               ("options", ["m : hi"], "options: expected a list of 4 strings")):
        joined.write_text(first.read_text().strip() + "\n" + json.dumps({**nameless, field: value}) + "\n")
        with pytest.raises(DialogueError, match=rf"three\.txt:2: {re.escape(said)}"):
            read_selection_file(joined)
    joined.write_text(json.dumps({key: value for key, value in nameless.items() if key != "article"}) + "\n")
    with pytest.raises(DialogueError, match=r"three\.txt:1: article: missing field"):  # not "turns", a MuTual item's
        read_selection_file(joined)


def test_item_relevance_is_checked():
    context = Dialogue.from_turns([("A", "hi")])
    with pytest.raises(DialogueError, match="one 0/1 per candidate"):
        ResponseSelectionItem(context=context, candidates=[Turn("B", "x"), Turn("B", "y")], relevance=(1,))
    with pytest.raises(DialogueError, match="not marked relevant"):
        ResponseSelectionItem(context=context, candidates=[Turn("B", "x"), Turn("B", "y")], answer=0, relevance=(0, 1))
    assert ResponseSelectionItem(context=context, candidates=[Turn("B", "x"), Turn("B", "y")], answer=1).gold() == (0, 1)


def test_jsonl_items_need_candidates():
    d = Dialogue(turns=(Turn("m", "where to ?"),), id="d1", meta={"candidates": [{"text": "the bank ."}], "answer": 0})
    item = dialogue_to_item(d)
    assert item.candidates[0].speaker == "m's partner" and item.answer == 0
    with pytest.raises(DialogueError, match="meta.candidates"):
        dialogue_to_item(Dialogue(turns=(Turn("m", "hi"),), id="d2"))
    # a plain string is a candidate's text, spoken by the next speaker, as ResponseRanker.rank takes it
    mixed = Dialogue(turns=(Turn("m", "where to ?"),), id="d3", meta={"candidates": ["the bank .", {"speaker": "m", "text": "home"}]})
    assert [(c.speaker, c.text) for c in dialogue_to_item(mixed).candidates] == [("m's partner", "the bank ."), ("m", "home")]
    for bad in (["  \u200b"], [3], [{"speaker": "f"}], [""]):
        with pytest.raises(DialogueError, match=r"meta.candidates\[0\]: expected a non-empty text") as refused:
            dialogue_to_item(Dialogue(turns=(Turn("m", "hi"),), id="d4", meta={"candidates": bad}))
        assert str(refused.value).endswith(f"got {bad[0]!r}")  # what the file holds, as written


# --------------------------------------------------------------------------- packing


def test_speakers_come_from_the_data_and_truncation_keeps_the_response(tiny_backbone_dir):
    from turnformer.backbones.loading import load_tokenizer

    tokenizer = load_tokenizer(str(tiny_backbone_dir))
    context = Dialogue.from_turns([("m", "one two three four five six"), ("m", "seven eight"), ("f", "nine ten")])
    item = ResponseSelectionItem(context=context, candidates=[Turn("f", "eleven twelve"), Turn("m", "thirteen")], answer=0, id="x")
    (encoded,) = encode_items([item], tokenizer, max_turns=20)
    assert encoded.speakers == [[0, 0, 1, 1], [0, 0, 1, 0]]  # not turn parity
    (batch,), report = make_selection_batches([encoded], 4, special_tokens(tokenizer), max_length=10)
    assert batch.input_ids.shape == (2, 10) and report["truncated_sequences"] == 2
    words = tokenizer.convert_ids_to_tokens(batch.input_ids[0].tolist())
    assert words[0] == "[CLS]" and words[-3:] == ["eleven", "twelve", "[SEP]"]  # oldest tokens dropped
    assert batch.groups.tolist() == [[0, 1]] and batch.relevance.tolist() == [[1, 0]]

    (short,) = encode_items([item], tokenizer, max_turns=2)  # one context turn + the response
    assert len(short.turns[0]) == 2 and short.speakers[0] == [0, 0]
    # the two context turns left out (8 word pieces) are counted for each of the two candidate sequences
    assert (short.dropped_turns, short.dropped_turn_tokens) == (2, 8)
    # items encoded together are each what it is alone; turns left out are only counted, a few at a time
    longer = dataclasses.replace(item, context=Dialogue.from_turns([("f", "zero"), *((t.speaker, t.text) for t in context.turns)]),
                                 id="z")
    together = encode_items([item, longer, item], tokenizer, max_turns=2)
    assert together == [short, *encode_items([longer], tokenizer, max_turns=2), short]
    assert together[1].dropped_turn_tokens == 9
    texts = [t.text for t in longer.context.turns]
    assert count_tokens(texts, tokenizer, chunk=2) == count_tokens(texts, tokenizer) == 9 + 2
    _, report = make_selection_batches([short], 4, special_tokens(tokenizer), max_length=64)
    assert report == {"sequences": 2, "truncated_sequences": 2, "dropped_tokens": 16, "dropped_turns": 4, "truncated_responses": 0,
                      "cut_texts": 0}

    # an over-long response: its end is cut (4 word pieces), then the context goes oldest-first ("nine" and its [SEP])
    long_reply = ResponseSelectionItem(context=Dialogue.from_turns([("m", "nine")]), id="y",
                                       candidates=[Turn("f", "one two three four five six seven eight")])
    (batch,), report = make_selection_batches(encode_items([long_reply], tokenizer, max_turns=20), 4, special_tokens(tokenizer), max_length=6)
    assert tokenizer.convert_ids_to_tokens(batch.input_ids[0].tolist()) == ["[CLS]", "one", "two", "three", "four", "[SEP]"]
    assert report == {"sequences": 1, "truncated_sequences": 1, "dropped_tokens": 6, "dropped_turns": 0, "truncated_responses": 1,
                      "cut_texts": 0}
    # a huge utterance is cut before it is tokenised (64 characters a token read): its tokens past the cut are not
    # counted, so the count of dropped tokens is a lower bound, and the note says so
    huge = ResponseSelectionItem(context=Dialogue.from_turns([("m", "nine " * 5000)]), id="z",
                                 candidates=[Turn("f", "one " * 5000), Turn("f", "two")], answer=1)
    (encoded,) = encode_items([huge], tokenizer, max_turns=20, max_length=6)
    assert encoded.cut_texts == 2  # the context turn and the first candidate; "two" is read whole
    _, report = make_selection_batches([encoded], 4, special_tokens(tokenizer), max_length=6)
    assert report["cut_texts"] == 2 and report["truncated_sequences"] == 2
    note = truncation_note(report, SimpleNamespace(max_length=6, max_turns=20))
    assert f"at least {report['dropped_tokens']} tokens dropped (2 texts over 512 characters were cut before being read" in note


def test_turn_slots_and_pooling_match_a_loop():
    meta = TokenMeta.from_lists([[3, 3, 4, 4, 4, 5], [0, 1, 1]], [[0, 0, 1, 1, 1, 0], [0, 1, 1]])
    slot, count = turn_slots(meta)
    assert count.tolist() == [3, 2]
    states = torch.randn(2, 6, 5)
    pooled = pool_turns(states, slot, 3, "max")
    assert torch.allclose(pooled[0, 1], states[0, 2:5].amax(0)) and torch.allclose(pooled[1, 1], states[1, 1:3].amax(0))
    means = pool_turns(states, slot, 3, "mean")
    assert torch.allclose(means[0, 0], states[0, :2].mean(0))


# --------------------------------------------------------------------------- the model


def test_a_channel_sees_only_its_mask():
    torch.manual_seed(0)
    block = MaskedAttentionBlock(hidden=16, heads=4, dropout=0.0).eval()
    meta = TokenMeta.from_lists([[0, 0, 1, 1, 2, 2]], [[0, 0, 1, 1, 0, 0]])
    x = torch.randn(1, 6, 16)
    y = x.clone()
    y[0, 2:4] += 5.0  # change speaker 1's tokens only
    mask = SPEAKER(meta, meta)
    a, b = block(x, mask), block(y, mask)
    assert torch.allclose(a[0, [0, 1, 4, 5]], b[0, [0, 1, 4, 5]], atol=1e-6)  # speaker 0's tokens never saw them
    assert not torch.allclose(a[0, 2:4], b[0, 2:4])


@pytest.fixture(scope="module")
def mutual_items(data_dir):
    from turnformer.data import load_split

    return list(load_split("mutual", "validation", data_dir).items[:6])


@pytest.mark.parametrize("model_id", sorted(MDFN_VARIANTS))
def test_every_variant_trains_and_scores_deterministically(model_id, tiny_backbone_dir, mutual_items):
    torch.manual_seed(0)
    model, tokenizer = build_mdfn(model_id, {"max_length": 96}, str(tiny_backbone_dir))
    encoded = encode_items(mutual_items, tokenizer, model.config.max_turns)
    batches, _ = make_selection_batches(encoded, 3, special_tokens(tokenizer), 96)
    loss = model.loss(batches[0])
    loss.backward()
    assert torch.isfinite(loss)
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing, f"parameters without gradient: {missing[:5]}"
    model.eval()
    first, second = model.group_scores(batches[0]), model.group_scores(batches[0])
    assert first.shape == (3, 4) and torch.equal(first, second)  # no random GRU state
    # the sequences scored a few at a time (MDFN.predict's bound on memory): the same scores as all at once; an item's
    # candidates split between two chunks (rows 0-4 and 5-9 of items of 4) included
    for rows in (1, 5, 12, 100):
        assert torch.allclose(model.group_scores(batches[0], rows), first, atol=1e-5)
    for batch in batches:
        assert torch.allclose(torch.tensor(model.predict(batch)[1]), model.group_scores(batch), atol=1e-5)


def test_training_keeps_one_part_of_a_batch_at_a_time_and_changes_nothing(tiny_backbone_dir, mutual_items, monkeypatch):
    """A training batch's sequences are scored `TRAINING_ROWS` at a time, every part but the last recomputed in
    backward: the loss and gradients of scoring all at once (no dropout), and with dropout those of keeping every
    part's graph (the same masks, the same random state after); what the step keeps is about one part's graph (a batch
    of items of many candidates grew with them: 3.9, 6.7 and 13.9 GB at 4, 10 and 20 candidates)."""
    from turnformer.models import mdfn

    def step(dropout: float, rows: int, recompute: bool = True):
        torch.manual_seed(0)
        model, tokenizer = build_mdfn("mdfn", {"max_length": 48, "dropout": dropout}, str(tiny_backbone_dir))
        (batch, *_), _ = make_selection_batches(encode_items(mutual_items, tokenizer, 20, 48), 6, special_tokens(tokenizer), 48)
        monkeypatch.setattr(mdfn, "TRAINING_ROWS", rows)
        monkeypatch.setattr(mdfn, "checkpoint", mdfn.checkpoint if recompute else lambda fn, *a, **kw: fn(*a))
        sizes = []
        torch.manual_seed(1)
        with torch.autograd.graph.saved_tensors_hooks(lambda t: sizes.append(t.numel() * t.element_size()) or t, lambda t: t):
            loss = model.loss(batch)
        loss.backward()
        return loss.detach(), [p.grad for p in model.parameters()], torch.get_rng_state(), sum(sizes)

    whole, parts = step(0.0, 1000), step(0.0, 5)  # 24 sequences: in 5 parts, an item's candidates split between two
    assert torch.allclose(whole[0], parts[0], atol=1e-6)
    for a, b in zip(whole[1], parts[1]):
        assert (a is None) == (b is None) and (a is None or torch.allclose(a, b, atol=1e-6))
    assert parts[3] < whole[3] / 3
    kept, recomputed = step(0.2, 5, recompute=False), step(0.2, 5)
    assert torch.equal(kept[0], recomputed[0]) and torch.equal(kept[2], recomputed[2])
    for a, b in zip(kept[1], recomputed[1]):
        assert (a is None) == (b is None) and (a is None or torch.allclose(a, b, atol=1e-6))


def test_choice_loss_is_cross_entropy_over_candidates(tiny_backbone_dir, mutual_items):
    torch.manual_seed(0)
    model, tokenizer = build_mdfn("mdfn", {"max_length": 96, "dropout": 0.0}, str(tiny_backbone_dir))
    model.eval()
    (batch, *_), _ = make_selection_batches(encode_items(mutual_items, tokenizer, 20), 6, special_tokens(tokenizer), 96)
    scores = model.group_scores(batch)
    expected = torch.nn.functional.cross_entropy(scores, batch.relevance.argmax(-1))
    assert torch.allclose(model.loss(batch), expected, atol=1e-6)


def test_frozen_layers_and_config_checks(tiny_backbone_dir):
    model, _ = build_mdfn("mdfn", {"frozen_layers": 1}, str(tiny_backbone_dir))
    assert not any(p.requires_grad for p in model.encoder.embeddings.parameters())
    assert not any(p.requires_grad for p in model.encoder.encoder.layer[0].parameters())
    assert all(p.requires_grad for p in model.encoder.encoder.layer[1].parameters())
    pretrained = {id(p) for p in model.pretrained_parameters()}
    assert pretrained == {id(p) for p in model.encoder.parameters()} and not pretrained & {id(p) for p in model.score.parameters()}
    with pytest.raises(ValueError, match="frozen_layers=3"):
        build_mdfn("mdfn", {"frozen_layers": 3}, str(tiny_backbone_dir))
    with pytest.raises(ValueError, match="aggregation"):
        MDFNConfig(aggregation="cnn")
    with pytest.raises(ValueError, match=r"^model_config\.max_length = 5: at least 8$"):  # the setting named, not the config
        MDFNConfig(max_length=5)
    with pytest.raises(ValueError, match="unknown response-selection model"):
        build_mdfn("mdfn-cnn", {}, str(tiny_backbone_dir))


def test_an_empty_file_of_items_is_named_by_its_format(tmp_path):
    """An empty .jsonl is an empty file of items, not a tab-separated file without lines."""
    empty = tmp_path / "items.jsonl"
    empty.write_text("\n")
    with pytest.raises(DialogueError, match="items.jsonl: no items in the file"):
        item_blocks(str(empty))
    from turnformer.tasks.response_selection import read_selection_file

    with pytest.raises(DialogueError, match="items.jsonl: no items in the file"):
        read_selection_file(empty)
    (tmp_path / "pairs.tsv").write_text("")
    with pytest.raises(DialogueError, match=r"pairs\.tsv: no \(label, context, response\) lines"):
        item_blocks(str(tmp_path / "pairs.tsv"))


def test_electra_backbone_on_a_tiny_random_config(tmp_path, tiny_backbone_dir, mutual_items):
    from transformers import AutoTokenizer, ElectraConfig, ElectraModel

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_backbone_dir))
    config = ElectraConfig(vocab_size=tokenizer.vocab_size, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=64, max_position_embeddings=128)
    ElectraModel(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    model, tok = build_mdfn("mdfn", {"max_length": 96, "frozen_layers": 1}, str(tmp_path))
    assert type(model.encoder).__name__ == "ElectraModel"
    (batch, *_), _ = make_selection_batches(encode_items(mutual_items, tok, 20), 6, special_tokens(tok), 96)
    assert torch.isfinite(model.loss(batch))


def test_binary_objective(tiny_backbone_dir, mutual_items):
    model, tokenizer = build_mdfn("mdfn", {"max_length": 96, "objective": "binary"}, str(tiny_backbone_dir))
    (batch, *_), _ = make_selection_batches(encode_items(mutual_items, tokenizer, 20), 6, special_tokens(tokenizer), 96)
    model.eval()
    expected = torch.nn.functional.binary_cross_entropy_with_logits(model.group_scores(batch).flatten(), batch.relevance.flatten().float())
    assert torch.allclose(model.loss(batch), expected, atol=1e-6)


# --------------------------------------------------------------------------- command line and users


@pytest.mark.data
def test_train_evaluate_predict_rank(data_dir, tiny_backbone_dir, tmp_path):
    out = tmp_path / "run"
    common = ["--data-dir", str(data_dir)]
    trained = runner.invoke(app, ["train", "--task", "response-selection", "--model", "mdfn", "--dataset", "mutual",
                                  "--limit-dialogues", "8", "--set", f'backbone="{tiny_backbone_dir}"',
                                  "--set", "model_config.max_length=96", "--set", "train.epochs=1", "--set", "train.head_lr=1e-3",
                                  "--out", str(out), *common])
    assert trained.exit_code == 0, trained.output
    assert json.loads((out / "best" / "config.json").read_text())["train"]["head_lr"] == 1e-3
    history = json.loads((out / "result.json").read_text())["history"]
    assert set(history[0]["test"]) >= {"R4@1", "R4@2", "MRR", "primary"}

    scored = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--split", "test", *common])
    assert scored.exit_code == 0, scored.output
    metrics = json.loads(scored.stdout)
    assert metrics["groups"] == 886 and 0 <= metrics["R4@1"] <= metrics["R4@2"] <= 1  # the whole dev set
    first = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--split", "test", "--limit-dialogues", "10", *common])
    assert first.exit_code == 0 and json.loads(first.stdout)["groups"] == 10
    items = tmp_path / "ten.jsonl"  # the same ten items in a file of one's own: the same scores
    write_jsonl(load_split("mutual", "validation", data_dir).items[:10], items)
    from_file = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--input", str(items)])
    assert from_file.exit_code == 0, from_file.output
    assert json.loads(from_file.stdout) == json.loads(first.stdout)
    own = tmp_path / "ten.txt"  # and in MuTual's own format, one item file's line a line
    dev = data_dir / "mutual" / "mutual" / "dev"
    own.write_text("".join((dev / f"{item.id}.txt").read_text().strip() + "\n"
                           for item in load_split("mutual", "validation", data_dir).items[:10]))
    from_own = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--input", str(own)])
    assert from_own.exit_code == 0, from_own.output
    assert json.loads(from_own.stdout) == json.loads(first.stdout)
    # an item without an answer is counted, not silently left out; none with one is an error, not a NaN
    unanswered = tmp_path / "unanswered.jsonl"
    first_item, *rest = load_split("mutual", "validation", data_dir).items[:3]
    write_jsonl([dataclasses.replace(first_item, answer=None), *rest], unanswered)
    partly = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--input", str(unanswered)])
    assert partly.exit_code == 0 and (json.loads(partly.stdout)["groups"], json.loads(partly.stdout)["unanswered"]) == (2, 1)
    none = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--input", str(unanswered), "--limit-dialogues", "1"])
    assert none.exit_code == 2 and f"{unanswered}: --limit-dialogues 1: its first 1 items: none has a right candidate" in \
        none.output.replace("\n", ""), none.output
    # an item of one candidate (a TSV line that lost a context column reads as two) ranks first whatever the model:
    # left out of the scores and counted; a file of nothing else is refused, where it scored R@1 = 1
    single = tmp_path / "single.tsv"
    single.write_text("1\thello there\tgeneral kenobi\n0\thello there\tgo away\n1\thi\tyou\tfine\n")
    mixed = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--input", str(single)])
    assert mixed.exit_code == 0, mixed.output
    assert (json.loads(mixed.stdout)["groups"], json.loads(mixed.stdout)["one_candidate"]) == (1, 1)
    assert "1 labelled item(s) of one candidate left out of the ranking metrics" in " ".join(mixed.output.split())
    (tmp_path / "alone.tsv").write_text("1\thi\tyou\tfine\n1\tso\tthere\n")
    alone = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--input", str(tmp_path / "alone.tsv")])
    assert alone.exit_code == 2 and "one candidate ranks first whatever the model" in " ".join(alone.output.split()), alone.output
    assert f"{tmp_path / 'alone.tsv'}: its items: each one" in alone.output.replace("\n", "")  # the file named, no split
    online = runner.invoke(app, ["predict", "--checkpoint", str(out), "--input", str(items), "--online"])
    assert online.exit_code == 2 and "--online is for dialogue-act models" in online.output, online.output

    submission = tmp_path / "submission.txt"
    predicted = runner.invoke(app, ["predict", "--task", "response-selection", "--checkpoint", str(out), "--input",
                                    "mutual:test", "--submission", str(submission), "--out", str(tmp_path / "ranked.jsonl"), *common])
    assert predicted.exit_code == 0, predicted.output
    assert "candidate sequences were longer than the model reads (96 tokens, 20 turns)" in predicted.output
    lines = submission.read_text().splitlines()
    assert len(lines) == 886 and lines[0].split("\t")[0] == "test_1"
    assert all(sorted(line.split("\t")[1:]) == ["A", "B", "C", "D"] for line in lines)
    rows = [json.loads(line) for line in (tmp_path / "ranked.jsonl").read_text().splitlines()]
    assert rows[0]["ranking"][0] == rows[0]["best"] and len(rows[0]["scores"]) == 4

    same = runner.invoke(app, ["predict", "--checkpoint", str(out), "--input", "mutual:test", "--submission", str(submission),
                               "--out", str(submission), *common])  # the rankings would replace the submission
    assert same.exit_code == 2 and "are the same file" in same.output and len(submission.read_text().splitlines()) == 886
    both = runner.invoke(app, ["predict", "--checkpoint", str(out), "--input", "mutual:test", "--submission", "-",
                               "--out", "-", *common])  # the two would be mixed on standard output
    assert both.exit_code == 2 and "--submission - and --out - are the same file" in both.output

    wrong = runner.invoke(app, ["predict", "--task", "erc", "--checkpoint", str(out), "--input", "mutual:test", *common])
    assert wrong.exit_code != 0 and "is a model for response-selection" in wrong.output

    meld = runner.invoke(app, ["predict", "--checkpoint", str(out), "--input", "meld:test", "--data-dir", str(tmp_path)])
    assert meld.exit_code == 2 and "meld is not a response-selection dataset" in meld.output  # before MELD is looked for

    ranker = ResponseRanker.from_checkpoint(out)
    scores = ranker.rank([("m", "where are you going ?"), ("f", "to the bank .")], ["why ?", ("f", "see you !")])
    assert len(scores) == 2 and all(isinstance(s, float) for s in scores)


def test_submission_format(tmp_path):
    write_submission([{"id": "test_1", "ranking": [2, 0, 3, 1]}], tmp_path / "s.txt")
    assert (tmp_path / "s.txt").read_text() == "test_1\tC\tA\tD\tB\n"
    for bad_id in ("a\tb", "a\nb"):   # would add a column or a line
        with pytest.raises(DialogueError, match="an id with a tab or line break"):
            write_submission([{"id": "ok", "ranking": [0]}, {"id": bad_id, "ranking": [1, 0]}], tmp_path / "t.txt")
    assert not (tmp_path / "t.txt").exists()


def test_ranker_takes_candidates_in_every_form_and_names_a_bad_one(tiny_backbone_dir):
    model, tokenizer = build_mdfn("mdfn", {"max_length": 96, "dropout": 0.0}, str(tiny_backbone_dir))
    ranker = ResponseRanker(model.eval(), tokenizer)
    context = [{"speaker": "m", "text": "where is the bank ?"}, {"speaker": "f", "text": "next to the school ."}]
    as_pairs = ranker.rank([("m", "where is the bank ?"), ("f", "next to the school .")], [("m", "thanks !"), ("m", "I like tea .")])
    as_mappings = ranker.rank(context, [{"speaker": "m", "text": "thanks !"}, {"speaker": "m", "text": "I like tea ."}])
    assert as_pairs == as_mappings and as_pairs[0] != as_pairs[1]  # two different replies, two scores
    assert ranker.rank(context, ["thanks !", "I like tea ."]) == as_pairs  # texts: spoken by the next speaker, m
    with pytest.raises(DialogueError, match="candidates: expected a list of candidate responses, got str"):
        ranker.rank(context, "yes")
    with pytest.raises(DialogueError, match=r"candidates\[1\]: text: empty utterance"):
        ranker.rank(context, ["ok", " "])


def test_scoring_in_chunks_is_scoring_at_once(tiny_backbone_dir, mutual_items):
    """A file is scored `chunk_items` items at a time (memory bounded by a chunk, not the file): the same scores, in
    the items' order, and the same truncation report, as all at once; no items: no scores, a report of zeros."""
    from turnformer.tasks.response_selection import score_items

    model, tokenizer = build_mdfn("mdfn", {"max_length": 48, "dropout": 0.0}, str(tiny_backbone_dir))
    whole, parts = {}, {}
    at_once = score_items(model, tokenizer, mutual_items, batch_size=4, truncation=whole)
    chunked = score_items(model, tokenizer, mutual_items, batch_size=4, truncation=parts, chunk_items=5)  # other batches too
    assert len(at_once) == len(mutual_items) and whole == parts and whole["truncated_sequences"] > 0
    for a, b in zip(at_once, chunked):
        assert a == pytest.approx(b, abs=1e-5)
    empty: dict = {}
    assert score_items(model, tokenizer, [], truncation=empty) == [] and set(empty) == set(whole)
    assert not any(empty.values())
    # evaluate's metrics from these chunks' scores are those of the batches training scores its splits with
    from turnformer.tasks.response_selection import evaluate, ranking_report

    batches, report = make_selection_batches(encode_items(mutual_items, tokenizer, 20, 48), 4, special_tokens(tokenizer), 48)
    assert report == whole
    gold = [list(item.gold()) for item in mutual_items]
    assert ranking_report(gold, chunked) == pytest.approx(evaluate(model, batches), abs=1e-6)


def test_a_candidates_unknown_fields_are_counted_as_a_turns_are(tmp_path, caplog):
    """A candidate's fields other than speaker and text were read past without a word; a turn's are counted."""
    from turnformer.tasks.response_selection import read_selection_file

    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": "x", "turns": [{"speaker": "A", "text": "hi"}],
                                 "meta": {"candidates": [{"text": "hello", "act": "greet"}, {"text": "go", "score": 1}], "answer": 0}}) + "\n")
    for read in (read_selection_file, lambda path: [item for _, block in item_blocks(str(path)) for item in block]):
        caplog.clear()
        with caplog.at_level("WARNING", logger="turnformer"):
            assert [item.id for item in read(items)] == ["x"]
        assert "'act' x1 (first " in caplog.text and "items.jsonl:1: meta.candidates[0].act)" in caplog.text, caplog.text
        assert "'score' x1" in caplog.text
