"""Slow, obviously correct per-token-pair definitions of the masks.

A double loop over plain Python lists, written straight from the definitions table in
`turnformer.structure.masks`. Tests compare the vectorised masks with it on random dialogues, and
the mask-build benchmark times it as the baseline. Never use it in a model.
"""

from __future__ import annotations

from turnformer.structure.packing import TokenMeta

KINDS = ("global", "local", "speaker", "listener", "same_utterance", "other_utterance", "history", "dependency", "causal")


def _rows(meta: TokenMeta, b: int) -> list[dict]:
    fields = ("utterance", "speaker", "position", "order", "is_special", "is_padding", "head")
    columns = {f: getattr(meta, f)[b].tolist() for f in fields}
    return [{f: columns[f][i] for f in fields} for i in range(len(columns["utterance"]))]


def pair_visible(kind: str, q: dict, k: dict, window: int = 0) -> bool:
    if q["is_padding"] or k["is_padding"]:
        return False
    if kind == "global":
        return True
    if kind == "local":
        return 0 <= q["utterance"] - k["utterance"] <= window
    if kind == "speaker":
        return q["speaker"] == k["speaker"]
    if kind == "listener":
        return q["speaker"] != k["speaker"]
    if kind == "same_utterance":
        return q["utterance"] == k["utterance"]
    if kind == "other_utterance":
        return q["utterance"] != k["utterance"]
    if kind == "history":
        return k["utterance"] <= q["utterance"]
    if kind == "dependency":
        opens = q["is_special"] and q["position"] == 0 and q["utterance"] == k["utterance"]
        return opens or q["order"] == k["order"] or k["head"] == q["order"]
    if kind == "causal":
        return k["order"] <= q["order"]
    raise ValueError(f"unknown kind {kind!r}")


def recent_visible(q: dict, k: dict, k_rows: list[dict], n: int | None) -> bool:
    """k is a memory token (real, not special) of an utterance before q's, and no more than n - 1 memory tokens
    of utterances before q's come after it (None: any number)."""
    def memory_before_q(x: dict) -> bool:
        return not x["is_padding"] and not x["is_special"] and x["utterance"] < q["utterance"]

    if q["is_padding"] or not memory_before_q(k):
        return False
    newer = sum(memory_before_q(x) and x["order"] > k["order"] for x in k_rows)
    return n is None or newer < n


def spoken_by_visible(q: dict, k: dict, speaker: int) -> bool:
    return not q["is_padding"] and not k["is_padding"] and k["speaker"] == speaker


def reply_to_visible(q: dict, k: dict, k_rows: list[dict]) -> bool:
    """k is in the latest utterance before q's whose speaker is not q's."""
    def earlier_other(x: dict) -> bool:
        return not x["is_padding"] and x["speaker"] != q["speaker"] and x["utterance"] < q["utterance"]

    if q["is_padding"] or not earlier_other(k):
        return False
    return not any(earlier_other(x) and x["utterance"] > k["utterance"] for x in k_rows)


def own_turns_visible(q: dict, k: dict, k_rows: list[dict], n: int) -> bool:
    """k is in an utterance of q's speaker before q's, and fewer than n utterances of q's speaker lie between."""
    def earlier_own(x: dict) -> bool:
        return not x["is_padding"] and x["speaker"] == q["speaker"] and x["utterance"] < q["utterance"]

    if q["is_padding"] or not earlier_own(k):
        return False
    return len({x["utterance"] for x in k_rows if earlier_own(x) and x["utterance"] > k["utterance"]}) < n


def reference_mask(kind: str, q: TokenMeta, k: TokenMeta, window: int = 0) -> list:
    """Nested lists [B][Q][K] of bools."""
    out = []
    for b in range(q.shape[0]):
        q_rows, k_rows = _rows(q, b), _rows(k, b)
        out.append([[pair_visible(kind, qi, kj, window) for kj in k_rows] for qi in q_rows])
    return out


def reference_dialogxl_masks(q: TokenMeta, k: TokenMeta, counts: tuple[int, int, int, int], window: int,
                              mem_len: int | None = None) -> list:
    """[B][H][Q][K]: [local | global | speaker | listener] heads over the newest `mem_len` memory tokens before the
    query's utterance; the query's own utterance always visible."""
    kinds = [kind for kind, n in zip(("local", "global", "speaker", "listener"), counts) for _ in range(n)]
    out = []
    for b in range(q.shape[0]):
        q_rows, k_rows = _rows(q, b), _rows(k, b)
        heads = []
        for kind in kinds:
            heads.append(
                [
                    [
                        (pair_visible(kind, qi, kj, window) and recent_visible(qi, kj, k_rows, mem_len))
                        or pair_visible("same_utterance", qi, kj)
                        for kj in k_rows
                    ]
                    for qi in q_rows
                ]
            )
        out.append(heads)
    return out
