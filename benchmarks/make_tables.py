"""Regenerate docs/results.md (each paper's main rows) and docs/results-all.md (everything) from
benchmarks/results/*.json: this checkout's, wherever the script is started from (--results and --docs for others).
A damaged results file stops it, named, before any table is written; so does a folder without results."""

import argparse
import sys
from pathlib import Path

from turnformer.results import load_results, render_markdown, render_summary

CHECKOUT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", type=Path, default=CHECKOUT / "benchmarks" / "results", help="The results files' folder.")
    parser.add_argument("--docs", type=Path, default=CHECKOUT / "docs", help="Where results.md and results-all.md are written.")
    args = parser.parse_args(argv)
    try:
        results = load_results(args.results)
    except ValueError as e:
        sys.exit(f"error: {e}")
    if not results:
        sys.exit(f"error: {args.results}: no results files (*.json); the tables would be empty")
    if not args.docs.is_dir():
        sys.exit(f"error: --docs {args.docs}: not a folder")
    for out, text in ((args.docs / "results.md", render_summary(results)), (args.docs / "results-all.md", render_markdown(results))):
        out.write_text(text)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
