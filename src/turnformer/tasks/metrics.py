"""Metrics for emotion recognition in conversation (ERC), computed the way the papers compute them.

Every score is scikit-learn's, multiplied by 100 (the papers report percentages):

* MELD, EmoryNLP, IEMOCAP: weighted-average F1 (``f1_score(average="weighted")``), each class's F1
  weighted by its support in ``gold``.
* DailyDialog: micro-average F1 over the six emotions, neutral left out. The official
  DialogueRNN / DialogXL code calls ``f1_score(average="micro", labels=[1, ..., 6])``: utterances
  whose gold *and* predicted label are both neutral do not count; a neutral gold label predicted as an
  emotion is a false positive of that emotion, an emotion predicted as neutral is a false negative.
  So this is not accuracy on the non-neutral utterances.

Zero division: a class that is never predicted has an undefined precision (and one absent from
``gold`` an undefined recall). scikit-learn's default (``zero_division="warn"``) scores those as 0
and warns; here ``zero_division=0`` is passed explicitly, which gives the same numbers as the
official scripts, without the warning. A class absent from ``gold`` has support 0, so it weighs
nothing in the weighted F1; in the micro F1 it only adds its false positives.

Labels may be strings or integers (not a mix). ``gold`` and ``pred`` may be lists, tuples, numpy
arrays or tensors (anything with ``tolist()``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Hashable, Iterable, Sequence

from turnformer.plots import literal_text, write_figure

# scikit-learn's metrics are imported where they are used (loaded when scoring): loading it takes about a second,
# which a command that only predicts need not wait

__all__ = [
    "DEFAULT_PRIMARY_METRIC",
    "METRIC_NAMES",
    "PRIMARY_METRIC",
    "accuracy",
    "classification_report_dict",
    "confusion_matrix_plot",
    "erc_metrics",
    "micro_f1_excluding",
    "primary_metric",
    "weighted_f1",
]

# The metric each benchmark reports first (its papers' headline number).
PRIMARY_METRIC: dict[str, str] = {
    "meld": "weighted_f1",
    "emorynlp": "weighted_f1",
    "iemocap": "weighted_f1",
    "dailydialog": "micro_f1_no_neutral",
}
# Any other dataset (a user's own file).
DEFAULT_PRIMARY_METRIC = "weighted_f1"
METRIC_NAMES = ("weighted_f1", "micro_f1_no_neutral", "accuracy")


def primary_metric(dataset: str) -> str:
    """The headline metric of ``dataset`` (case-insensitive); weighted F1 for unknown datasets."""
    return PRIMARY_METRIC.get(dataset.strip().lower(), DEFAULT_PRIMARY_METRIC)


# --------------------------------------------------------------------------- input checks


def _as_list(values: Any, name: str) -> list:
    if hasattr(values, "tolist"):  # numpy arrays, torch tensors
        values = values.tolist()
    if isinstance(values, (str, bytes)):
        raise ValueError(f"{name} must be a sequence of labels, not a single string")
    out = list(values)
    for v in out:
        if isinstance(v, (list, tuple)):
            raise ValueError(f"{name} must be a flat sequence of labels (one per utterance), got a nested {type(v).__name__}")
    return out


def _check_types(values: Iterable, what: str) -> None:
    kinds = {"str" if isinstance(v, str) else "non-str" for v in values}
    if len(kinds) > 1:
        raise ValueError(f"{what} mix string and non-string labels; use one kind (all str or all int)")


def _check_labels(labels: Any) -> list:
    labels = _as_list(labels, "labels")
    if not labels:
        raise ValueError("labels is empty")
    seen: set = set()
    dup = [lab for lab in labels if lab in seen or seen.add(lab)]  # type: ignore[func-returns-value]
    if dup:
        raise ValueError(f"labels has duplicates: {dup!r}")
    _check_types(labels, "labels")
    return labels


def _check(gold: Any, pred: Any, labels: Any = None) -> tuple[list, list, list | None]:
    """Lists of gold and predicted labels, same non-zero length, every label in ``labels`` if given."""
    gold = _as_list(gold, "gold")
    pred = _as_list(pred, "pred")
    if len(gold) != len(pred):
        raise ValueError(f"gold and pred differ in length: {len(gold)} gold labels, {len(pred)} predictions")
    if not gold:
        raise ValueError("gold and pred are empty: nothing to score")
    _check_types(gold + pred, "gold and pred")
    if labels is not None:
        labels = _check_labels(labels)
        allowed = set(labels)
        for name, values in (("gold", gold), ("pred", pred)):
            for i, v in enumerate(values):
                if v not in allowed:
                    raise ValueError(f"{name}[{i}] = {v!r} is not a known label; labels: {labels!r}")
        if isinstance(gold[0], str) != isinstance(labels[0], str):
            raise ValueError("gold/pred and labels mix string and non-string labels")
    return gold, pred, labels


# --------------------------------------------------------------------------- scores (percent)


def weighted_f1(gold: Sequence[Hashable], pred: Sequence[Hashable], *, labels: Sequence[Hashable] | None = None) -> float:
    """Support-weighted F1 in percent (MELD, EmoryNLP, IEMOCAP): ``f1_score(average="weighted")``.

    ``labels`` (optional) only validates the inputs: classes absent from ``gold`` weigh 0 anyway.
    """
    gold, pred, labels = _check(gold, pred, labels)
    from sklearn.metrics import f1_score  # scikit-learn: loaded when scoring (above)
    return 100.0 * float(f1_score(gold, pred, labels=labels, average="weighted", zero_division=0))


def micro_f1_excluding(
    gold: Sequence[Hashable],
    pred: Sequence[Hashable],
    excluded_labels: Iterable[Hashable],
    *,
    labels: Sequence[Hashable] | None = None,
) -> float:
    """Micro F1 in percent over every class but ``excluded_labels`` (DailyDialog: neutral excluded).

    Same as ``f1_score(gold, pred, average="micro", labels=kept)``, with ``kept`` the classes of
    ``labels`` (default: of ``gold`` and ``pred``) that are not excluded. If ``labels`` is given, each
    excluded label must be one of them. With nothing left to score (every observed label excluded,
    ``labels`` not given) the score is 0, as scikit-learn gives with the official fixed label list.
    """
    gold, pred, labels = _check(gold, pred, labels)
    excluded = _as_list(excluded_labels, "excluded_labels")
    if labels is not None:
        unknown = [x for x in excluded if x not in set(labels)]
        if unknown:
            raise ValueError(f"excluded label(s) {unknown!r} not in labels {labels!r}")
        universe = labels
    else:
        universe = list(dict.fromkeys(gold + pred))  # first-seen order; the order does not change micro F1
    drop = set(excluded)
    kept = [lab for lab in universe if lab not in drop]
    if not kept:
        if labels is not None:
            raise ValueError(f"every label is excluded ({excluded!r}): nothing left to score")
        return 0.0
    from sklearn.metrics import f1_score  # scikit-learn: loaded when scoring (above)
    return 100.0 * float(f1_score(gold, pred, labels=kept, average="micro", zero_division=0))


def accuracy(gold: Sequence[Hashable], pred: Sequence[Hashable], *, labels: Sequence[Hashable] | None = None) -> float:
    """Share of exact matches, in percent (``accuracy_score``)."""
    gold, pred, _ = _check(gold, pred, labels)
    from sklearn.metrics import accuracy_score  # scikit-learn: loaded when scoring (above)
    return 100.0 * float(accuracy_score(gold, pred))


def classification_report_dict(
    gold: Sequence[Hashable], pred: Sequence[Hashable], labels: Sequence[Hashable]
) -> dict[str, Any]:
    """scikit-learn's ``classification_report(output_dict=True, zero_division=0)`` over ``labels``.

    Keys: ``str(label)`` for each class (in ``labels`` order, also the ones that never occur) with
    ``precision``, ``recall``, ``f1-score`` as fractions in [0, 1] (scikit-learn's scale, *not*
    percent) and ``support`` (an int: gold count); then ``accuracy`` (a fraction), ``macro avg`` and
    ``weighted avg``. Plain Python floats and ints, ready for JSON.
    """
    gold, pred, labels = _check(gold, pred, labels)
    names = [str(lab) for lab in labels]
    if len(set(names)) != len(names):
        raise ValueError(f"labels are not distinct as strings: {labels!r}")
    from sklearn.metrics import classification_report  # scikit-learn: loaded when scoring (above)
    report = classification_report(gold, pred, labels=labels, target_names=names, output_dict=True, zero_division=0)
    return _plain(report)


def _plain(obj: Any, key: str = "") -> Any:
    if isinstance(obj, dict):
        return {k: _plain(v, k) for k, v in obj.items()}
    if key == "support":
        return int(obj)
    return float(obj)


def erc_metrics(
    gold: Sequence[Hashable],
    pred: Sequence[Hashable],
    labels: Sequence[Hashable],
    primary: str = DEFAULT_PRIMARY_METRIC,
    neutral_label: Hashable | None = None,
) -> dict[str, Any]:
    """All ERC scores of one run.

    Returns ``weighted_f1``, ``micro_f1_no_neutral`` (only when ``neutral_label`` is given),
    ``accuracy`` (all percent), ``per_class`` (the class entries of `classification_report_dict`,
    fractions in [0, 1], keyed by ``str(label)``) and ``primary``: the value of the metric named by
    ``primary`` (one of `METRIC_NAMES`; see `primary_metric` for a dataset's choice).
    """
    if primary not in METRIC_NAMES:
        raise ValueError(f"unknown primary metric {primary!r}; choose one of {list(METRIC_NAMES)}")
    if primary == "micro_f1_no_neutral" and neutral_label is None:
        raise ValueError("primary metric 'micro_f1_no_neutral' needs neutral_label")
    gold, pred, labels = _check(gold, pred, labels)
    if neutral_label is not None and neutral_label not in set(labels):
        raise ValueError(f"neutral_label {neutral_label!r} is not in labels {labels!r}")
    out: dict[str, Any] = {"weighted_f1": weighted_f1(gold, pred, labels=labels)}
    if neutral_label is not None:
        out["micro_f1_no_neutral"] = micro_f1_excluding(gold, pred, [neutral_label], labels=labels)
    out["accuracy"] = accuracy(gold, pred)
    report = classification_report_dict(gold, pred, labels)
    out["per_class"] = {str(lab): report[str(lab)] for lab in labels}
    out["primary"] = out[primary]
    return out


# --------------------------------------------------------------------------- figure


# Above this many labels the cells are too small to read a number in (and a number in each of n x n cells is what the
# drawing's time goes to): the colours alone say it; SwDA's 41 acts keep theirs
MAX_LABELS_WITH_CELL_TEXT = 45


def cell_text_size(labels: int) -> float | None:
    """The font size of the numbers in a confusion matrix's cells, by its number of labels; None: no numbers."""
    return None if labels > MAX_LABELS_WITH_CELL_TEXT else 9 if labels <= 10 else 7 if labels <= 20 else 5


@literal_text()
def confusion_matrix_plot(
    gold: Sequence[Hashable],
    pred: Sequence[Hashable],
    labels: Sequence[Hashable],
    out_path: str | Path,
    normalize: bool = True,
    title: str | None = None,
) -> Path:
    """Draw the confusion matrix (rows: gold, columns: predicted, in ``labels`` order) to a PNG (or the format
    ``out_path`` names; see `turnformer.plots.figure_path`); returns the path written.

    ``normalize=True`` divides each row by its gold count (``confusion_matrix(normalize="true")``;
    a class absent from ``gold`` gets a row of zeros) and writes ratios in the cells; otherwise
    counts. Uses matplotlib's Agg canvas directly: no pyplot state, no display needed.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # matplotlib: loaded only when a figure is drawn
    from matplotlib.figure import Figure

    gold, pred, labels = _check(gold, pred, labels)
    from sklearn.metrics import confusion_matrix  # scikit-learn: loaded when scoring (above)
    counts = confusion_matrix(gold, pred, labels=labels)
    cm = confusion_matrix(gold, pred, labels=labels, normalize="true") if normalize else counts
    n = len(labels)
    names = [str(lab) for lab in labels]
    side = min(max(3.0, 1.2 + 0.6 * n), 14.0)
    fig = Figure(figsize=(side + 1.2, side))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    vmax = 1.0 if normalize else max(int(counts.max()), 1)
    im = ax.imshow(cm, cmap="Blues", vmin=0.0, vmax=vmax, interpolation="nearest")
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    ax.set_xticks(range(n), names, rotation=45, ha="right", rotation_mode="anchor")
    ax.set_yticks(range(n), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("gold")
    fontsize = cell_text_size(n)
    for i in range(n if fontsize else 0):
        for j in range(n):
            value = cm[i, j]
            text = f"{value:.2f}" if normalize else f"{int(value)}"
            ax.text(j, i, text, ha="center", va="center", fontsize=fontsize,
                    color="white" if value > 0.6 * vmax else "black")
    ax.set_title(title if title is not None else ("confusion matrix (rows normalised)" if normalize else "confusion matrix"))
    return write_figure(fig, out_path)
