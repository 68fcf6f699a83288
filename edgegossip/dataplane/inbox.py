"""Receive side: validate every datagram, count drops by reason, scatter payloads into per-peer
receive slots with one mask byte per chunk, and hand complete-or-expired slots to the agent.

Runs on the transport's receive thread. Nothing raises out of ingest(): a datagram is accepted
or dropped and counted. Slot buffers are allocated once per (sender, message type); the hot
path allocates no payload-sized memory.

ingest() is the definition of what is accepted. fast() is the steady state compiled
(edgegossip._wire_c): once ingest() has opened a round from a sender, the rest of that round's
datagrams in a receive batch are checked and filed in C with the GIL released. It takes only
datagrams ingest() would accept with the same effect and leaves every other one to ingest().
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from dataclasses import dataclass

import numpy as np

from edgegossip import extensions, kernels
from edgegossip.dataplane import wire
from edgegossip.dataplane.chunking import ChunkPlan
from edgegossip.dataplane.keys import LinkKeys
from edgegossip.dataplane.payload import CODECS, Codec
from edgegossip.dataplane.replay import FIRST_ROUND_LIMIT, PeerLink, round_limit

# built without OpenSSL headers: every datagram goes through ingest()
_wire_c = extensions.load("_wire_c")

DROP_REASONS = (
    "truncated",
    "oversized",
    "bad_group",
    "bad_version",
    "bad_type",
    "bad_dtype",
    "bad_weight",
    "wrong_fleet",
    "wrong_receiver",
    "unknown_sender",
    "not_encrypted",
    "bad_tag",
    "old_session",
    "session_jump",
    "replayed",
    "stale",
    "seq_jump",
    "out_of_bounds",
    "non_finite",
    "old_round",
    "round_jump",
    "no_buffer",
    "collected",
)


class DropCounter:
    """Counts accepted datagrams and drops by reason; written by one receive thread."""

    def __init__(self) -> None:
        self.drops: Counter[str] = Counter()
        self.accepted = 0
        self.accepted_bytes = 0

    def drop(self, reason: str) -> None:
        self.drops[reason] += 1

    @property
    def dropped(self) -> int:
        return sum(self.drops.values())

    def snapshot(self) -> dict:
        return {
            "accepted": self.accepted,
            "accepted_bytes": self.accepted_bytes,
            "dropped": self.dropped,
            "drops": dict(self.drops),
        }


@dataclass
class Event:
    """First datagram of a new round from a sender: lets the agent answer exchanges."""

    sender: int
    msg_type: int
    round: int
    flags: int
    block: int
    weight: float = 0.0  # push-sum weight the message carries (gossip-push)


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

    def advance(self, round: int, expected: int) -> Round:
        if not (self.current.collected or self.current.round < 0):
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


class Inbox:
    def __init__(
        self,
        plan: ChunkPlan,
        keys: LinkKeys | bytes,
        fleet: int,
        peers: set[int] | None = None,
        rps_blocks: int = 0,
        max_events: int = 1024,
        me: int = 0,
        group: bytes = wire.DEFAULT_GROUP,
        require_encryption: bool = False,
        receive_buffers: int = 0,
        stale_s: float = 10.0,
        codec: Codec = CODECS["float32"],
    ):
        """receive_buffers: 0 gives every (sender, message type) buffers of its own; N > 0 shares
        N among all senders (a round that finds none free is dropped as `no_buffer`; a round
        nobody collected for stale_s seconds gives its buffer up)."""
        self.plan = plan
        self.codec = codec  # payloads in another encoding are dropped as bad_dtype
        self._decoded = np.zeros(plan.chunk_elems, np.float32)  # one chunk, decoded
        self.pool = BufferPool(plan.n_params, receive_buffers) if receive_buffers else None
        self.stale_s = stale_s
        self.rps_blocks = rps_blocks
        self._n_chunks = plan.n_chunks
        self._chunk_bytes = plan.chunk_bytes
        self._model_bytes = plan.model_bytes
        self.keys = LinkKeys.of(keys)
        self.fleet = fleet
        self.me = me  # datagrams naming another receiver are dropped
        self.peers = peers  # None admits any sender id whose tag verifies
        self.require_encryption = require_encryption
        self.prefix = wire.frame_prefix(group)
        self.max_body = wire.HEADER_SIZE + codec.encoded_len(plan.chunk_elems) + wire.TAG_SIZE
        self.counter = DropCounter()
        self.links: dict[int, PeerLink] = {}
        self._slots: dict[tuple[int, int], Slot] = {}
        self._events: deque[Event] = deque(maxlen=max_events)
        self._cond = threading.Condition()
        self._run = None  # _wire_c.Run over the transport's current batch arrays
        self._run_target: Round | None = None  # the Round it points at

    # -- receive thread ------------------------------------------------------------------------
    def ingest(self, body: memoryview) -> None:
        """Validate one datagram body (group framing removed) and file it; never raises."""
        reason = self._ingest(body)
        if reason is not None:
            self.counter.drop(reason)

    def _ingest(self, body: memoryview) -> str | None:
        n = len(body)
        if n > self.max_body:
            return "oversized"
        try:
            h = wire.unpack(body)
        except wire.WireError as e:
            return e.reason
        if h.fleet != self.fleet:
            return "wrong_fleet"
        if h.dtype != self.codec.dtype:
            return "bad_dtype"
        if h.receiver != self.me:
            return "wrong_receiver"
        sender = h.sender
        aead = self.keys.aead(sender, self.me)
        if aead is None or (self.peers is not None and sender not in self.peers):
            return "unknown_sender"
        encrypted = bool(h.flags & wire.FLAG_ENCRYPTED)
        if self.require_encryption and not encrypted:
            return "not_encrypted"
        end = wire.HEADER_SIZE + h.length
        if encrypted:
            payload = aead.open(
                wire.nonce(h),
                self.prefix + bytes(body[: wire.HEADER_SIZE]),
                body[wire.HEADER_SIZE :],
            )
        else:
            payload = body[wire.HEADER_SIZE : end]
            if aead.open(wire.nonce(h), self.prefix + bytes(body[:end]), body[end:]) is None:
                payload = None
        if payload is None:
            return "bad_tag"
        link = self.links.get(sender)
        if link is None:
            link = self.links[sender] = PeerLink()
        now = time.monotonic()
        reason = link.admit(h.session, h.seq, now)
        if reason is not None:
            return reason
        if h.msg_type == wire.MsgType.REQUEST:
            if h.round > FIRST_ROUND_LIMIT:
                return "round_jump"
            self._commit(link, h, now)
            self._event(h)
            self.counter.accepted += 1
            return None
        c = h.chunk_index
        elems = min(self._chunk_bytes, self._model_bytes - h.byte_offset) // 4
        if (
            h.chunk_count != self._n_chunks
            or c >= self._n_chunks
            or h.byte_offset != c * self._chunk_bytes
            or h.length != self.codec.encoded_len(elems)
            or (self.rps_blocks and h.block >= self.rps_blocks)
        ):
            return "out_of_bounds"
        if self.codec.dtype != wire.DTYPE_F32:
            out = self._decoded[:elems]
            self.codec.decode(payload, out, elems)
            payload = memoryview(out.view(np.uint8))
        if not kernels.all_finite(payload):
            return "non_finite"
        return self._file(h, payload, link, now)

    def _commit(self, link: PeerLink, h: wire.Header, now: float) -> None:
        if link.commit(h.session, h.seq, now):
            # the peer restarted: its rounds count from 1 again
            with self._cond:
                for (sender, _), slot in self._slots.items():
                    if sender == h.sender:
                        slot.current.round = slot.previous.round = -1

    def _file(self, h: wire.Header, payload: memoryview, link: PeerLink, now: float) -> str | None:
        new_session = h.session != link.session
        with self._cond:
            key = (h.sender, h.msg_type)
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = Slot(self.plan, self.pool is None)
            cur = slot.current
            current_round = -1 if new_session else cur.round
            opens = h.round > current_round
            if h.round < current_round:
                if h.round != slot.previous.round:
                    return "old_round"
                cur = slot.previous  # late chunk of the round before: still useful
            elif opens and h.round > round_limit(current_round, link, now):
                return "round_jump"
            self._commit(link, h, now)
            if opens:
                cur = slot.advance(h.round, self._expected_chunks(h))
                self._event(h)
            if cur.buf is None:
                if cur.collected:
                    return "collected"  # its reader has merged it and moved on
                if not self._lend(cur, now):
                    return "no_buffer"
            fresh = not cur.mask[h.chunk_index]
            kernels.scatter_chunk(cur.bytes, cur.mask, payload, h.byte_offset, h.chunk_index)
            cur.received += fresh
            cur.updated = now
            self.counter.accepted += 1
            self.counter.accepted_bytes += h.length
            if cur.received >= cur.expected:
                self._cond.notify_all()
        return None

    def fast(
        self, rows: np.ndarray, lengths: np.ndarray, start: int, stop: int, prefix: np.ndarray
    ) -> int:
        """Accept rows start.. (framed datagrams, rows[i, :lengths[i]]) while they continue a
        round ingest() already opened; returns the first row not taken (a FastPath)."""
        if _wire_c is None:
            return start
        run = self._run
        if run is None or run.rows_obj is not rows:
            run = self._run = _wire_c.Run(
                rows,
                lengths,
                prefix,
                self._chunk_bytes,
                self.max_body,
                np.zeros(len(rows), np.int64),
                self.codec.dtype,
            )
            self._run_target = None
        head = run.peek(start)
        if head is None:
            return start
        sender, msg_type, flags, session, rnd = head
        slot = self._slots.get((sender, msg_type))
        link = self.links.get(sender)
        if (
            slot is None
            or link is None
            or link.session != session
            or not link.baseline
            or slot.current.round != rnd
            or slot.current.buf is None
        ):
            return start
        if self.peers is not None and sender not in self.peers:
            return start
        encrypted = bool(flags & wire.FLAG_ENCRYPTED)
        aead = self.keys.aead(sender, self.me)
        if aead is None or (self.require_encryption and not encrypted):
            return start
        now = time.monotonic()
        limit = min(link.seq_limit(now), 2**63 - 1)
        with self._cond:
            cur = slot.current
            if self._run_target is not cur:
                run.target(cur.bytes, cur.mask)
                self._run_target = cur
            k = run.run(
                aead,
                start,
                stop,
                self.fleet,
                self.me,
                sender,
                msg_type,
                encrypted,
                session,
                rnd,
                link.window.highest,
                limit,
                self.rps_blocks,
            )
            if not k:
                return start
            link.commit_run(run.seqs[:k], now)
            cur.received += run.fresh
            cur.updated = now
            self.counter.accepted += k
            self.counter.accepted_bytes += run.nbytes
            if cur.received >= cur.expected:
                self._cond.notify_all()
        return start + k

    def _lend(self, r: Round, now: float) -> bool:
        """Give round r a pooled buffer (under self._cond): a free one, else the buffer of a
        round nobody collected for stale_s seconds. False if all are in use."""
        assert self.pool is not None  # lending is for the gossip buffers
        buf = self.pool.take()
        if buf is None:
            stale = [
                x
                for sl in self._slots.values()
                for x in (sl.current, sl.previous)
                if x.buf is not None
                and not x.borrowed
                and x is not r
                and (x.collected or now - x.updated > self.stale_s)
            ]
            if not stale:
                return False
            victim = min(stale, key=lambda x: x.updated)
            if self._run_target is victim:
                self._run_target = None
            buf = victim.detach()
            victim.mask[:] = 0
            victim.received = 0
        r.attach(buf)
        return True

    def borrow(self, sender: int, msg_type: int, round: int) -> tuple[Round | None, int]:
        """What arrived of `round`, in place (no copy): the Round, to read buf and mask, and
        the chunks that arrived; give_back() it when done. (None, 0) if nothing arrived."""
        with self._cond:
            slot = self._slots.get((sender, msg_type))
            found = slot.find(round) if slot is not None else None
            if found is None or found.buf is None or not found.received:
                if found is not None:
                    found.collected = True
                return None, 0
            found.collected = True
            found.borrowed = True
            return found, int(found.received)

    def give_back(self, r: Round) -> None:
        with self._cond:
            r.borrowed = False
            if self.pool is not None and r.buf is not None:
                if self._run_target is r:
                    self._run_target = None
                self.pool.give(r.detach())

    def link_loss(self) -> tuple[int, int]:
        """(datagrams that arrived, datagrams the senders numbered) over every incoming link:
        the loss this receiver observed, from gaps in the per-link sequence numbers."""
        arrived = expected = 0
        for link in list(self.links.values()):
            a, e = link.loss()
            arrived += a
            expected += e
        return arrived, expected

    def loss_by_link(self) -> dict[int, float | None]:
        """Observed loss on each incoming link (None before anything was numbered)."""
        out = {}
        for peer, link in list(self.links.items()):
            a, e = link.loss()
            out[peer] = round(1 - a / e, 4) if e else None
        return out

    def replay_state(self) -> np.ndarray:
        """(peer, session, highest seq) per peer, for the checkpoint."""
        rows = [(p, *link.state()) for p, link in list(self.links.items()) if link.session >= 0]
        return np.array(rows, np.int64).reshape(-1, 3)

    def restore_replay(self, state: np.ndarray) -> None:
        """Take back what replay_state() gave before a restart: nothing accepted then is
        accepted again."""
        for peer, session, highest in np.asarray(state, np.int64).reshape(-1, 3):
            self.links[int(peer)] = PeerLink.restored(int(session), int(highest))

    def _expected_chunks(self, h: wire.Header) -> int:
        # the whole model for PARAMS; one block for RPS messages, whose block id names it
        if self.rps_blocks and h.msg_type in (wire.MsgType.REDUCE, wire.MsgType.GATHER):
            return len(self.plan.block_chunks(h.block, self.rps_blocks))
        return self.plan.n_chunks

    def _event(self, h: wire.Header) -> None:
        with self._cond:
            self._events.append(
                Event(h.sender, h.msg_type, h.round, h.flags, h.block, wire.weight_value(h.weight))
            )
            self._cond.notify_all()

    # -- agent thread --------------------------------------------------------------------------
    def events(self) -> list[Event]:
        with self._cond:
            out = list(self._events)
            self._events.clear()
        return out

    def wait_event(self, timeout: float) -> None:
        with self._cond:
            if not self._events:
                self._cond.wait(timeout)

    def ready(self, sender: int, msg_type: int, round: int, settle: float) -> bool:
        """True when `round` from (sender, msg_type) will get no more chunks worth waiting for:
        complete, superseded by a later round, or silent for `settle` seconds."""
        with self._cond:
            slot = self._slots.get((sender, msg_type))
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
        with self._cond:
            while True:
                slot = self._slots.get(key)
                now = time.monotonic()
                if slot is not None and slot.settled(round, settle, now):
                    break
                if now >= deadline:
                    break
                self._cond.wait(min(deadline - now, 0.05))
            found = slot.find(round) if slot is not None else None
            if found is None or found.buf is None:
                out_mask[:] = 0
                return 0
            found.collected = True
            np.copyto(out, found.buf)
            np.copyto(out_mask, found.mask)
            return int(found.received)
