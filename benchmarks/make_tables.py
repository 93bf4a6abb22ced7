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
    try:
        tables = {"results.md": render_summary(results), "results-all.md": render_markdown(results)}
    except Exception as e:  # an entry the files' checks do not cover (a machine line, a grid cell): find its file
        culprit = next((r["experiment"] for r in results if not renders(r)), None)
        where = args.results / f"{culprit}.json" if culprit else args.results
        sys.exit(f"error: {where}: cannot be tabled ({type(e).__name__}: {e})")
    for name, text in tables.items():
        (args.docs / name).write_text(text)
        print(f"wrote {args.docs / name}")


def renders(record: dict) -> bool:
    """Whether one results file alone makes its tables."""
    try:
        render_summary([record]), render_markdown([record])
    except Exception:  # whatever it is, the file is the one at fault
        return False
    return True


if __name__ == "__main__":
    main()
