"""The statistics of the results report, in plain Python (no SciPy at run time): Student's t distribution, intervals
on a scale where they stay in the metric's range, paired differences by seed, and Holm's adjustment.

Every metric is analysed on a scale where a t interval is meaningful: losses as they are; perplexity and other
ratios on the log scale (for perplexity that is the loss); shares (accuracy, exact match) on the logit scale, a
share of exactly 0 or 1 counted as `SHARE_FLOOR` from the edge. Intervals are computed there and transformed back,
so they never leave the metric's range; the centre shown is the back-transformed mean (the geometric mean of
perplexities, the share whose logit is the mean logit).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

LEVEL = 0.95
SHARE_FLOOR = 1e-3
"""A share of 0 or 1 is analysed as 0.001 or 0.999 (its logit would be infinite)."""


def _continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz's method)."""
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _continued_fraction(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with `df` degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(probability: float, df: int) -> float:
    """The `probability` quantile of Student's t (0.5 < probability < 1), by bisection on its distribution."""
    if not 0.5 < probability < 1.0:
        raise ValueError(f"`probability` must be between 0.5 and 1, got {probability!r}.")
    low, high = 0.0, 1.0
    while t_two_sided_p(high, df) > 2 * (1 - probability):
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if t_two_sided_p(middle, df) > 2 * (1 - probability):
            low = middle
        else:
            high = middle
    return (low + high) / 2


@dataclass(frozen=True)
class Scale:
    """How a metric is analysed: `kind` is "identity", "log" or "logit"."""

    kind: str

    def forward(self, value: float) -> float:
        if self.kind == "log":
            return math.log(value)
        if self.kind == "logit":
            share = min(max(value, SHARE_FLOOR), 1 - SHARE_FLOOR)
            return math.log(share / (1 - share))
        return value

    def back(self, value: float) -> float:
        if self.kind == "log":
            return math.exp(value)
        if self.kind == "logit":
            return 1 / (1 + math.exp(-value))
        return value


IDENTITY, LOG, LOGIT = Scale("identity"), Scale("log"), Scale("logit")
LOG_METRICS = ("perplexity", "forward_time_ratio")
SHARE_METRICS = (
    "accuracy",
    "token_accuracy",
    "exact_match_trained",
    "exact_match_zero_shot",
    "heads_pruned",
    "gsm8k_exact_match",
    "gsm8k_flexible_exact_match",
)


def scale_of(metric: str) -> Scale:
    """The scale a metric is analysed on: log for perplexity and time ratios, logit for shares, else as it is."""
    if metric in LOG_METRICS:
        return LOG
    if metric in SHARE_METRICS or metric.startswith("validation_") and metric[len("validation_") :] in SHARE_METRICS:
        return LOGIT
    return IDENTITY


@dataclass(frozen=True)
class Interval:
    """A mean and its 95% t interval on the metric's scale, transformed back: `centre`, `low`, `high` (NaN where
    there is one value)."""

    centre: float
    low: float
    high: float
    n: int
    scale: Scale


def interval(values: list[float], scale: Scale = IDENTITY) -> Interval:
    """The mean of `values` on `scale` and its 95% Student's t interval, in the metric's units."""
    if len(set(values)) == 1:  # every seed alike (a share of 0 stays 0, not the floor of the logit scale)
        return (
            Interval(values[0], values[0], values[0], len(values), scale)
            if len(values) > 1
            else Interval(values[0], math.nan, math.nan, 1, scale)
        )
    points = [scale.forward(v) for v in values]
    mean = statistics.fmean(points)
    if len(points) < 2:
        return Interval(scale.back(mean), math.nan, math.nan, len(points), scale)
    half = t_quantile(1 - (1 - LEVEL) / 2, len(points) - 1) * statistics.stdev(points) / math.sqrt(len(points))
    return Interval(scale.back(mean), scale.back(mean - half), scale.back(mean + half), len(points), scale)


@dataclass(frozen=True)
class Paired:
    """The paired difference `a - b` over the seeds both have, on the metric's scale: its mean and 95% t interval
    there (`difference`, `low`, `high`: for the log scale, logs of ratios; for the logit scale, log odds ratios),
    the two-sided p-value of the paired t test, and the seeds."""

    difference: float
    low: float
    high: float
    p: float
    n: int
    scale: Scale


def paired(a: dict, b: dict, scale: Scale = IDENTITY) -> Paired:
    """The paired t comparison of `a` and `b`, each `{seed: value}`, over their common seeds."""
    seeds = sorted(set(a) & set(b))
    differences = [scale.forward(a[s]) - scale.forward(b[s]) for s in seeds]
    if not differences:
        return Paired(math.nan, math.nan, math.nan, math.nan, 0, scale)
    mean = statistics.fmean(differences)
    if len(differences) < 2:
        return Paired(mean, math.nan, math.nan, math.nan, 1, scale)
    spread = statistics.stdev(differences) / math.sqrt(len(differences))
    df = len(differences) - 1
    if spread == 0:
        return Paired(mean, mean, mean, 1.0 if mean == 0 else 0.0, len(differences), scale)
    half = t_quantile(1 - (1 - LEVEL) / 2, df) * spread
    return Paired(mean, mean - half, mean + half, t_two_sided_p(mean / spread, df), len(differences), scale)


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjustment of `pvalues` (family-wise error), in their order; NaN stays NaN and does not count
    towards the family."""
    known = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    adjusted = [math.nan] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(known):
        running = max(running, min(1.0, (len(known) - rank) * p))
        adjusted[i] = running
    return adjusted
