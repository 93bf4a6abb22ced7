"""Regenerate docs/results.md from benchmarks/results/*.json."""

from pathlib import Path

from turnformer.results import load_results, render_markdown

if __name__ == "__main__":
    out = Path("docs/results.md")
    out.write_text(render_markdown(load_results()))
    print(f"wrote {out}")
