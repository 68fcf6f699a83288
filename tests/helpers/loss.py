"""Judging an emulated fleet's observed loss against the configured one."""

import math

SIGMAS = 4  # a false failure about once in 16,000 runs


def assert_observed_loss(summary: dict, loss: float, burst: float = 1.0) -> None:
    """The summary's observed loss within SIGMAS standard errors of `loss`: each datagram is
    lost on its own, so the observed share is binomial over the datagrams the run numbered
    (the agents' link_expected). A fixed tolerance is wrong at both ends: too tight for a short
    run, too loose for a long one. Lost in bursts of mean `burst` (a two-state chain whose
    outcomes are correlated by l = 1 - 1/burst - 1/gap, gap = burst (1 - loss) / loss), the
    variance of the share grows by (1 + l) / (1 - l)."""
    n = sum(a["link_expected"] for a in summary["agents"])
    assert n > 0, "no datagram was numbered"
    lag = 1 - 1 / burst - loss / (burst * (1 - loss)) if burst > 1 else 0.0
    bound = SIGMAS * math.sqrt(loss * (1 - loss) / n * (1 + lag) / (1 - lag))
    assert abs(summary["observed_loss"] - loss) <= bound, (summary["observed_loss"], n, bound)
