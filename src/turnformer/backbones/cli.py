"""``turnformer backbone ...`` commands (mounted by the main CLI)."""

from __future__ import annotations

import json
import math

import typer

TOLERANCE = 1e-5  # `turnformer.backbones.check.DEFAULT_TOLERANCE`, written out: that module loads torch (tested equal)

backbone_app = typer.Typer(name="backbone", help="Inspect and verify encoder backbones.", no_args_is_help=True)


@backbone_app.callback()
def _group() -> None:
    """Inspect and verify encoder backbones."""
    # A callback keeps `check` a sub-command even while it is the only one.


@backbone_app.command("check")
def check(
    name: str = typer.Argument(..., help="Backbone name (e.g. all-MiniLM-L6-v2), local folder or Hub id."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    tolerance: float = typer.Option(TOLERANCE, help="Largest accepted max |ours - transformers|."),
) -> None:
    """Compare our encoder with transformers on the same weights. Exit 1 above the tolerance, 2 if it cannot load."""
    if not (math.isfinite(tolerance) and tolerance > 0):
        typer.echo(f"error: --tolerance {tolerance}: give a number above 0", err=True)
        raise typer.Exit(2)
    if not name.strip():
        typer.echo(f"error: backbone {name!r}: empty; give a name (all-MiniLM-L6-v2), a local folder or a Hub id", err=True)
        raise typer.Exit(2)
    from turnformer.backbones import check as checking  # torch and transformers load here, when the command runs
    from turnformer.backbones.loading import BackboneLoadError

    try:
        result = checking.check_backbone(name, tolerance=tolerance)
    except BackboneLoadError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(result))
    else:
        verdict = f"OK, below {tolerance:.0e}" if result["ok"] else f"FAIL, not below {tolerance:.0e}"
        typer.echo(
            f"{name}: max |ours - transformers| = {result['max_abs_diff']:.1e} "
            f"over {result['tokens']} tokens ({verdict})"
        )
    if not result["ok"]:
        raise typer.Exit(1)
