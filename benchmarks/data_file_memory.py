"""Peak memory and time of `turnformer data stats FILE` and `turnformer data convert FILE --out ...` (to a table and to
JSON Lines) as a conversation table grows: the file read a conversation at a time (now) against the same commands at an
earlier commit (`--baseline`), side by side on the same files.

    python benchmarks/data_file_memory.py [--rows 100000,1000000] [--baseline COMMIT]

The tables are DailyDialog's training conversations written as a table (`turnformer data convert`'s writer),
repeated, each copy with its own conversation ids, until they hold ``--rows`` utterances. Each command runs in a child
process of its own, whose peak resident memory (``ru_maxrss``) is read when it ends; where a baseline runs, each
output is checked to be the same file as its own. Writes benchmarks/results/data-file-memory.json: the peak of
`data stats` at the largest file as the score, every peak and time per size and command.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from _timing import peak_memory, repeated, source_trees
from turnformer.data import load_split
from turnformer.data.table import write_table
from turnformer.results import make_result, write_result

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {"stats": ("stats", None), "convert-table": ("convert", "out.csv"), "convert-jsonl": ("convert", "out.jsonl")}


def conversation_table(path: Path, rows: int, data_dir) -> int:
    """DailyDialog's training conversations, repeated with new ids until the table holds `rows` utterances; how many
    it holds."""
    out, total = repeated(load_split("dailydialog", "train", data_dir).dialogues, rows)
    write_table(out, path)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="100000,1000000", help="the tables' sizes, in utterances")
    parser.add_argument("--baseline", default=None, help="an earlier commit to measure beside this tree")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="data-file-memory-"))
    sizes = []
    with source_trees(ROOT, folder, args.baseline) as trees:
        for size in (int(n) for n in args.rows.split(",")):
            source = folder / f"conversations-{size}.csv"
            row: dict = {"rows": conversation_table(source, size, args.data_dir),
                         "file_mib": round(source.stat().st_size / 2**20, 1)}
            for command, (verb, out_name) in COMMANDS.items():
                outputs = {}
                for name, src in trees.items():
                    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1", "TURNFORMER_THREADS": "1"}
                    outputs[name] = folder / f"{name}-{out_name or 'stats.json'}"
                    line = [sys.executable, "-m", "turnformer.cli", "-q", "data", verb, str(source),
                            *(["--out", str(outputs[name])] if out_name else ["--json"])]
                    if out_name is None:  # stats: its JSON on stdout, kept to compare
                        line = ["sh", "-c", '"$@" > "$0"', str(outputs[name]), *line]
                    row.setdefault(command, {})[name] = peak_memory(line, env, f"data {verb}")
                    print(f"{row['rows']} rows, {command}, {name}: {row[command][name]}", flush=True)
                if "baseline" in outputs:
                    row[command]["same_output"] = outputs["now"].read_bytes() == outputs["baseline"].read_bytes()
                for path in outputs.values():
                    path.unlink()
            sizes.append(row)
            source.unlink()
    record = make_result(
        "data-file-memory", task="data", dataset="file (DailyDialog training conversations, repeated, as a table)",
        split="-", model="-", backbone=None, metric="peak_rss_mib", scores=[sizes[-1]["stats"]["now"]["peak_rss_mib"]],
        seeds=[1], extra={"sizes": sizes, "baseline_commit": args.baseline, "threads": 1,
                          "note": "peak resident memory of `turnformer data stats` / `data convert` in a child process"})
    print(f"wrote {write_result(record)}")
    print(json.dumps(sizes, indent=1))


if __name__ == "__main__":
    main()
