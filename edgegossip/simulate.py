"""W workers in one process, with the algorithm modules and kernels the agent uses, and every
datagram (one chunk of a message) lost independently with probability `loss`.

One step: every worker draws a batch of batch/W examples from its own shard and computes its
gradient; communicating workers snapshot their pre-step parameters; every worker takes its
optimizer step (all-reduce first averages the gradients); then the algorithm's exchanges are
applied with masks drawn from the loss model. With a compressed payload (dataplane/payload.py)
a receiver gets the sender's parameters encoded and decoded again, and chunks hold as many
elements as fit a datagram in that encoding. Bytes are counted as datagrams on the wire
(encoded payload plus framing) for the UDP algorithms and as a float32 ring all-reduce for the
baseline (its transport is reliable TCP; the payload setting does not apply to it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgegossip import algorithms
from edgegossip import config as agent_config
from edgegossip.data import device, mnist, own, partition
from edgegossip.data.mnist import Mnist
from edgegossip.dataplane import payload, wire
from edgegossip.dataplane.chunking import ChunkPlan
from edgegossip.models import make_model, resolved
from edgegossip.models.optim import NesterovSGD
from edgegossip.run import SIMULATED, Network, Run


@dataclass(frozen=True)
class Simulation(Run):
    """A run (run.Run) as simulate makes it: its nodes as workers in this process, stepping in
    lock-step, `batch` examples a step summed over them (the reference's, not an agent's batch),
    and `closing` rounds of the closing phase after training (algorithms/base.py). Its network's
    rates, slow links and schedule are not modelled, nor its devices."""

    epochs: float = 1.0  # passes over each worker's shard
    batch: int = 128
    closing: int = 0
    # gossip: steps from an exchange's snapshots to its merge (algorithms/base.py), 0 at once
    merge_delay: int = 0

    def check(self) -> None:
        super().check()
        for name in self.settings:
            if name not in SIMULATED:
                raise ValueError(f"{name}: a setting simulate does not model")
        net = self.network
        if net.rate or net.slow or net.schedule or net.medium != "switch":
            raise ValueError("simulate models each link's losses, not rates, media or schedules")
        if self.devices or self.duration_s:
            raise ValueError("simulate runs epochs in lock-step: no devices' limits, no duration")
        resolved(self.setting("model"))  # a name or a compiled model's folder, else ValueError
        if self.nodes < 1 or (self.nodes < 2 and algorithms.get(self.algorithm).datagrams):
            raise ValueError(f"workers must be at least 2 for {self.algorithm}")
        if self.batch < self.nodes:
            raise ValueError("batch must be at least the number of workers")
        if self.epochs <= 0:
            raise ValueError("epochs must be positive")
        gossip = issubclass(algorithms.get(self.algorithm), algorithms.base.GossipAlgorithm)
        if self.merge_delay < 0 or (self.merge_delay and not gossip):
            raise ValueError(f"--merge-delay: steps, for a gossip algorithm, not {self.algorithm}")
        problem = agent_config.closing_problem(self.algorithm, bool(self.closing))
        if problem:
            raise ValueError(f"--closing: {problem}")
        payload.codec(self.setting("payload")).plan(1, self.setting("chunk_bytes"))


class _Net:
    """The loss model and the traffic counters."""

    def __init__(
        self,
        plan: ChunkPlan,
        network: Network,
        workers: int,
        rng: np.random.Generator,
        codec: payload.Codec,
        seed: int = 0,
    ):
        self.plan, self.loss, self.rng, self.codec = plan, network.loss, rng, codec
        self.overhead = wire.framing_overhead()
        # independent loss is drawn as datagrams go; any other model is each sender's own
        # pattern (transport/lossmodel.py), replayed in the order its datagrams go out:
        # [its pattern, datagrams sent so far]
        self.bursts: list[list] = []
        if network.loss_model != "bernoulli":
            links = network.links()
            self.bursts = [[links.pattern([seed, 30_000, w]), 0] for w in range(workers)]
        self.bytes_sent = np.zeros(workers)
        self.datagrams_sent = 0
        self.datagrams_lost = 0

    def send(self, sender: int, chunks: range) -> np.ndarray:
        """Mask over the whole model's chunks: 1 where a datagram of `chunks` arrived."""
        n = len(chunks)
        mask = np.zeros(self.plan.n_chunks, np.uint8)
        if self.bursts:
            arrived = ~self._burst(sender, n)
        else:
            arrived = self.rng.random(n) >= self.loss if self.loss else np.ones(n, bool)
        mask[chunks.start : chunks.stop] = arrived
        a, b = self.plan.elem_range(chunks)
        self.bytes_sent[sender] += (
            self.codec.encoded_bytes(b - a, self.plan.chunk_elems) + n * self.overhead
        )
        self.datagrams_sent += n
        self.datagrams_lost += n - int(arrived.sum())
        return mask

    def _burst(self, sender: int, n: int) -> np.ndarray:
        pattern, pos = self.bursts[sender]
        self.bursts[sender][1] = pos + n
        return np.take(pattern, np.arange(pos, pos + n), mode="wrap")

    def request(self, sender: int) -> None:
        """A payload-less REQUEST datagram (Gossiping SGD pull); its loss is not modelled."""
        self.bytes_sent[sender] += self.overhead
        self.datagrams_sent += 1


class _Feed:
    """One worker's batches: its shard in a fresh random order each pass, the tail that does
    not fill a batch dropped (as a DataLoader with drop_last does)."""

    def __init__(self, shard: np.ndarray, size: int, rng: np.random.Generator):
        if len(shard) == 0:
            raise ValueError("a worker's shard is empty: use fewer workers or another partition")
        self.shard, self.size, self.rng = shard, size, rng
        self.order, self.pos = rng.permutation(shard), 0

    def next(self) -> np.ndarray:
        if len(self.shard) < self.size:  # a shard smaller than one batch: draw with replacement
            return self.rng.choice(self.shard, self.size)
        if self.pos + self.size > len(self.order):
            self.order, self.pos = self.rng.permutation(self.shard), 0
        self.pos += self.size
        return self.order[self.pos - self.size : self.pos]


def load(cfg: Simulation) -> Mnist | own.Pool:
    """The run's data, checked against its model and partition: a named data set (an mse
    model's targets its own pixels), or the user's file or folder of one file per worker.
    ValueError (device.DataMismatch among them) for what does not fit; DataError for a data
    set not fetched."""
    model = make_model(cfg.setting("model"), cfg.setting("seed"))
    mse = model.loss == "mse"
    if own.named(cfg.data):
        data: Mnist | own.Pool = mnist.load(name=cfg.data)
        if mse:  # an autoencoder of the images: the labels are not its targets
            d = data
            data = own.Pool(d.x_train, None, d.x_val, d.x_val, d.x_test, d.x_test, None)
        rows = device.DeviceData(data.x_train, data.y_train, data.x_val, data.y_val)
    else:
        fraction = agent_config.default("eval_fraction")
        data, rows = own.pooled(cfg.data, cfg.nodes, cfg.setting("seed"), fraction, targets=mse)
    ids = np.dtype(model.input_dtype).kind == "i"
    inputs, classes = model.shapes(784, 10)
    device.check(rows, inputs, classes, model.input_shape, model.loss, ids)
    kind = cfg.setting("partition")
    if kind != "iid" and data.cut is not None:
        raise ValueError(f"--partition {kind}: --data {cfg.data} holds a file per worker")
    if kind != "iid" and mse:
        raise ValueError(f"--partition {kind} cuts by class; an mse model has none")
    return data


def _shards(cfg: Simulation, data: Mnist | own.Pool) -> list[np.ndarray]:
    if data.cut is not None:
        return data.cut
    kind, seed = cfg.setting("partition"), cfg.setting("seed")
    # iid cuts by count alone: a data set without labels (an mse model's) has rows to count
    labels = np.zeros(len(data.x_train), np.int64) if data.y_train is None else data.y_train
    beta, k = cfg.setting("beta"), cfg.setting("classes_per_worker")
    return partition.cut(kind, labels, cfg.nodes, seed, beta, k)


def _world(cfg: Simulation, model) -> tuple:
    """The W workers (one shared initialisation, as in the reference runs), the lossy network
    between them, and each worker's random stream: (world, net, rngs)."""
    W = cfg.nodes
    init = model.init(cfg.setting("seed"))
    codec = payload.codec(cfg.setting("payload"), reference=init.copy())
    plan = codec.plan(model.n_params, cfg.setting("chunk_bytes"))
    wire_copy = payload.Roundtrip(codec, model.n_params, plan.chunk_elems)
    xs = [init.copy() for _ in range(W)]
    opts = [
        NesterovSGD(model.n_params, cfg.setting("lr"), cfg.setting("momentum")) for _ in range(W)
    ]
    grads = [np.zeros(model.n_params, np.float32) for _ in range(W)]
    pres = [np.empty(model.n_params, np.float32) for _ in range(W)]
    # what a peer receives of pres[w]: pres[w] itself, or its encoded and decoded copy
    sent = (
        pres
        if codec.name == "float32"
        else [np.empty(model.n_params, np.float32) for _ in range(W)]
    )
    avg_grad = np.zeros(model.n_params, np.float32)
    rngs = [np.random.default_rng([cfg.setting("seed"), w]) for w in range(W)]
    net = _Net(
        plan,
        cfg.network,
        W,
        np.random.default_rng([cfg.setting("seed"), 10_000]),
        codec,
        cfg.setting("seed"),
    )
    world = algorithms.World(
        xs,
        opts,
        grads,
        pres,
        sent,
        net,
        np.random.default_rng([cfg.setting("seed"), 20_000]),
        plan,
        wire_copy,
        cfg.setting("p"),
        cfg.setting("alpha"),
        avg_grad,
        weights=[1.0] * W,
        delay=cfg.merge_delay,
        slices=cfg.setting("slices"),
    )
    return world, net, rngs


# the agent settings a result row repeats
_ROW_SETTINGS = ("p", "alpha", "seed", "partition", "payload")


def _described(cfg: Simulation) -> dict[str, Any]:
    """What a result row says of its run; its size as simulate's rows have always named it."""
    return {
        "algorithm": cfg.algorithm,
        "model": cfg.model,
        "data": cfg.data,
        "workers": cfg.nodes,
        **{k: cfg.setting(k) for k in _ROW_SETTINGS},
    }


def _result(
    cfg: Simulation, model, world, data: Mnist | own.Pool, steps: int, epochs: float
) -> dict:
    xs, net, algorithm = world.xs, world.net, algorithms.get(cfg.algorithm)
    avg = np.asarray(np.mean(xs, axis=0, dtype=np.float64)).astype(np.float32)
    return {
        **_described(cfg),
        **cfg.network.described(),
        **{
            k: cfg.setting(k)
            for k in ("beta", "classes_per_worker")
            if agent_config.acts(k, cfg.setting)
        },
        "epochs": round(epochs, 4),
        "steps": steps,
        **_scores(model, xs[0], avg, data),
        "bytes_sent_per_worker": algorithm.sim_bytes_per_worker(world),
        "closing": cfg.closing,
        **(
            {"merge_delay": cfg.merge_delay, "exchanges_lapsed": world.lapsed}
            if cfg.merge_delay
            else {}
        ),
        # how far the workers are from agreeing: the farthest one's distance from the average,
        # relative to the average's norm (0: every worker holds the average model)
        "spread": round(
            max(float(np.linalg.norm(x - avg)) for x in xs)
            / max(float(np.linalg.norm(avg)), 1e-12),
            6,
        ),
        "datagrams_sent": net.datagrams_sent,
        "datagrams_lost": net.datagrams_lost,
    }


def _scores(model, worker0: np.ndarray, avg: np.ndarray, data: Mnist | own.Pool) -> dict:
    """Test scores of worker 0's model and the average, and worker 0's on the validation rows:
    acc_* for a classifier; for an mse model acc_* null and mse_* (per element)."""
    key = "mse" if model.loss == "mse" else "acc"
    pick = "eval_mse" if key == "mse" else "accuracy"
    row = {f"{k}_{w}": None for k in ("acc", key) for w in ("worker0", "average")}
    row.update({"val_acc_worker0": None, f"val_{key}_worker0": None})
    row[f"{key}_worker0"] = model.evaluate(worker0, data.x_test, data.y_test)[pick]
    row[f"{key}_average"] = model.evaluate(avg, data.x_test, data.y_test)[pick]
    if len(data.y_val):
        row[f"val_{key}_worker0"] = model.evaluate(worker0, data.x_val, data.y_val)[pick]
    return row


def simulate(
    cfg: Simulation,
    data: Mnist | own.Pool,
    progress: Callable[[int, int, dict], None] | None = None,
    eval_every: float | None = None,
    on_eval: Callable[[dict], None] | None = None,
) -> dict:
    """Run cfg and return its result row. With eval_every (epochs) and on_eval, also hand over a
    complete row every eval_every epochs: the learning rate is constant, so the row at epoch E of
    a longer run is the row a run of E epochs would give, and a long run killed early keeps them."""
    cfg.check()
    W = cfg.nodes
    model = make_model(cfg.setting("model"), cfg.setting("seed"))
    world, net, rngs = _world(cfg, model)
    algorithm = algorithms.get(cfg.algorithm)
    shards = _shards(cfg, data)
    per_worker = cfg.batch // W
    # An epoch is one pass over the whole training set, summed over workers; with unequal
    # (non-IID) shards a small shard is cycled more often, as a device with little data would.
    steps_per_epoch = max(1, sum(len(s) for s in shards) // (per_worker * W))
    total = max(1, int(round(cfg.epochs * steps_per_epoch)))
    feeds = [_Feed(s, per_worker, rng) for s, rng in zip(shards, rngs)]
    losses = np.zeros(W)
    t0 = time.perf_counter()
    eval_steps = max(1, int(round(eval_every * steps_per_epoch))) if eval_every else 0

    def result(steps: int) -> dict:
        row = _result(cfg, model, world, data, steps, steps / steps_per_epoch)
        row["elapsed_s"] = round(time.perf_counter() - t0, 1)
        return {**row, **algorithm.sim_report(world)}

    for step in range(total):
        for w in range(W):
            xb, yb = data.batch(feeds[w].next())
            losses[w] = model.loss_grad(world.xs[w], world.grads[w], xb, yb, rngs[w])
        algorithm.sim_step(world)
        if progress is not None:
            info = {"loss": float(losses.mean()), "epoch": (step + 1) / steps_per_epoch}
            progress(step + 1, total, info)
        if on_eval is not None and eval_steps and (step + 1) % eval_steps == 0 and step + 1 < total:
            on_eval(result(step + 1))

    if cfg.closing:
        world.close()
    for _ in range(cfg.closing):
        algorithm.sim_step(world)
    return result(total)
