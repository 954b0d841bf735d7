"""The scale model's results in the evaluation's own file: ``gnnsched bench scale-model
--into FILE``.

Each scale-model evaluation (one dataset, its shapes) writes its own ``OUT/results.json``.
The issue's targets are about all of them together (the a-priori error of every run, the
share within 10% over every run), so ``--into FILE`` merges OUT into FILE (normally
``docs/results/results.json``): FILE's ``scale_model`` section lists every merged source
(its folder, command and start) with their configurations and box calibrations, and FILE's
``targets`` list gets the scale model's targets judged over all of them
(:func:`gnnsched.evaluation.judging.scale_model_targets`, against the goals of
``--targets``), replacing the ones merged before.
The sources are re-read from disk on every merge, so re-running one source's command and
merging it again refreshes its runs and every share. A full evaluation that rewrites FILE
carries the section and its targets over (:func:`carry_over`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from gnnsched.evaluation.judging import scale_model_targets
from gnnsched.evaluation.targets import Targets

SECTION = "scale_model"
MARK = "(scale model)"  # every scale-model target's name ends with it


def _source(path: Path) -> dict[str, Any]:
    """A scale-model evaluation's ``results.json`` (``path``: the file or its folder)."""
    f = path / "results.json" if path.is_dir() or path.suffix != ".json" else path
    if not f.is_file():
        raise SystemExit(f"gnnsched bench --into: {f} not found (run that scale-model "
                         "evaluation first: `gnnsched bench scale-model --out FOLDER`)")
    try:
        doc = json.loads(f.read_text())
    except json.JSONDecodeError as exc:
        raise SystemExit(f"gnnsched bench --into: {f}: not JSON ({exc})") from None
    if not (doc.get("settings") or {}).get("scale_model") or not doc.get("box"):
        raise SystemExit(f"gnnsched bench --into: {f} is not a scale-model evaluation "
                         "(settings.scale_model false or no box calibration): only "
                         "`gnnsched bench scale-model` results merge")
    return doc


def section(sources: list[str], base: Path, before: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    """The ``scale_model`` section of the sources (folders relative to ``base``, the merged
    file's folder, in merge order): a later source's configuration replaces an earlier one's
    of the same shape and dataset. A source no longer on disk keeps what ``before`` (the
    section merged last time) holds of it, with a warning."""
    old = {s["dir"]: s for s in (before or {}).get("sources", [])}
    old_configs = {f"{c['shape']}/{c['dataset']}": c for c in (before or {}).get("configs", [])}
    configs: dict[tuple[str, str], dict[str, Any]] = {}
    box: dict[str, Any] = {}
    listed: list[dict[str, Any]] = []
    for src in sources:
        if src in old and not (base / src / "results.json").is_file():
            print(f"gnnsched bench --into: warning: {base / src}/results.json is gone; "
                  "keeping its runs as merged before", file=sys.stderr)
            listed.append(old[src])
            for name in old[src]["configs"]:
                if name in old_configs:
                    c = old_configs[name]
                    configs[(c["shape"], c["dataset"])] = c
            box.update(old[src].get("box") or {})
            continue
        doc = _source(base / src)
        listed.append({"dir": src, "command": doc.get("command"),
                       "started": doc.get("started"), "resimulated": doc.get("resimulated"),
                       "configs": [f"{c['shape']}/{c['dataset']}" for c in doc["configs"]],
                       "box": doc["box"]})
        for c in doc["configs"]:
            configs[(c["shape"], c["dataset"])] = c
        box.update(doc["box"])
    return {"sources": listed, "box": box, "configs": list(configs.values())}


def judged(doc: dict[str, Any], goals: Targets) -> list[dict[str, Any]]:
    """``doc``'s targets with the scale model's judged again over its merged section, against
    ``goals`` (none given: the scale model's are dropped, the others kept)."""
    keep = [t for t in doc.get("targets") or [] if not str(t.get("target", "")).endswith(MARK)]
    sm = doc.get(SECTION)
    return keep + (scale_model_targets(sm["configs"], goals) if sm else [])


def merge(into: Path, out: Path, goals: Targets) -> dict[str, Any]:
    """Merge the scale-model evaluation in folder ``out`` into the results file ``into``
    (made if missing), beside the sources merged there before (a source merged again keeps
    its place, so the file changes only where its runs did); returns the written doc.
    Sources are kept as paths relative to ``into``'s folder, so the file merges again from
    any working directory and in any clone."""
    doc: dict[str, Any] = {}
    if into.is_file():
        try:
            doc = json.loads(into.read_text())
        except json.JSONDecodeError as exc:
            raise SystemExit(f"gnnsched bench --into: {into}: not JSON ({exc})") from None
    base = into.resolve().parent
    me = os.path.relpath(out.resolve(), base)
    before = doc.get(SECTION) or {}
    sources = [s["dir"] for s in before.get("sources", [])]  # merged again: in its place
    sources += [] if me in sources else [me]
    doc[SECTION] = section(sources, base, before)
    doc["targets"] = judged(doc, goals)
    into.parent.mkdir(parents=True, exist_ok=True)
    into.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def carry_over(old: Path, doc: dict[str, Any], goals: Targets) -> None:
    """Keep the ``scale_model`` section of the results file ``old`` (about to be rewritten
    by a full evaluation) in ``doc``, with its targets judged again against ``goals``."""
    if not old.is_file() or SECTION in doc or (doc.get("settings") or {}).get("scale_model"):
        return  # a scale-model evaluation judges its own runs: nothing merged to carry
    try:
        prev = json.loads(old.read_text())
    except json.JSONDecodeError:
        return
    if prev.get(SECTION):
        doc[SECTION] = prev[SECTION]
        doc["targets"] = judged(doc, goals)
