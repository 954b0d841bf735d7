"""report.md: a results document's numbers as text, section by section, for each tier: the
evaluation (:mod:`.evaluation`, also re-rendered from a stored results.json by
``gnnsched bench resimulate`` and ``accuracy-study``) and the scale tier (:mod:`.scale`)."""

from __future__ import annotations

from gnnsched.evaluation.report.evaluation import render, study_lines, write_report
from gnnsched.evaluation.report.scale import report as scale_report

__all__ = ["render", "scale_report", "study_lines", "write_report"]
