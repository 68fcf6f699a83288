"""How packets are lost on an emulated link, per link: independently (Bernoulli), in bursts
(Gilbert-Elliott), or as a recorded trace replays them.

Gilbert-Elliott is a two-state Markov chain over a link's packets: in the good state a packet is
lost with probability k (loss_good, 0 by default), in the bad state with probability h
(loss_bad, 1 by default). The chain leaves the bad state with probability r = 1 / burst per
packet, so a stay in it lasts `burst` packets on average, and enters it with probability
p = r * pi_B / (1 - pi_B), where pi_B = (loss - k) / (h - k) is the share of packets sent in the
bad state; the mean loss is then k (1 - pi_B) + h pi_B = loss. With k = 0 and h = 1 a stay in
the bad state is exactly a burst of losses: its lengths are geometric with mean `burst`, and the
runs of arrivals between them geometric with mean (1 - loss) burst / loss. Bernoulli is the case
burst = 1.

A link's pattern is PERIOD outcomes long (True: lost), drawn from a seed of its own and then
repeated: in namespaces nftables replays it in the kernel (`numgen inc` counts the link's
packets; a verdict map drops those whose count falls in a lost run: emulate/netns.py), and the
loopback backend replays the same pattern in the receive path (transport/lossy.py).

A trace is a text file of per-packet outcomes, `1` lost and `0` arrived, in order; whitespace is
ignored and `#` starts a comment to the end of its line. It is replayed from its start, over and
over, on every link (each link its own count).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgegossip.errors import UsageError

KINDS = ("bernoulli", "gilbert-elliott", "trace")
PERIOD = 1 << 17  # outcomes in a generated pattern: a link's packets of a 150 s run, or more
MAX_TRACE = 1 << 22  # outcomes a trace may hold


class LossModelError(UsageError, ValueError):
    """A loss model or trace that cannot be used (exit 2)."""


@dataclass(frozen=True)
class LossModel:
    kind: str = "bernoulli"
    loss: float = 0.0  # mean loss (bernoulli, gilbert-elliott)
    burst: float = 1.0  # mean stay in the bad state, in packets (gilbert-elliott)
    loss_good: float = 0.0
    loss_bad: float = 1.0
    trace: str = ""  # the trace file (trace)

    def check(self) -> None:
        if self.kind not in KINDS:
            raise LossModelError(f"loss model {self.kind!r}: one of {', '.join(KINDS)}")
        if self.kind == "trace":
            read_trace(self.trace)
            return
        if not 0 <= self.loss <= 1:
            raise LossModelError("loss must be in [0, 1]")
        if self.kind == "gilbert-elliott":
            if self.burst < 1:
                raise LossModelError("--burst: a mean burst of at least 1 packet")
            if not 0 <= self.loss_good <= self.loss <= self.loss_bad <= 1 or (
                self.loss_good == self.loss_bad and self.loss != self.loss_good
            ):
                raise LossModelError(
                    "gilbert-elliott needs loss_good <= loss <= loss_bad, each in [0, 1]"
                )

    @property
    def mean_loss(self) -> float:
        if self.kind == "trace":
            return float(read_trace(self.trace).mean())
        return self.loss

    def pattern(self, seed) -> np.ndarray:
        """One link's outcomes (True: lost), from its own seed; a trace as it is."""
        self.check()
        if self.kind == "trace":
            return read_trace(self.trace)
        rng = np.random.default_rng(seed)
        if self.kind == "bernoulli":
            return rng.random(PERIOD) < self.loss
        return _gilbert_elliott(self, rng)


def _gilbert_elliott(m: LossModel, rng: np.random.Generator) -> np.ndarray:
    k, h = m.loss_good, m.loss_bad
    share_bad = 0.0 if h == k else (m.loss - k) / (h - k)
    if share_bad <= 0:
        return rng.random(PERIOD) < k
    if share_bad >= 1:
        return rng.random(PERIOD) < h
    r = 1.0 / m.burst
    p = min(1.0, r * share_bad / (1 - share_bad))
    bad = np.zeros(PERIOD, bool)
    i, in_bad = 0, rng.random() < share_bad  # start in the stationary distribution
    while i < PERIOD:
        stay = int(rng.geometric(r if in_bad else p))
        if in_bad:
            bad[i : i + stay] = True
        i += stay
        in_bad = not in_bad
    draw = rng.random(PERIOD)
    return np.where(bad, draw < h, draw < k)


def read_trace(path: str | Path) -> np.ndarray:
    """A trace file's outcomes (True: lost); LossModelError for a file that is not one."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise LossModelError(f"--trace {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise LossModelError(f"--trace {path}: not a text file of 0s and 1s") from None
    chars = "".join(line.split("#", 1)[0] for line in text.splitlines())
    chars = "".join(chars.split())
    if not chars or set(chars) - {"0", "1"}:
        raise LossModelError(f"--trace {path}: needs outcomes 0 (arrived) and 1 (lost) only")
    if len(chars) > MAX_TRACE:
        raise LossModelError(f"--trace {path}: more than {MAX_TRACE} outcomes")
    return np.frombuffer(chars.encode(), np.uint8) == ord("1")


def runs(pattern: np.ndarray) -> tuple[int, int]:
    """(packets lost, runs of consecutive losses) in a pattern: their mean burst is the ratio."""
    lost = int(pattern.sum())
    starts = int(np.count_nonzero(pattern[1:] & ~pattern[:-1])) + int(bool(pattern[:1].any()))
    return lost, starts


def write_trace(pattern: np.ndarray, path: Path, header: str) -> None:
    """A trace file: the header as comments, then 100 outcomes a line."""
    bits = "".join("1" if x else "0" for x in pattern)
    body = "\n".join(bits[i : i + 100] for i in range(0, len(bits), 100))
    comments = "".join(f"# {line}\n" for line in header.splitlines())
    path.write_text(comments + body + "\n")
