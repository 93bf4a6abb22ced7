"""Regenerate docs/results.md (each paper's main rows) and docs/results-all.md (everything) from
benchmarks/results/*.json."""

from pathlib import Path

from turnformer.results import load_results, render_markdown, render_summary

if __name__ == "__main__":
    results = load_results()
    for out, text in ((Path("docs/results.md"), render_summary(results)), (Path("docs/results-all.md"), render_markdown(results))):
        out.write_text(text)
        print(f"wrote {out}")
