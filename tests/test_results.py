"""Results files and the generated tables of docs/results.md."""

from __future__ import annotations

import json

from turnformer.results import load_results, make_result, render_markdown, write_result


def test_a_result_is_written_atomically_and_tabled_beside_the_paper(tmp_path):
    accuracy = make_result("acts-x", task="dialogue-act", dataset="dailydialog", split="test", model="lc-attention",
                           metric="accuracy", scores=[83.98, 83.40, 83.73], seeds=[1, 2, 3], paper=85.81)
    recall = make_result("sel-x", task="response-selection", dataset="mutual", split="dev", model="mdfn",
                         metric="r4_at_1", scores=[0.609, 0.613, 0.617], seeds=[1, 2, 3], paper=0.923, extra={"note": "n"})
    for record in (accuracy, recall):
        write_result(record, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["acts-x.json", "sel-x.json"]   # no temporary left behind
    loaded = load_results(tmp_path)
    assert loaded[0]["scores"] == [83.98, 83.40, 83.73] and json.loads((tmp_path / "acts-x.json").read_text())["commit"]
    table = render_markdown(loaded)
    assert "| accuracy | 83.70 ± 0.29 | 85.81 | 3 |" in table      # the std to the mean's precision
    assert "| r4_at_1 | 0.613 ± 0.004 | 0.923 | 3 |" in table
    assert table.index("## dialogue-act") < table.index("## response-selection") and "- `sel-x`: note = n" in table
    assert "- `acts-x`" not in table   # no extra (or only lists and tables): no empty line for it
