import numpy as np
import pytest

from edgegossip.data import partition


def test_iid_disjoint_equal_deterministic():
    shards = partition.iid(51_200, 4, seed=3)
    assert [len(s) for s in shards] == [12_800] * 4
    assert len(np.unique(np.concatenate(shards))) == 51_200
    assert all((a == b).all() for a, b in zip(shards, partition.iid(51_200, 4, seed=3)))
    assert not (shards[0] == partition.iid(51_200, 4, seed=4)[0]).all()


def test_dirichlet_small_beta_is_skewed():
    labels = np.repeat(np.arange(10), 500)
    skewed = partition.dirichlet(labels, 5, beta=0.05, seed=0)
    even = partition.dirichlet(labels, 5, beta=1000, seed=0)
    assert sum(len(s) for s in skewed) == 5000
    assert len(np.unique(np.concatenate(skewed))) == 5000
    classes_skewed = np.mean([len(np.unique(labels[s])) for s in skewed])
    classes_even = np.mean([len(np.unique(labels[s])) for s in even])
    assert classes_skewed < 6 and classes_even == 10


def test_k_classes_per_worker():
    labels = np.repeat(np.arange(10), 100)
    shards = partition.classes(labels, 5, k=2, seed=0)
    assert all(len(np.unique(labels[s])) == 2 for s in shards)
    assert len(np.unique(np.concatenate(shards))) == 1000
    with pytest.raises(ValueError):
        partition.classes(labels, 5, k=11)
