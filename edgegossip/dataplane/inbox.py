"""Receive side: every datagram is let in by the gate (gate.py: framing, keys, tag, bounds), then
by its link's replay and session rules (replay.py), then filed into its round's buffer
(reassembly.py); a drop at any step is counted by reason (drops.py).

Runs on the transport's receive thread. Nothing raises out of ingest(): a datagram is accepted
or dropped and counted.

ingest() is the definition of what is accepted. fast() is the steady state compiled
(edgegossip._wire_c): once ingest() has opened a round from a sender, the rest of that round's
datagrams in a receive batch are checked and filed in C with the GIL released; once it has
refused one for want of a buffer (or after it was collected), the rest are checked and dropped
there likewise. It takes only datagrams ingest() would treat with the same effect and leaves
every other one to ingest(). One call takes a sender's share of the batch, past other senders'
datagrams (each link's order is kept; links do not depend on one another's), so the Python
around it runs once per sender and batch rather than once per paced burst.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from edgegossip import extensions
from edgegossip.dataplane import wire
from edgegossip.dataplane.congestion import FEEDBACK_S, Report
from edgegossip.dataplane.drops import DropCounter
from edgegossip.dataplane.gate import Gate
from edgegossip.dataplane.reassembly import Reassembly
from edgegossip.dataplane.replay import FIRST_ROUND_LIMIT, Links, PeerLink

# authentic datagrams dropped because nothing could keep them: they did arrive, so the loss a
# receiver observes on the link does not count them, and the replay window records them
_ARRIVED = frozenset({"collected", "no_buffer"})

# built without OpenSSL headers: every datagram goes through ingest()
_wire_c = extensions.load("_wire_c")


class Inbox:
    """One receiver: what it lets in (gate), what it remembers of each link (links), the
    rounds it is filling (rounds) and what it dropped (counter)."""

    def __init__(self, gate: Gate, rounds: Reassembly | None = None):
        self.gate = gate
        self.rounds = rounds or Reassembly(gate.plan, rps_blocks=gate.rps_blocks)
        self.counter = DropCounter()
        self.links = Links()
        self._run = None  # _wire_c.Run over the transport's current batch arrays
        # congestion control (dataplane/congestion): where a sender's report on our sending
        # goes, and where our reports on each incoming link go, every FEEDBACK_S while chunks
        # arrive on it; None: not reported
        self.on_feedback: Callable[[int, Report], object] | None = None
        self.on_report: Callable[[int, Report], object] | None = None
        self._report_due: dict[int, float] = {}

    @classmethod
    def build(
        cls,
        plan,
        keys,
        fleet: int,
        *,
        receive_buffers: int = 0,
        stale_s: float = 10.0,
        **gate,
    ) -> Inbox:
        """An inbox for `plan`; `gate` takes Gate's fields (me, peers, codec, rps_blocks, ...)
        and the buffer options go to Reassembly."""
        g = Gate(plan, keys, fleet, **gate)
        return cls(g, Reassembly(plan, g.rps_blocks, receive_buffers, stale_s, slices=g.slices))

    # -- receive thread ------------------------------------------------------------------------
    def ingest(self, body: memoryview) -> None:
        """Validate one datagram body (group framing removed) and file it; never raises."""
        reason = self._ingest(body)
        if reason is not None:
            self.counter.drop(reason)

    def _ingest(self, body: memoryview) -> str | None:
        opened = self.gate.open(body)
        if isinstance(opened, str):
            return opened
        h, payload = opened
        link = self.links.of(h.sender)
        now = time.monotonic()
        reason = link.admit(h.session, h.seq, now)
        if reason is not None:
            return reason
        if h.msg_type == wire.MsgType.FEEDBACK:
            return self._feedback(link, h, payload, now)
        if h.msg_type == wire.MsgType.REQUEST:
            if h.round > FIRST_ROUND_LIMIT:
                return "round_jump"
            self._commit(link, h, now)
            self.rounds.event(h)
            self.counter.accepted += 1
            return None
        chunk = self.gate.chunk(h, payload)
        if isinstance(chunk, str):
            return chunk
        reason = self.rounds.file(h, chunk, link, now, lambda: self._commit(link, h, now))
        if reason is None:
            self.counter.accepted += 1
            self.counter.accepted_bytes += h.length
            self._arrived(h.sender, link, now)
        elif reason in _ARRIVED:
            link.note(h.session, h.seq)  # delivered (no loss) and never to be taken from a replay
            self._arrived(h.sender, link, now)
        return reason

    def _feedback(self, link: PeerLink, h: wire.Header, payload, now: float) -> str | None:
        """A peer's report on our link to it: to the sender's controller."""
        if len(payload) != wire.FEEDBACK_BODY.size:
            return "bad_feedback"
        self._commit(link, h, now)
        self.counter.accepted += 1
        if self.on_feedback is not None:
            self.on_feedback(h.sender, Report(*wire.FEEDBACK_BODY.unpack(payload)))
        return None

    def _arrived(self, sender: int, link: PeerLink, now: float) -> None:
        """Chunks from sender arrived: report on its link if one is due. Only chunks call for
        reports: a report on reports would keep two idle devices talking."""
        if self.on_report is None or now < self._report_due.get(sender, 0.0):
            return
        self._report_due[sender] = now + FEEDBACK_S
        report = Report(link.session, link.window.highest, link.first, link.arrived, now)
        self.on_report(sender, report)

    def _commit(self, link: PeerLink, h: wire.Header, now: float) -> None:
        if link.commit(h.session, h.seq, now):
            self.rounds.restarted(h.sender)

    def _run_over(self, rows, lengths, prefix, taken):
        """The compiled run over these receive buffers, made once per set of buffers."""
        run, gate, plan = self._run, self.gate, self.gate.plan
        if run is None or run.rows_obj is not rows or run.taken_obj is not taken:
            run = self._run = _wire_c.Run(
                rows,
                lengths,
                prefix,
                taken,
                plan.chunk_bytes,
                gate.max_body,
                np.zeros(len(rows), np.int64),
                gate.codec.dtype,
                plan.model_bytes,
                plan.n_chunks,
            )
            self.rounds.fast_target = None
        return run

    def fast(
        self,
        rows: np.ndarray,
        lengths: np.ndarray,
        start: int,
        stop: int,
        prefix: np.ndarray,
        taken: np.ndarray,
    ) -> int:
        """Take row start's sender's rows among start .. stop - 1 (framed datagrams,
        rows[i, :lengths[i]]) not yet taken, in order, while they continue a round ingest()
        already opened, filing them, or one it refused, dropping them as it would; marks them
        in taken and returns how many (a FastPath)."""
        if _wire_c is None or self.gate.codec.relative:  # decoded against x0, in Python
            return 0
        gate, rounds = self.gate, self.rounds
        run = self._run_over(rows, lengths, prefix, taken)
        head = run.peek(start)
        if head is None:
            return 0
        sender, msg_type, flags, session, rnd = head
        slot = rounds.slots.get((sender, msg_type))
        link = self.links.get(sender)
        if slot is None or link is None or link.session != session or not link.baseline:
            return 0
        encrypted = bool(flags & wire.FLAG_ENCRYPTED)
        aead, why = gate.sender(sender, encrypted)
        if why is not None:
            return 0
        now = time.monotonic()
        limit = min(link.seq_limit(now), 2**63 - 1)
        with rounds.cond:
            target, reason = rounds.steady(slot, rnd, link, now, sender)
            if target is None and reason is None:
                return 0
            if target is not None and rounds.fast_target is not target:
                run.target(target.bytes, target.mask)
                rounds.fast_target = target
            k = run.run(
                aead,
                start,
                stop,
                gate.fleet,
                gate.me,
                sender,
                msg_type,
                encrypted,
                session,
                rnd,
                link.window.highest,
                limit,
                gate.blocks(msg_type),
                target is None,
            )
            if k:
                self._file(run, k, target, reason, link, now, sender)
        return k

    def _file(self, run, k: int, target, reason, link: PeerLink, now: float, sender: int) -> None:
        """The k datagrams the run took: counted into their round, or dropped as reason (under
        rounds.cond)."""
        if target is None:  # arrived, so no loss on the link, though nothing keeps them
            assert reason in _ARRIVED
            link.note_arrivals(run.seqs[:k])
            self.counter.drop(reason, k)
            self._arrived(sender, link, now)
            return
        link.commit_run(run.seqs[:k], now)
        target.received += run.fresh
        target.updated = now
        self.counter.accepted += k
        self.counter.accepted_bytes += run.nbytes
        self._arrived(sender, link, now)
        if target.received >= target.expected:
            self.rounds.cond.notify_all()
