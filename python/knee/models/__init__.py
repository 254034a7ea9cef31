"""Queueing models (docs/statistics.md): the formulas (mm1, mmc, mg1, md1, mva), their
fit to a run's stable points (fit), the open- and closed-loop predictions and the choice
of the primary model (open_loop, closed_loop), the knee measured from the data (measured),
and `analyze`, which compares them with a run's points."""

from knee.models.analyze import analyze

__all__ = ["analyze"]
