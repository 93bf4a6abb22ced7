"""Figures: attention masks of a conversation, drawn like the papers' figures."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from turnformer.dialogue import Dialogue
from turnformer.structure import TokenMeta, mask_from_name, pack_dialogues

_WORD = re.compile(r"\w+(?:'\w+)?|[^\w\s]")


def word_tokens(text: str) -> list[str]:
    """A dependency-free word tokenizer (words, contractions, punctuation)."""
    return _WORD.findall(text)


@dataclass(frozen=True)
class MaskView:
    """What a mask figure shows: one row/column per token (or per utterance)."""

    tokens: list[str]
    utterance: list[int]
    speaker: list[str]
    masks: dict[str, torch.Tensor]  # kind -> [N, N] bool

    def to_json(self) -> dict:
        return {
            "kinds": {kind: m.int().tolist() for kind, m in self.masks.items()},
            "tokens": self.tokens,
            "utterance": self.utterance,
            "speaker": self.speaker,
        }


def mask_view(
    dialogue: Dialogue, kinds: Sequence[str], *, window: int | None = None, level: str = "tokens", tokenizer=None
) -> MaskView:
    """Evaluate mask ``kinds`` (names or compositions, see `mask_from_name`) on one dialogue.

    ``level="utterances"`` puts one unit per utterance on the axes; ``"tokens"`` one per token, split
    by ``tokenizer`` (a Hugging Face tokenizer, with its [CLS]/[SEP] layout) or by words.
    """
    names = [t.speaker for t in dialogue.turns]
    if level == "utterances":
        meta = TokenMeta.from_lists([list(range(len(dialogue)))], [dialogue.speaker_ids()])
        tokens = [f"u{i} {t.speaker}" for i, t in enumerate(dialogue.turns)]
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
    masks = {kind: mask_from_name(kind, window=window)(meta, meta)[0] for kind in kinds}
    utterance = meta.utterance[0].tolist()
    return MaskView(tokens=tokens, utterance=utterance, speaker=[names[u] for u in utterance], masks=masks)


def plot_masks(view: MaskView, out: str | Path, title: str | None = None) -> Path:
    """One panel per mask kind; visible pairs dark, masked ones light; utterance boundaries drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(view.tokens)
    kinds = list(view.masks)
    size = min(4.5 + n * 0.12, 14)
    fig, axes = plt.subplots(1, len(kinds), figsize=(size * len(kinds), size), squeeze=False)
    boundaries = [i - 0.5 for i in range(1, n) if view.utterance[i] != view.utterance[i - 1]]
    labels = [f"{tok}" for tok in view.tokens]
    for ax, kind in zip(axes[0], kinds):
        ax.imshow(view.masks[kind].int().numpy(), cmap="Blues", vmin=-0.3, vmax=1.2, interpolation="nearest")
        for b in boundaries:
            ax.axhline(b, color="tab:orange", linewidth=0.8)
            ax.axvline(b, color="tab:orange", linewidth=0.8)
        ax.set_title(kind)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        if n <= 80:
            ax.set_xticks(range(n), labels, rotation=90, fontsize=7)
            ax.set_yticks(range(n), [f"{lab} ({view.speaker[i]})" for i, lab in enumerate(labels)], fontsize=7)
        else:
            starts = [0] + [int(b + 0.5) for b in boundaries]
            ax.set_xticks(starts, [f"u{view.utterance[s]}" for s in starts], rotation=90, fontsize=6)
            ax.set_yticks(starts, [f"u{view.utterance[s]} {view.speaker[s]}" for s in starts], fontsize=6)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
