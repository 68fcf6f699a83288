"""Gossiping SGD, push variant (Jin et al. 2016, arXiv 1611.04581).

With probability p worker i picks a peer j uniformly and sends it x_i. The receiver averages
what arrived with its own parameters after its step:

    x_j <- x_j - m_i * (x_j - x_i) / 2

i does not move. A receiver pushed to by several workers applies them in turn.
"""

from __future__ import annotations

import numpy as np

from edgegossip import kernels
from edgegossip.algorithms.elastic_gossip import choose_peers

__all__ = ["choose_peers", "apply"]


def apply(x: np.ndarray, y: np.ndarray, mask: np.ndarray, chunk_elems: int) -> None:
    """Receiver: x -= m * (x - y) / 2, i.e. the average where chunks arrived."""
    kernels.elastic_pull(x, x, y, mask, chunk_elems, 0.5)
