"""Queueing models (docs/statistics.md): the formulas (mm1, mmc, mg1, md1, mva), their
fit to measured points (fit), the open- and closed-loop predictions (open_loop,
closed_loop), and `analyze`, which compares them with a run's points."""

from knee.models.analyze import analyze

__all__ = ["analyze"]
