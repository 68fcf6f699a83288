"""Judging an emulated fleet's observed loss against the configured one."""

import math

SIGMAS = 4  # a false failure about once in 16,000 runs


def assert_observed_loss(summary: dict, loss: float) -> None:
    """The summary's observed loss within SIGMAS standard errors of `loss`: each datagram is
    lost on its own, so the observed share is binomial over the datagrams the run numbered
    (the agents' link_expected). A fixed tolerance is wrong at both ends: too tight for a short
    run, too loose for a long one."""
    n = sum(a["link_expected"] for a in summary["agents"])
    assert n > 0, "no datagram was numbered"
    bound = SIGMAS * math.sqrt(loss * (1 - loss) / n)
    assert abs(summary["observed_loss"] - loss) <= bound, (summary["observed_loss"], n, bound)
