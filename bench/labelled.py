"""One JSON file of labelled runs (``{"about", "runs": [...]}``), shared by the bench scripts
that keep a "before" beside an "after": a run replaces the earlier one of its label."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_labelled(out: str | Path, about: str, entry: dict[str, Any]) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = json.loads(out.read_text()) if out.is_file() else {}
    runs = [r for r in doc.get("runs", []) if r.get("label") != entry["label"]]
    out.write_text(json.dumps({"about": about, "runs": [*runs, entry]}, indent=1) + "\n")
    print(f"wrote {out} ({entry['label']})")
    return out
