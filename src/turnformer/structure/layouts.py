"""Head layouts: which attention heads use which structure.

A `HeadLayout` is an ordered list of (mask, number of heads). `build` evaluates each distinct mask
once on the batch and expands it to a per-head mask [B, H, Q, K] with one gather, so the cost does
not grow with the number of heads.

DialogXL (official code) orders its heads [local | global | speaker | listener] and applies the
structure to memory keys only: inside the current utterance every head sees every real token.
`dialogxl_layout` builds that layout: every head type is limited to the memory (`within`, the newest
``mem_len`` memory tokens before the query's utterance), and `always_visible=SAME_UTTERANCE` opens the
query's own utterance to every head. The same layout serves one utterance against a carried memory and
one pass over many utterances.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turnformer.structure.masks import GLOBAL, LISTENER, SAME_UTTERANCE, SPEAKER, Mask, local, recent, whole_number
from turnformer.structure.packing import TokenMeta

# Official DialogXL head counts (local, global, speaker, listener) and local windows per dataset.
DIALOGXL_HEADS = {
    "iemocap": ((2, 2, 4, 4), 10),
    "meld": ((5, 5, 1, 1), 5),
    "dailydialog": ((1, 2, 5, 4), 10),
    "emorynlp": ((1, 2, 4, 5), 5),
}


@dataclass(frozen=True)
class HeadLayout:
    groups: tuple[tuple[Mask, int], ...]
    always_visible: Mask | None = None  # OR-ed into every head (e.g. the current utterance)
    within: Mask | None = None  # AND-ed into every head type before `always_visible` (e.g. the memory)

    def __post_init__(self) -> None:
        for mask, n in self.groups:
            whole_number(n, f"the head count of {mask.name}")
        if self.num_heads == 0:
            raise ValueError("a head layout needs at least one head")

    @property
    def num_heads(self) -> int:
        return sum(n for _, n in self.groups)

    def head_names(self) -> list[str]:
        return [m.name for m, n in self.groups for _ in range(n)]

    def build(self, q: TokenMeta, k: TokenMeta) -> torch.Tensor:
        """[B, H, Q, K] boolean per-head mask, heads in layout order."""
        used = [(m, n) for m, n in self.groups if n > 0]
        kinds = torch.stack([m(q, k) for m, _ in used], dim=1)  # [B, kinds, Q, K]
        if self.within is not None:
            kinds = kinds & self.within(q, k).unsqueeze(1)
        if self.always_visible is not None:
            kinds = kinds | self.always_visible(q, k).unsqueeze(1)
        head_to_kind = torch.repeat_interleave(torch.arange(len(used)), torch.tensor([n for _, n in used]))
        return kinds.index_select(1, head_to_kind.to(kinds.device))


def dialogxl_layout(
    local_heads: int, global_heads: int, speaker_heads: int, listener_heads: int, window: int, mem_len: int | None = None
) -> HeadLayout:
    """[local(window) | global | speaker | listener] over the newest ``mem_len`` memory tokens (None: all of
    them), every head seeing the query's own utterance."""
    return HeadLayout(
        groups=((local(window), local_heads), (GLOBAL, global_heads), (SPEAKER, speaker_heads), (LISTENER, listener_heads)),
        always_visible=SAME_UTTERANCE,
        within=recent(mem_len),
    )


def dialogxl_layout_for(dataset: str) -> HeadLayout:
    """The paper's head counts and window for one of its datasets (any letter case)."""
    if dataset.lower() not in DIALOGXL_HEADS:
        raise ValueError(f"no DialogXL head layout for {dataset!r}; known: {', '.join(DIALOGXL_HEADS)}")
    counts, window = DIALOGXL_HEADS[dataset.lower()]
    return dialogxl_layout(*counts, window=window)



