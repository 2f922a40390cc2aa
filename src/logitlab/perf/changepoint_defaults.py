"""Defaults of the change-point detection (:mod:`logitlab.perf.changepoint`), with their sources.

Standard library only: ``logitlab history show --help`` shows them without
loading numpy and scipy.
"""

from __future__ import annotations

__all__ = ["DEFAULT_MAX_PVALUE", "DEFAULT_MIN_SIZE", "DEFAULT_PENALTY", "DEFAULT_OUTLIER_SIGMAS"]

#: Significance level of the merge step's Welch t test (Apache Otava's default).
DEFAULT_MAX_PVALUE = 0.001
#: Fewest builds in a segment: a level needs this many builds to be reported.
DEFAULT_MIN_SIZE = 3
#: Multiplier of the BIC penalty ``sigma**2 * ln(n)`` per change point
#: (2: the Schwarz criterion for a change of mean, Killick et al. 2012).
DEFAULT_PENALTY = 2.0
#: A value this many noise sds from its neighbourhood's median is an outlier.
DEFAULT_OUTLIER_SIGMAS = 5.0
