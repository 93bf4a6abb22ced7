"""Figures: attention masks of a conversation, drawn like the papers' figures.

matplotlib is imported inside the functions that draw: the tasks import this module (`AttentionView`, `HEAD_TYPES`,
`write_figure`), and a training, which draws nothing, does not pay for loading matplotlib.
"""

from __future__ import annotations

import io
import logging
import re
import textwrap
import unicodedata
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import regex
import torch

from turnformer.data._io import check_output_file, write_file
from turnformer.dialogue import Dialogue
from turnformer.structure import SAME_UTTERANCE, SpecialTokens, TokenMeta, mask_from_name, pack_dialogues, pack_token_ids, recent

logger = logging.getLogger(__name__)

# a word with the marks written on it (Devanagari's vowel signs, Thai's tone marks, an accent typed on its own), which
# Python's re reads as punctuation of their own; else a punctuation mark; invisible format characters (a zero-width
# space, direction marks) are no token
_WORD = regex.compile(r"(?:\w|\p{M})+(?:'(?:\w|\p{M})+)?|[^\w\s\p{Cf}]")


@contextmanager
def literal_text():
    """Texts drawn as written: a speaker, id, label or word with "$" in it ("$5") is not read as a formula, which
    matplotlib would otherwise try to parse (and fail on). A context manager and, written ``@literal_text()``, a
    decorator; tick labels are made when the figure is drawn, so it covers the saving too."""
    import matplotlib  # matplotlib: loaded when a figure is made

    with matplotlib.rc_context({"text.parse_math": False}):
        yield


def figure_path(out: str | Path) -> Path:
    """The file a figure goes to: `out`, with .png added when it has no extension. A ValueError naming the path says
    why it cannot be written (a folder, a format matplotlib does not write, a file where a folder should be), before
    any work is done."""
    from matplotlib.backend_bases import FigureCanvasBase  # matplotlib: loaded when a figure is made

    if str(out) == "-":  # not standard output, as for predictions: a figure is a file
        raise ValueError("-: a figure is written to a file; give one, e.g. figure.png")
    out = Path(out)
    if out.is_dir():
        raise ValueError(f"{out}: is a folder; give a file name, e.g. {out / 'figure.png'}")
    if not out.suffix:
        out = out.with_suffix(".png")
    formats = FigureCanvasBase.get_supported_filetypes()
    if out.suffix[1:].lower() not in formats:
        raise ValueError(f"{out}: cannot write a figure as {out.suffix!r}; use one of {', '.join('.' + f for f in sorted(formats))}")
    return check_output_file(out)


_MISSING_GLYPH = re.compile(r"Glyph (\d+) .*missing from font")


def write_figure(fig, out: str | Path) -> Path:
    """Lay out and write a matplotlib figure (creating the folder; PNG unless `out` names another format); returns
    the path written (see `figure_path`). Characters the installed fonts lack (CJK, emoji...) are drawn as boxes:
    one warning names them all, instead of matplotlib's one per character."""
    out = figure_path(out)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if fig.get_layout_engine() is None:  # a figure laid out as it is drawn (constrained) keeps its own
            fig.tight_layout()
        image = io.BytesIO()
        fig.savefig(image, format=out.suffix[1:].lower(), dpi=110)
    write_file(out, image.getvalue())  # whole or not at all, and a failure names the file
    missing = []
    for warning in caught:
        if match := _MISSING_GLYPH.search(str(warning.message)):
            missing.append(chr(int(match.group(1))))
        else:  # any other warning passes on as it was
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    missing = list(dict.fromkeys(missing))  # each character once, in the order drawn
    if missing:
        warnings.warn(f"{out}: {len(missing)} characters have no glyph in the installed fonts and are drawn as boxes "
                      f"({''.join(missing)}); install a font that has them (e.g. Noto Sans CJK) to see them", stacklevel=2)
    return out


def save_figure(fig, out: str | Path) -> Path:
    """`write_figure`, then close the pyplot figure; returns the path written."""
    import matplotlib.pyplot as plt  # matplotlib: loaded when a figure is made

    out = write_figure(fig, out)
    plt.close(fig)
    return out


def word_tokens(text: str) -> list[str]:
    """A dependency-free word tokenizer (words, contractions, punctuation), over the text's composed form (NFC)."""
    return _WORD.findall(unicodedata.normalize("NFC", text))


@dataclass(frozen=True)
class MaskView:
    """What a mask figure shows: one row/column per token (or per utterance)."""

    tokens: list[str]
    utterance: list[int]
    speaker: list[str]
    masks: dict[str, torch.Tensor]  # kind -> [queries, keys] bool
    query_tokens: list[str] = field(default_factory=list)  # set when rows are one utterance only

    def row_labels(self) -> list[str]:
        if self.query_tokens:
            return self.query_tokens
        return [f"{tok} ({self.speaker[i]})" for i, tok in enumerate(self.tokens)]

    def to_json(self) -> dict:
        return {
            "kinds": {kind: m.int().tolist() for kind, m in self.masks.items()},
            "tokens": self.tokens,
            "utterance": self.utterance,
            "speaker": self.speaker,
            **({"query_tokens": self.query_tokens} if self.query_tokens else {}),
        }


# a mask view of more cells is unreadable as a figure, and its figure's arrays grow with the cells (18K tokens: 6 GB)
MAX_VIEW_CELLS = 2000 * 2000


def mask_view(
    dialogue: Dialogue,
    kinds: Sequence[str],
    *,
    window: int | None = None,
    level: str = "tokens",
    tokenizer=None,
    query_utterance: int | None = None,
    mem_len: int | None = None,
    first: int = 0,
) -> MaskView:
    """Evaluate mask ``kinds`` (names or compositions, see `mask_from_name`) on one dialogue.

    ``level="utterances"`` puts one unit per utterance on the axes; ``"tokens"`` one per token, split
    by ``tokenizer`` (a Hugging Face tokenizer, with its [CLS]/[SEP] layout) or by words.
    ``query_utterance=t`` shows DialogXL's view (its Figure 3) as the model applies it: the rows are u_t's
    tokens and the keys are u_0..u_t, each utterance tokenised as DialogXL encodes it ([CLS] u [SEP]); each kind
    is a head type, restricted to the memory (earlier utterances' tokens without special ones, the newest
    ``mem_len`` of them; None: all) with the query's own utterance visible to every head, exactly the masks
    `dialogxl_layout` gives the encoder. Otherwise rows and columns are every token (the offline view). The
    utterances are numbered from `first` (the dialogue a part of a longer one, whose masks on it are the same).
    """
    names = [t.speaker for t in dialogue.turns]
    if level == "tokens" and query_utterance is not None and tokenizer is not None:
        ids = [tokenizer(t.text, add_special_tokens=False, verbose=False)["input_ids"] for t in dialogue.turns]
        special = SpecialTokens(pad=tokenizer.pad_token_id or 0, prefix=tokenizer.cls_token_id, suffix=tokenizer.sep_token_id)
        packed = pack_token_ids([ids], [dialogue.speaker_ids()], special)
        meta, tokens = packed.meta, tokenizer.convert_ids_to_tokens(packed.input_ids[0].tolist())
    elif level == "utterances":
        meta = TokenMeta.from_lists([list(range(len(dialogue)))], [dialogue.speaker_ids()])
        tokens = [f"u{first + i} {t.speaker}" for i, t in enumerate(dialogue.turns)]
    elif level == "tokens":
        if tokenizer is None:
            vocab: dict[str, int] = {}
            words = [word_tokens(t.text) for t in dialogue.turns]
            packed = pack_dialogues([dialogue], lambda text: [vocab.setdefault(w, len(vocab) + 1) for w in word_tokens(text)])
            tokens = [w for ws in words for w in ws]
        else:
            packed = pack_dialogues([dialogue], tokenizer, with_tokens=True)
            tokens = packed.tokens[0]
        meta = packed.meta
    else:
        raise ValueError(f"level must be 'tokens' or 'utterances', got {level!r}")
    queries = keys = meta
    query_tokens = tokens
    if query_utterance is not None:
        if not 0 <= query_utterance < len(dialogue):
            raise ValueError(f"query utterance {query_utterance} out of range: the dialogue has {len(dialogue)} turns")
        utt = meta.utterance[0]
        rows = torch.nonzero(utt == query_utterance).flatten()
        cols = torch.nonzero((utt <= query_utterance) & (utt >= 0)).flatten()
        if mem_len is not None and len(rows) * len(cols) > MAX_VIEW_CELLS:
            # too many keys to draw: those from the oldest token the memory holds (no head sees the ones before)
            memory = cols[(utt[cols] < query_utterance) & ~meta.is_special[0][cols]]
            if len(memory) > mem_len:
                cols = cols[cols >= (memory[len(memory) - mem_len] if mem_len else rows[0])]
                logger.info("keys from utterance %d on: the earlier utterances are past the memory of %d tokens",
                            int(utt[cols[0]]), mem_len)
        queries, keys = meta.select(rows), meta.select(cols)
        query_tokens, tokens = [tokens[i] for i in rows.tolist()], [tokens[i] for i in cols.tolist()]
    if not kinds:
        raise ValueError("no mask kinds given: name at least one, e.g. local,speaker")
    if len(query_tokens) * len(tokens) > MAX_VIEW_CELLS:
        other_views = "fewer utterances (--start, --length)" if level == "utterances" else \
            "one utterance's view (--query-utterance N, with --mem-len), the utterances (--level utterances), or fewer " \
            "utterances (--start, --length)"
        raise ValueError(f"{len(query_tokens)} x {len(tokens)} {level}: too many to draw or print (at most "
                         f"{MAX_VIEW_CELLS:,} cells); show {other_views}")
    masks = {}
    for kind in kinds:
        mask = mask_from_name(kind, window=window)
        if query_utterance is not None:  # a DialogXL head of this type, as `dialogxl_layout` builds it
            mask = (mask & recent(mem_len)) | SAME_UTTERANCE
        masks[kind] = mask(queries, keys)[0]
    utterance = keys.utterance[0].tolist()
    return MaskView(
        tokens=tokens, utterance=[first + u for u in utterance], speaker=[names[u] for u in utterance], masks=masks,
        query_tokens=query_tokens if query_utterance is not None else [],
    )


@literal_text()
def plot_masks(view: MaskView, out: str | Path, title: str | None = None) -> Path:
    """One panel per mask kind; visible pairs dark, masked ones light; utterance boundaries drawn."""
    import matplotlib  # matplotlib: loaded when a figure is made

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after the backend is chosen

    n = len(view.tokens)
    rows = view.row_labels()
    kinds = list(view.masks)
    ncols = min(len(kinds), 2)
    nrows = -(-len(kinds) // ncols)
    width = min(3.5 + n * 0.11, 8)
    height = min(1.5 + len(rows) * 0.11, 8) if view.query_tokens else width
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    boundaries = [i - 0.5 for i in range(1, n) if view.utterance[i] != view.utterance[i - 1]]
    starts = thinned([0] + [int(b + 0.5) for b in boundaries])  # the utterances named where the tokens cannot be
    for ax in axes.flat[len(kinds):]:
        ax.axis("off")
    for ax, kind in zip(axes.flat, kinds):
        ax.imshow(view.masks[kind].int().numpy(), cmap="Blues", vmin=-0.3, vmax=1.2, interpolation="nearest", aspect="auto")
        for b in boundaries if len(boundaries) <= MOST_LINES else ():  # more would cover the masks
            ax.axvline(b, color="tab:orange", linewidth=0.8)
            if not view.query_tokens:
                ax.axhline(b, color="tab:orange", linewidth=0.8)
        ax.set_title(kind)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        if n <= 80:
            ax.set_xticks(range(n), view.tokens, rotation=90, fontsize=7)
        else:
            ax.set_xticks(starts, [f"u{view.utterance[s]}" for s in starts], rotation=90, fontsize=6)
        if len(rows) <= 80:
            ax.set_yticks(range(len(rows)), rows, fontsize=7)
        elif not view.query_tokens:  # the rows are the keys: named as the columns are
            ax.set_yticks(starts, [f"u{view.utterance[s]}" for s in starts], fontsize=6)
    if title:
        fig.suptitle(title)
    return save_figure(fig, out)


MOST_LINES = 80  # utterance boundaries drawn on a figure at most
MOST_TICKS = 40  # utterance ticks named on an axis at most


def thinned(starts: Sequence[int], most: int = MOST_TICKS) -> list[int]:
    """At most `most` of `starts`, evenly spaced, the first kept: ticks that can be read on a long conversation."""
    step = -(-len(starts) // most)
    return list(starts[::step])


def wrapped(title: str, width_inches: float, fontsize: float) -> str:
    """`title` broken into lines that fit a figure `width_inches` wide at `fontsize` points."""
    return textwrap.fill(title, max(20, int(width_inches * 72 / (0.6 * fontsize))))  # a character: about 0.6 em


# DialogXL's head types, in the order its heads are laid out (`dialogxl_layout`).
HEAD_TYPES = ("local", "global", "speaker", "listener")


@dataclass(frozen=True)
class AttentionView:
    """One utterance's [CLS] query in DialogXL's last layer: its attention over the keys (memory
    tokens, oldest first, then the utterance's own tokens), averaged over the heads of each type."""

    dialogue: str | None
    query_utterance: int
    tokens: list[str]
    utterance: list[int]  # per key
    speaker: list[str]  # per key
    weights: dict[str, list[float]]  # head type -> per key
    head_counts: dict[str, int]

    def utterance_weights(self) -> dict[str, dict[int, float]]:
        """Attention mass per utterance, per head type."""
        out: dict[str, dict[int, float]] = {}
        for kind, weights in self.weights.items():
            totals = out.setdefault(kind, {})
            for u, w in zip(self.utterance, weights):
                totals[u] = totals.get(u, 0.0) + w
        return out

    def to_json(self) -> dict:
        return {
            "dialogue": self.dialogue, "utterance": self.query_utterance, "query": "[CLS], last layer",
            "head_counts": self.head_counts, "tokens": self.tokens, "key_utterance": self.utterance,
            "speaker": self.speaker, "weights": self.weights,
            "utterance_weights": {k: {str(u): w for u, w in v.items()} for k, v in self.utterance_weights().items()},
        }


@literal_text()
def plot_attention(view: AttentionView, out: str | Path, title: str | None = None) -> Path:
    """One row per head type, one column per key. Each row's colours are scaled to its largest weight
    on a memory key (the [CLS] token's weight on itself would otherwise wash out the history)."""
    import matplotlib  # matplotlib: loaded when a figure is made

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after the backend is chosen

    kinds = list(view.weights)
    n = len(view.tokens)
    matrix = torch.tensor([view.weights[k] for k in kinds])
    history = torch.tensor([u != view.query_utterance for u in view.utterance])
    scale = (matrix[:, history] if bool(history.any()) else matrix).amax(1, keepdim=True)
    scale = torch.where(scale > 0, scale, matrix.amax(1, keepdim=True))  # a head type that sees no memory
    matrix = (matrix / scale.clamp(min=1e-12)).clamp(max=1)
    width = min(4 + n * 0.14, 18)
    title = title or (f"dialogue {view.dialogue}, utterance {view.query_utterance}: [CLS] attention, last layer "
                      "(mean over each type's heads; rows scaled to their largest memory weight)")
    title = wrapped(title, width, 9)
    fig, ax = plt.subplots(figsize=(width, 1.6 + 0.45 * len(kinds) + 0.15 * title.count("\n")))
    ax.imshow(matrix.numpy(), cmap="Reds", vmin=0, vmax=1, interpolation="nearest", aspect="auto")
    starts = [i for i in range(n) if i == 0 or view.utterance[i] != view.utterance[i - 1]]
    for s in starts[1:] if len(starts) <= MOST_LINES else ():  # more would cover the weights
        ax.axvline(s - 0.5, color="tab:blue", linewidth=0.8)
    ax.set_yticks(range(len(kinds)), [f"{k} ({view.head_counts[k]})" for k in kinds], fontsize=8)
    named = thinned(starts)  # the utterances a long conversation names
    if n <= 100:
        ax.set_xticks(range(n), view.tokens, rotation=90, fontsize=6)
    else:
        ax.set_xticks(named, [f"u{view.utterance[s]}" for s in named], rotation=90, fontsize=6)
    top = ax.secondary_xaxis("top")
    top.set_xticks([s - 0.5 for s in named], [f"u{view.utterance[s]} {view.speaker[s]}" for s in named], rotation=45, ha="left", fontsize=6)
    ax.set_xlabel("key (memory, then the current utterance)")
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, out)


@literal_text()
def plot_utterance_attention(panels: Sequence[tuple[str, torch.Tensor]], labels: Sequence[str], out: str | Path,
                             title: str | None = None, key: str = "utterance", first: int = 0) -> Path:
    """Side-by-side heatmaps (one per model) of utterance-to-utterance attention (or, with ``key="token"``,
    token-to-token, the labels on both axes); rows: queries; the utterances numbered from `first`."""
    import matplotlib  # matplotlib: loaded when a figure is made

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after the backend is chosen

    n = len(labels)
    fig, axes = plt.subplots(1, len(panels), figsize=(3 + len(panels) * (2.5 + 0.35 * n), 2 + 0.35 * n), squeeze=False,
                             layout="constrained")  # the colour bar beside the panels, not over them
    numbers = range(first, first + n)
    top = max(float(matrix.max()) for _, matrix in panels)  # one scale for every panel, shown: each to its own
    for ax, (name, matrix) in zip(axes[0], panels):  # maximum drew an even 0.1 as dark as a peak of 0.9
        image = ax.imshow(matrix.numpy(), cmap="Reds", vmin=0, vmax=top, interpolation="nearest")
        ax.set_title(name, fontsize=9)
        ax.set_xticks(range(n), labels if key == "token" else numbers, fontsize=7, rotation=90 if key == "token" else 0)
        ax.set_yticks(range(n), labels if ax is axes[0][0] else numbers, fontsize=7)
        ax.set_xlabel(f"key {key}")
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8, label="attention weight")
    fig.suptitle(title or f"attention between {key}s (mean over heads; rows sum to 1)", fontsize=9)
    return save_figure(fig, out)
