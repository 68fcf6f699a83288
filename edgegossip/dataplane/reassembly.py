"""Reassembly: the receive buffers of each (sender, message type), filled chunk by chunk with one
mask byte per chunk, and handed to the agent when complete or settled. Written by the receive
thread (file()), read by the agent's (events, ready, collect, borrow); one condition guards both.
Slot buffers are allocated once per (sender, message type), or lent from a shared pool; the hot
path allocates no payload-sized memory."""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from dataclasses import dataclass

import numpy as np

from edgegossip import kernels
from edgegossip.dataplane import wire
from edgegossip.dataplane.chunking import ChunkPlan
from edgegossip.dataplane.replay import PeerLink, round_limit


@dataclass
class Event:
    """First datagram of a new round from a sender: lets the agent answer exchanges."""

    sender: int
    msg_type: int
    round: int
    flags: int
    block: int
    weight: int = 0  # push-sum running sum of the link, in counts (gossip-push)
    session: int = 0  # the sender's session: running sums count within one


class Round:
    """One round's receive buffer and mask. The buffer is the round's own (allocated lazily:
    untouched pages cost no memory), or, with a shared pool, lent while the round is filled and
    until the agent gives it back."""

    def __init__(self, plan: ChunkPlan, own_buffer: bool = True):
        self.buf: np.ndarray | None = None
        self.bytes: np.ndarray | None = None
        if own_buffer:
            self.attach(np.zeros(plan.n_params, dtype=np.float32))
        self.mask = np.zeros(plan.n_chunks, dtype=np.uint8)
        self.round = -1
        self.received = 0
        self.expected = 0
        self.updated = 0.0
        self.collected = False  # the agent has taken what arrived
        self.borrowed = False  # the agent is reading buf in place

    def attach(self, buf: np.ndarray) -> None:
        self.buf, self.bytes = buf, buf.view(np.uint8)

    def detach(self) -> np.ndarray:
        buf, self.buf, self.bytes = self.buf, None, None
        assert buf is not None, "detached twice"
        return buf


class BufferPool:
    """A fixed number of model-sized receive buffers shared by every sender: memory for the
    exchanges in flight, not for every peer. Made on first use."""

    def __init__(self, n_params: int, size: int):
        self.n_params, self.size = n_params, size
        self.free: list[np.ndarray] = []
        self.made = 0

    def take(self) -> np.ndarray | None:
        if self.free:
            return self.free.pop()
        if self.made < self.size:
            self.made += 1
            return np.zeros(self.n_params, dtype=np.float32)
        return None

    def give(self, buf: np.ndarray) -> None:
        self.free.append(buf)


class Slot:
    """Receive buffers of one (sender, message type): the round being filled, and the round
    before it kept intact, so a peer that starts its next round before we collected the
    previous one does not overwrite it. The second buffer is only written (and so only becomes
    resident memory) when that happens: a collected round's buffer is reused."""

    def __init__(self, plan: ChunkPlan, own_buffers: bool = True):
        self.current = Round(plan, own_buffers)
        self.previous = Round(plan, own_buffers)

    def upcoming(self, restart: bool = False) -> Round:
        """The Round that advance() will fill next: the current one if it was collected (or
        holds nothing, as after the sender restarted), else the one before it."""
        if restart or self.current.collected or self.current.round < 0:
            return self.current
        return self.previous

    def advance(self, round: int, expected: int) -> Round:
        if self.upcoming() is self.previous:
            self.current, self.previous = self.previous, self.current
        cur = self.current
        cur.collected = False
        cur.mask[:] = 0
        cur.round = round
        cur.received = 0
        cur.expected = expected
        return cur

    def settled(self, round: int, settle: float, now: float) -> bool:
        """Round `round` will get no more chunks worth waiting for: it is complete, a later
        round of this sender has begun, or (settle > 0) none of its datagrams came for settle
        seconds after the first. False while it is not here at all."""
        found = self.find(round)
        if found is None:
            return False
        return (
            found.received >= found.expected
            or self.current.round > round
            or bool(settle and found.received and now - found.updated > settle)
        )

    def find(self, round: int) -> Round | None:
        if self.current.round == round:
            return self.current
        if self.previous.round == round:
            return self.previous
        return None


class Reassembly:
    def __init__(
        self,
        plan: ChunkPlan,
        rps_blocks: int = 0,
        receive_buffers: int = 0,
        stale_s: float = 10.0,
        max_events: int = 1024,
        slices: int = 1,
    ):
        """receive_buffers: 0 gives every (sender, message type) buffers of its own; N > 0 shares
        N among all senders, each holding at most its share (_victim): a round that finds none
        free takes the buffer of a round nobody collected for stale_s seconds, else its own
        sender's older round's, else that of a sender holding more than one; failing all
        three it is dropped as `no_buffer`."""
        self.plan = plan
        self.rps_blocks = rps_blocks
        self.slices = slices  # a PARAMS round holds one slice of the model (train.slices)
        self.pool = BufferPool(plan.n_params, receive_buffers) if receive_buffers else None
        self.stale_s = stale_s
        self.slots: dict[tuple[int, int], Slot] = {}
        self._events: deque[Event] = deque(maxlen=max_events)
        self.cond = threading.Condition()
        self.fast_target: Round | None = None  # the Round the compiled fast path points at

    # -- receive thread ------------------------------------------------------------------------
    def restarted(self, sender: int) -> None:
        """The sender restarted: its rounds count from 1 again."""
        with self.cond:
            for (s, _), slot in self.slots.items():
                if s == sender:
                    slot.current.round = slot.previous.round = -1

    def file(
        self, h: wire.Header, payload: memoryview, link: PeerLink, now: float, commit
    ) -> str | None:
        """Put an admitted chunk in its round's buffer, else the drop reason; commit() records
        the datagram in its link once nothing can refuse it any more."""
        new_session = h.session != link.session
        with self.cond:
            key = (h.sender, h.msg_type)
            slot = self.slots.get(key)
            if slot is None:
                slot = self.slots[key] = Slot(self.plan, self.pool is None)
            cur = slot.current
            current_round = -1 if new_session else cur.round
            opens = h.round > current_round
            if h.round < current_round:
                if h.round != slot.previous.round:
                    return "old_round"
                cur = slot.previous  # late chunk of the round before: still useful
            elif opens and h.round > round_limit(current_round, link, now):
                return "round_jump"
            target = slot.upcoming(new_session) if opens else cur
            if target.buf is None:
                if not opens and target.collected:
                    return "collected"  # its reader has merged it and moved on
                if not self._lend(target, h.sender, now):
                    return "no_buffer"
            # accepted whole from here on: only now may it move the link's replay window
            commit()
            if opens:
                cur = slot.advance(h.round, self._expected_chunks(h))
                assert cur is target
                self.event(h)
            fresh = not cur.mask[h.chunk_index]
            kernels.scatter_chunk(cur.bytes, cur.mask, payload, h.byte_offset, h.chunk_index)
            cur.received += fresh
            cur.updated = now
            if cur.received >= cur.expected:
                self.cond.notify_all()
        return None

    def steady(
        self, slot: Slot, round: int, link: PeerLink, now: float, sender: int
    ) -> tuple[Round | None, str | None]:
        """What file() would do with each datagram of `round` from slot's sender in the
        link's current session, while it changes nothing but that round's buffer: (the Round
        they fill, None), or (None, the reason each is dropped: collected, no_buffer). (None,
        None) when the next one does more (opens the round, lends it a buffer, or is refused
        for its round number): file() takes that one. Under self.cond."""
        cur = slot.current
        if round == cur.round:
            target = cur
        elif round < cur.round:
            if round != slot.previous.round:
                return None, None  # old_round
            target = slot.previous
        elif round > round_limit(cur.round, link, now):
            return None, None  # round_jump
        else:  # it would open the round: only a refusal stays the same
            target = slot.upcoming()
            if target.buf is not None or self._can_lend(target, sender, now):
                return None, None
            return None, "no_buffer"
        if target.buf is not None:
            return target, None
        if target.collected:
            return None, "collected"
        return (None, None) if self._can_lend(target, sender, now) else (None, "no_buffer")

    def _victim(self, r: Round, sender: int, now: float) -> Round | None:
        """The buffer _lend() takes from another round for sender's round r when none is free.
        Per-sender fairness: whatever one sender sends on its own link, it holds at most its
        share of the pool, so it cannot keep another sender's rounds out for longer than a
        round is kept uncollected (stale_s, the exchange deadline). In order:
        1. the oldest round that was collected or that nobody collected for stale_s;
        2. the oldest other round of sender itself (its newer round supersedes it);
        3. the oldest round of a sender holding more than one buffer (one in use by the
           agent, borrowed, counts but is never taken)."""
        held = [
            (s, x)
            for (s, _), sl in self.slots.items()
            for x in (sl.current, sl.previous)
            if x.buf is not None and x is not r
        ]
        free = [(s, x) for s, x in held if not x.borrowed]
        counts = Counter(s for s, _ in held)
        for pick in (
            lambda s, x: x.collected or now - x.updated > self.stale_s,
            lambda s, x: s == sender,
            lambda s, x: counts[s] > 1,
        ):
            found = [x for s, x in free if pick(s, x)]
            if found:
                return min(found, key=lambda x: x.updated)
        return None

    def _can_lend(self, r: Round, sender: int, now: float) -> bool:
        pool = self.pool
        if pool is None:
            return True  # every round has buffers of its own: nothing is refused for want
        if pool.free or pool.made < pool.size:
            return True
        return self._victim(r, sender, now) is not None

    def _lend(self, r: Round, sender: int, now: float) -> bool:
        """Give sender's round r a pooled buffer (under self.cond): a free one, else one
        _victim() gives up. False if every buffer is rightly held."""
        assert self.pool is not None  # lending is for the gossip buffers
        buf = self.pool.take()
        if buf is None:
            victim = self._victim(r, sender, now)
            if victim is None:
                return False
            if self.fast_target is victim:
                self.fast_target = None
            buf = victim.detach()
            victim.mask[:] = 0
            victim.received = 0
        r.attach(buf)
        return True

    def _expected_chunks(self, h: wire.Header) -> int:
        # the whole model, or the block its block id names (an RPS block, a slice)
        blocks = wire.blocks_of(h.msg_type, self.rps_blocks, self.slices)
        if blocks:
            return len(self.plan.block_chunks(h.block, blocks))
        return self.plan.n_chunks

    def event(self, h: wire.Header) -> None:
        with self.cond:
            self._events.append(
                Event(h.sender, h.msg_type, h.round, h.flags, h.block, h.weight, h.session)
            )
            self.cond.notify_all()

    # -- agent thread --------------------------------------------------------------------------
    def events(self) -> list[Event]:
        with self.cond:
            out = list(self._events)
            self._events.clear()
        return out

    def wait_event(self, timeout: float) -> None:
        with self.cond:
            if not self._events:
                self.cond.wait(timeout)

    def ready(self, sender: int, msg_type: int, round: int, settle: float) -> bool:
        """True when `round` from (sender, msg_type) will get no more chunks worth waiting for:
        complete, superseded by a later round, or silent for `settle` seconds."""
        with self.cond:
            slot = self.slots.get((sender, msg_type))
            return slot is not None and slot.settled(round, settle, time.monotonic())

    def collect(
        self,
        sender: int,
        msg_type: int,
        round: int,
        deadline: float,
        out: np.ndarray,
        out_mask: np.ndarray,
        settle: float = 0.0,
    ) -> int:
        """Wait until `round` from (sender, msg_type) is complete, a later round from that
        sender has begun (this one is then final), no datagram of it came for `settle` seconds,
        or `deadline` (time.monotonic()) passes; copy what arrived into out/out_mask.
        Returns the number of chunks that arrived (0: nothing of that round)."""
        key = (sender, msg_type)
        with self.cond:
            while True:
                slot = self.slots.get(key)
                now = time.monotonic()
                if slot is not None and slot.settled(round, settle, now):
                    break
                if now >= deadline:
                    break
                self.cond.wait(min(deadline - now, 0.05))
            found = slot.find(round) if slot is not None else None
            if found is None or found.buf is None:
                out_mask[:] = 0
                return 0
            found.collected = True
            np.copyto(out, found.buf)
            np.copyto(out_mask, found.mask)
            return int(found.received)

    def borrow(self, sender: int, msg_type: int, round: int) -> tuple[Round | None, int]:
        """What arrived of `round`, in place (no copy): the Round, to read buf and mask, and
        the chunks that arrived; give_back() it when done. (None, 0) if nothing arrived."""
        with self.cond:
            slot = self.slots.get((sender, msg_type))
            found = slot.find(round) if slot is not None else None
            if found is None or found.buf is None or not found.received:
                if found is not None:
                    found.collected = True
                return None, 0
            found.collected = True
            found.borrowed = True
            return found, int(found.received)

    def discard(self, sender: int, msg_type: int, round: int) -> None:
        """Nothing will collect `round` from (sender, msg_type): mark it collected, so the rest
        of it is dropped as such, and give a pooled buffer back now."""
        with self.cond:
            slot = self.slots.get((sender, msg_type))
            found = slot.find(round) if slot is not None else None
            if found is None or found.borrowed:
                return
            found.collected = True
            if self.pool is not None and found.buf is not None:
                if self.fast_target is found:
                    self.fast_target = None
                self.pool.give(found.detach())

    def give_back(self, r: Round) -> None:
        with self.cond:
            r.borrowed = False
            if self.pool is not None and r.buf is not None:
                if self.fast_target is r:
                    self.fast_target = None
                self.pool.give(r.detach())
