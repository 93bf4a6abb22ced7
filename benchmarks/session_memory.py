"""What a full live conversation holds in `turnformer serve`, measured, beside the estimate the server starts with.

    python benchmarks/session_memory.py --checkpoint RUN [--checkpoint RUN ...] [--sessions 4] [--turns 1000]
        [--chars 2000] [--threads 1]

-> ``benchmarks/results/serve-session-memory.json``. The checkpoints are served by the real command (``turnformer
serve`` in its own process on a free port of 127.0.0.1, ``--max-session-turns --turns``). For each kind of text
(ASCII letters; emoji, characters beyond U+FFFF, which a Python string holds in 4 bytes each), ``--sessions``
sessions of every streaming model are filled one after the other with ``--turns`` utterances of ``--chars``
characters, and the server's resident memory (VmRSS) is read before and after each: the growth per full session
(the median over the sessions after the first, all kept live; the first also fills the server's caches and the
allocator's arenas, and is reported apart) is set beside the server's estimate for its limits
(`session_footprint`: the models' state, measured, and the history at `HISTORY_BYTES_PER_CHAR`), which must not be
below it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Sequence

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from serve_load import start_server  # noqa: E402  (a script beside this one)

from turnformer.results import make_result, write_result  # noqa: E402
from turnformer.serve.models import load_models, session_footprint  # noqa: E402
from turnformer.serve.schemas import Limits  # noqa: E402

TEXTS = {"ascii": "a", "emoji": "\N{GRINNING FACE}"}


def resident_bytes(pid: int) -> int:
    """The process's resident memory (VmRSS), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def fill(url: str, turns: int, text: str) -> float:
    """One session of every streaming model, given `turns` utterances of `text` (a number in front: no two alike);
    the seconds it took."""
    start = time.monotonic()
    with httpx.Client(base_url=url, timeout=120) as http:
        session = http.post("/v1/sessions", json={}).raise_for_status().json()["session"]
        for i in range(turns):
            utterance = {"speaker": "Ann" if i % 2 else "Bob", "text": f"{i} {text}"[: len(text)]}
            http.post(f"/v1/sessions/{session}/utterances", json=utterance).raise_for_status()
    return time.monotonic() - start


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", action="append", required=True)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--chars", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    limits = Limits(max_session_turns=args.turns, max_text_chars=max(args.chars, Limits.max_text_chars))
    models = load_models(args.checkpoint)
    state, history = session_footprint(models, limits) or (0, 0)
    measured = {}
    for kind, char in TEXTS.items():  # a server of its own each: the first kind's sessions do not count in the second's
        process, url = start_server(args.checkpoint, args.threads, args.sessions + 1,
                                    ["--max-session-turns", str(args.turns), "--max-text", str(limits.max_text_chars)])
        try:
            growth, seconds = [], []
            for _ in range(args.sessions):
                before = resident_bytes(process.pid)
                seconds.append(fill(url, args.turns, char * args.chars))
                growth.append(resident_bytes(process.pid) - before)
        finally:
            process.terminate()
            process.wait(timeout=30)
        measured[kind] = {"growth_per_session_bytes": growth, "median_bytes": statistics.median(growth[1:] or growth),
                          "seconds_per_session": seconds}
        print(f"{kind}: {measured[kind]['median_bytes'] / 2**20:.1f} MiB a full session (the first: {growth[0] / 2**20:.1f}; "
              f"estimate {(state + history) / 2**20:.1f})")
    worst = max(m["median_bytes"] for m in measured.values())
    record = make_result(
        "serve-session-memory", task="serve", dataset="-", split="-", model="+".join(sorted({m.run["recipe"]["model"] for m in models.values()})),
        metric="estimate_over_measured", scores=[(state + history) / worst], seeds=[0],
        config={"sessions": args.sessions, "turns": args.turns, "chars": args.chars, "threads": args.threads},
        extra={"estimate_bytes": state + history, "state_bytes": state, "history_bytes": history, "measured": measured})
    print(json.dumps({"estimate_MiB": (state + history) / 2**20,
                      **{kind: m["median_bytes"] / 2**20 for kind, m in measured.items()}}, indent=1))
    print(f"wrote {write_result(record)}")


if __name__ == "__main__":
    main()
