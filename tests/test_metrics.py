"""ERC metrics: agreement with scikit-learn, hand-computed DailyDialog micro F1, edge cases, the plot."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import accuracy_score, classification_report, f1_score

from turnformer.tasks.metrics import (
    DEFAULT_PRIMARY_METRIC,
    PRIMARY_METRIC,
    accuracy,
    classification_report_dict,
    confusion_matrix_plot,
    erc_metrics,
    micro_f1_excluding,
    primary_metric,
    weighted_f1,
)

DD = ["neutral", "anger", "disgust", "fear", "happiness", "sadness", "surprise"]


@st.composite
def labelled(draw):
    """(labels, gold, pred, excluded): 2-8 classes (ints or strings), 1-200 utterances."""
    k = draw(st.integers(2, 8))
    labels = list(range(k)) if draw(st.booleans()) else [f"c{i}" for i in range(k)]
    n = draw(st.integers(1, 200))
    idx = st.integers(0, k - 1)
    gold = [labels[i] for i in draw(st.lists(idx, min_size=n, max_size=n))]
    pred = [labels[i] for i in draw(st.lists(idx, min_size=n, max_size=n))]
    excluded = [labels[i] for i in draw(st.sets(idx, min_size=1, max_size=k - 1))]
    return labels, gold, pred, excluded


# ----------------------------------------------------------------------- against scikit-learn


@settings(max_examples=60, deadline=None)
@given(labelled())
def test_matches_sklearn(case):
    labels, gold, pred, excluded = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn's default zero_division="warn" gives 0 as well
        ref_w = 100 * f1_score(gold, pred, average="weighted")
        kept = [lab for lab in labels if lab not in excluded]
        ref_micro = 100 * f1_score(gold, pred, average="micro", labels=kept)
    assert weighted_f1(gold, pred) == pytest.approx(ref_w, abs=1e-9)
    assert weighted_f1(gold, pred, labels=labels) == pytest.approx(ref_w, abs=1e-9)
    # with labels given: the official call, a fixed list of non-excluded ids
    assert micro_f1_excluding(gold, pred, excluded, labels=labels) == pytest.approx(ref_micro, abs=1e-9)
    # labels inferred from the data: classes that never occur add nothing to micro F1
    assert micro_f1_excluding(gold, pred, excluded) == pytest.approx(ref_micro, abs=1e-9)
    assert accuracy(gold, pred) == pytest.approx(100 * accuracy_score(gold, pred), abs=1e-9)
    # nothing excluded: micro F1 over every class is accuracy (single-label multiclass)
    assert micro_f1_excluding(gold, pred, [], labels=labels) == pytest.approx(accuracy(gold, pred), abs=1e-9)

    report = classification_report_dict(gold, pred, labels)
    ref = classification_report(gold, pred, labels=labels, target_names=[str(lab) for lab in labels],
                                output_dict=True, zero_division=0)
    assert report.keys() == ref.keys()
    for name in map(str, labels):
        for key in ("precision", "recall", "f1-score"):
            assert report[name][key] == pytest.approx(ref[name][key])
        assert report[name]["support"] == int(ref[name]["support"]) == sum(str(g) == name for g in gold)
    assert report["weighted avg"]["f1-score"] * 100 == pytest.approx(ref_w)

    m = erc_metrics(gold, pred, labels, primary="micro_f1_no_neutral", neutral_label=excluded[0])
    assert m["primary"] == m["micro_f1_no_neutral"]
    assert 0.0 <= m["weighted_f1"] <= 100.0 and 0.0 <= m["micro_f1_no_neutral"] <= 100.0


# ----------------------------------------------------------------------- hand-computed


def test_micro_f1_without_neutral_by_hand():
    # gold [0,1,2,0], pred [1,1,0,0], 0 = neutral excluded; scored classes {1, 2}:
    #   i=0 gold 0, pred 1 -> false positive for 1 (a neutral turn called an emotion)
    #   i=1 gold 1, pred 1 -> true positive
    #   i=2 gold 2, pred 0 -> false negative for 2 (an emotion called neutral)
    #   i=3 gold 0, pred 0 -> ignored (neutral both sides)
    # TP=1, FP=1, FN=1: P = 1/2, R = 1/2, F1 = 0.5 -> 50.0
    gold, pred = [0, 1, 2, 0], [1, 1, 0, 0]
    assert micro_f1_excluding(gold, pred, [0]) == pytest.approx(50.0)
    assert micro_f1_excluding(gold, pred, [0], labels=[0, 1, 2]) == pytest.approx(50.0)
    # accuracy differs: 2 of 4 right -> 50.0 too here, but on the non-neutral gold turns only 1 of 2
    assert accuracy(gold, pred) == pytest.approx(50.0)


def test_micro_f1_without_neutral_differs_from_accuracy():
    # strings, DailyDialog names. gold/pred:
    #   neutral/neutral (ignored), neutral/neutral (ignored), anger/anger (TP),
    #   happiness/neutral (FN), neutral/sadness (FP), happiness/happiness (TP)
    # TP=2, FP=1, FN=1: P = 2/3, R = 2/3, F1 = 2/3 -> 66.67; accuracy = 4/6 = 66.67 as well,
    # so add a neutral/neutral pair: micro F1 unchanged, accuracy 5/7 = 71.43
    gold = ["neutral", "neutral", "anger", "happiness", "neutral", "happiness", "neutral"]
    pred = ["neutral", "neutral", "anger", "neutral", "sadness", "happiness", "neutral"]
    assert micro_f1_excluding(gold, pred, ["neutral"], labels=DD) == pytest.approx(200 / 3)
    assert accuracy(gold, pred) == pytest.approx(500 / 7)
    # same as the official DialogueRNN/DialogXL call on integer ids
    ids = [DD.index(x) for x in gold], [DD.index(x) for x in pred]
    assert 100 * f1_score(*ids, average="micro", labels=[1, 2, 3, 4, 5, 6]) == pytest.approx(200 / 3)


def test_weighted_f1_by_hand():
    # gold a a a b, pred a a b b.
    #   a: P = 2/2, R = 2/3, F1 = 0.8; support 3
    #   b: P = 1/2, R = 1/1, F1 = 2/3; support 1
    # weighted: (3 * 0.8 + 1 * 2/3) / 4 = 0.7667 -> 76.67
    assert weighted_f1(list("aaab"), list("aabb")) == pytest.approx(100 * (3 * 0.8 + 2 / 3) / 4)


# ----------------------------------------------------------------------- edge cases


def test_class_never_predicted_scores_zero_without_warning():
    # "c" is in gold but never predicted: its precision is 0/0, scored 0 (zero_division=0, same
    # value as sklearn's default "warn", which the official scripts use) and no warning is raised.
    gold, pred = ["a", "b", "c", "c"], ["a", "b", "a", "b"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = classification_report_dict(gold, pred, ["a", "b", "c"])
        w = weighted_f1(gold, pred)
        m = micro_f1_excluding(gold, pred, ["a"])
    assert report["c"] == {"precision": 0.0, "recall": 0.0, "f1-score": 0.0, "support": 2}
    # a: P 1/2 R 1 F1 2/3; b: same; c: 0 -> (2/3 + 2/3 + 0) / 4 = 1/3
    assert w == pytest.approx(100 / 3)
    # classes b, c: TP 1 (b), FP 1 (b at i=3), FN 2 (c twice) -> P 1/2, R 1/3, F1 0.4
    assert m == pytest.approx(40.0)


def test_class_in_labels_but_absent_everywhere():
    report = classification_report_dict(["a", "b"], ["a", "b"], ["a", "b", "c"])
    assert report["c"] == {"precision": 0.0, "recall": 0.0, "f1-score": 0.0, "support": 0}
    assert report["accuracy"] == 1.0
    assert weighted_f1(["a", "b"], ["a", "b"], labels=["a", "b", "c"]) == pytest.approx(100.0)


def test_everything_neutral():
    # no emotion anywhere: nothing to score; the official fixed label list gives 0 too
    assert micro_f1_excluding([0, 0, 0], [0, 0, 0], [0]) == 0.0
    assert micro_f1_excluding([0, 0, 0], [0, 0, 0], [0], labels=list(range(7))) == 0.0
    assert f1_score([0, 0, 0], [0, 0, 0], average="micro", labels=[1, 2, 3, 4, 5, 6], zero_division=0) == 0.0


def test_accepts_arrays():
    # anything with tolist() (numpy arrays, torch tensors) is taken as its list of labels
    gold, pred = np.array([0, 1, 2, 0]), np.array([1, 1, 0, 0], dtype=np.int8)
    assert micro_f1_excluding(gold, pred, [0], labels=range(3)) == pytest.approx(50.0)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: weighted_f1([0, 1], [0]), "differ in length"),
        (lambda: accuracy([], []), "empty"),
        (lambda: micro_f1_excluding([], [], [0]), "empty"),
        (lambda: weighted_f1(["a", "x"], ["a", "a"], labels=["a", "b"]), r"gold\[1\] = 'x'"),
        (lambda: classification_report_dict(["a"], ["zz"], ["a", "b"]), r"pred\[0\] = 'zz'"),
        (lambda: erc_metrics(["a"], ["b"], ["a"], "weighted_f1", None), "'b'"),
        (lambda: micro_f1_excluding(["a"], ["a"], ["Neutral"], labels=["a", "neutral"]), "'Neutral'"),
        (lambda: micro_f1_excluding(["a"], ["a"], ["a"], labels=["a"]), "nothing left"),
        (lambda: weighted_f1([0, "a"], [0, "a"]), "mix"),
        (lambda: weighted_f1([1, 2], [1, 2], labels=["1", "2"]), r"gold\[0\] = 1"),
        (lambda: classification_report_dict([1], [1], [1, 1]), "duplicates"),
        (lambda: erc_metrics([0], [0], [0, 1], "macro_f1", None), "unknown primary"),
        (lambda: erc_metrics([0], [0], [0, 1], "micro_f1_no_neutral", None), "needs neutral_label"),
        (lambda: erc_metrics([0], [0], [0, 1], "weighted_f1", 7), "neutral_label 7"),
    ],
)
def test_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ----------------------------------------------------------------------- erc_metrics, primaries


def test_erc_metrics_keys_and_json():
    gold = ["neutral", "anger", "happiness", "neutral"]
    pred = ["anger", "anger", "neutral", "neutral"]
    m = erc_metrics(gold, pred, DD, primary=primary_metric("dailydialog"), neutral_label="neutral")
    assert set(m) == {"weighted_f1", "micro_f1_no_neutral", "accuracy", "per_class", "primary"}
    assert m["primary"] == m["micro_f1_no_neutral"] == pytest.approx(50.0)  # the hand example, in words
    assert list(m["per_class"]) == DD
    json.dumps(m)  # plain Python numbers
    m = erc_metrics(gold, pred, DD, primary="weighted_f1", neutral_label=None)
    assert "micro_f1_no_neutral" not in m and m["primary"] == m["weighted_f1"]


def test_primary_metric():
    assert PRIMARY_METRIC["dailydialog"] == "micro_f1_no_neutral"
    assert all(primary_metric(d) == "weighted_f1" for d in ("meld", "EmoryNLP", "iemocap"))
    assert primary_metric("my_corpus") == DEFAULT_PRIMARY_METRIC == "weighted_f1"


# ----------------------------------------------------------------------- plot


@pytest.mark.parametrize("normalize", [True, False])
def test_confusion_matrix_plot_writes_png(tmp_path, normalize):
    gold = ["neutral", "anger", "happiness", "neutral", "anger"]
    pred = ["anger", "anger", "neutral", "neutral", "neutral"]
    out = confusion_matrix_plot(gold, pred, DD, tmp_path / "sub" / "cm.png", normalize=normalize, title="test")
    assert out == tmp_path / "sub" / "cm.png"
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


def test_a_confusion_matrix_of_many_labels_is_drawn_in_colours_alone(tmp_path, monkeypatch):
    """A number in each of n x n cells: unreadable and slow past a few dozen labels (SwDA's 41 keep theirs)."""
    from matplotlib.axes import Axes

    written = []
    drawn = Axes.text
    monkeypatch.setattr(Axes, "text", lambda self, *a, **k: written.append(a[2]) or drawn(self, *a, **k))
    for n, numbers in ((41, 41 * 41), (200, 0)):
        labels = [f"label-{i}" for i in range(n)]
        written.clear()
        out = confusion_matrix_plot(labels[::-1], labels, labels, tmp_path / f"cm{n}.png", normalize=False)
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and len(written) == numbers


def test_confusion_matrix_plot_rejects_unknown_label(tmp_path):
    with pytest.raises(ValueError, match="'joy'"):
        confusion_matrix_plot(["joy"], ["anger"], DD, tmp_path / "cm.png")
    assert not (tmp_path / "cm.png").exists()


def test_characters_without_a_glyph_get_one_warning(tmp_path):
    import warnings

    import matplotlib

    from turnformer.tasks.metrics import confusion_matrix_plot

    # DejaVu Sans, shipped with matplotlib, has no CJK glyphs
    with warnings.catch_warnings(record=True) as caught, matplotlib.rc_context({"font.family": ["DejaVu Sans"]}):
        warnings.simplefilter("always")
        out = confusion_matrix_plot(["喜", "悲", "喜"], ["喜", "喜", "喜"], ["喜", "悲"], tmp_path / "cm")
    assert out == tmp_path / "cm.png" and out.stat().st_size > 0
    messages = [str(w.message) for w in caught]
    glyphs = [m for m in messages if "glyph" in m.lower()]
    assert len(glyphs) == 1 and "2 characters have no glyph" in glyphs[0] and "(喜悲)" in glyphs[0]
