"""What a receiver knows of each peer's link: the peer's session, a replay window over the
sequence numbers of that session (as IPsec's), and bounds on how far one datagram may move them.

A sequence number is accepted once. One within WINDOW below the highest accepted is accepted if it
was not seen (UDP may reorder); one further below is stale. A datagram of an older session than
the newest accepted is dropped (``old_session``); a newer session, once its tag has verified,
starts the window afresh (the peer restarted and numbers from 1 again).

Nothing is recorded until the whole datagram is accepted (check, then commit), so a replayed,
out-of-bounds or old-round datagram never moves a window. An authentic datagram that nothing could
keep (its round already merged, no buffer free) is recorded too: it is not taken again from a
replay, in this session or, while a newer one is on probation, through the session before.
And no single datagram may move one far: a sequence number may lead the highest accepted by at
most

    JUMP + RATE * (seconds since this link last accepted a datagram)

(``seq_jump``), which no sender reaches by sending, and a session may lead the known one by at most
SESSION_JUMP restarts (``session_jump``). A key holder (with keyfiles, only the link's own
sender) who sends one datagram at the limit, kept or not, holds the link's real traffic below the
window for JUMP / (its datagram rate) seconds, not for ever.
A link with no baseline (first contact, or restored from a checkpoint) takes sequence numbers up
to FIRST_SEQ_LIMIT ahead, which a sender would need years to count.

A receiver persists (session, highest) per peer with its checkpoint and restores them, so no
datagram that had arrived authentic before a restart, kept or not, is accepted after it.

A newer session is believed on probation. One datagram of it is enough to be heard (a restarted
peer must not wait), but the session before is kept beside it until the new one has sent
CONFIRM datagrams: if the peer then speaks again in the session before, with a sequence number
not seen yet, the new session was not its restart but someone else's word (a holder of the
link's key), and the link goes back to the session the peer is still using. A session on
probation is never what the checkpoint persists, so a forged one cannot outlive a restart either.
"""

from __future__ import annotations

import numpy as np

WINDOW = 4096
JUMP = 1 << 16  # datagrams (or rounds) a link may skip with no time passing
RATE = 1 << 17  # and per second of silence: above any sender's datagram rate
SESSION_JUMP = 1 << 16  # restarts of a peer between two datagrams we accept from it
FIRST_SEQ_LIMIT = 1 << 40
CONFIRM = 16  # datagrams of a new session before the session it replaced is forgotten


class ReplayWindow:
    __slots__ = ("highest", "bits", "gaps")

    def __init__(self, highest: int = -1, bits: int = 0) -> None:
        self.highest = highest
        self.bits = bits  # bit k set: highest - k was seen
        # runs of sequence numbers skipped on the way up: each a burst of datagrams lost (or
        # late, where they still arrive); the lost ones over this is the mean burst observed
        self.gaps = 0

    def reason(self, seq: int) -> str | None:
        """None if seq would be fresh, else the drop reason; records nothing."""
        if seq > self.highest:
            return None
        back = self.highest - seq
        if back >= WINDOW:
            return "stale"
        return "replayed" if self.bits >> back & 1 else None

    def record(self, seq: int) -> None:
        """Note seq as seen (after reason() said it is fresh)."""
        if seq > self.highest:
            shift = seq - self.highest
            self.gaps += shift > 1 and self.highest >= 0
            self.bits = ((self.bits << shift) | 1) & _MASK if shift < WINDOW else 1
            self.highest = seq
        else:
            self.bits |= 1 << (self.highest - seq)

    def check(self, seq: int) -> str | None:
        """reason(), and record() when fresh."""
        why = self.reason(seq)
        if why is None:
            self.record(seq)
        return why

    def advance(self, seqs) -> None:
        """Record a rising run of sequence numbers, all above highest (what record() would do
        for each of them in turn, in one update: the receive fast path accepts such runs)."""
        k = len(seqs)
        if not k:
            return
        last = int(seqs[k - 1])
        self.gaps += int(seqs[0]) > self.highest + 1 and self.highest >= 0
        if last - int(seqs[0]) == k - 1:  # consecutive, the usual case
            run = (1 << min(k, WINDOW)) - 1
        else:  # gaps (lost datagrams): one bit each, from Python ints (tolist), not NumPy's
            self.gaps += int(np.count_nonzero(np.diff(np.asarray(seqs)) > 1))
            run = 0
            for back in (last - np.asarray(seqs)).tolist():
                if back < WINDOW:
                    run |= 1 << back
        shift = last - self.highest
        self.bits = (((self.bits << shift) & _MASK) if shift < WINDOW else 0) | run
        self.highest = last


class PeerLink:
    """One peer as this receiver sees it. Written by the receive thread only."""

    __slots__ = (
        "session",
        "window",
        "last_accept",
        "baseline",
        "first",
        "arrived",
        "past_expected",
        "past_arrived",
        "past_gaps",
        "prev",
        "probation",
    )

    def __init__(self) -> None:
        self.session = -1  # newest session accepted; -1: none yet
        self.window = ReplayWindow()
        self.last_accept = 0.0  # time.monotonic() of the last accepted datagram
        self.baseline = False  # False until a datagram is accepted in this process
        self.first = -1  # loss accounting for the current session
        self.arrived = 0
        self.past_expected = 0  # and for the sessions before it
        self.past_arrived = 0
        self.past_gaps = 0
        self.prev: tuple | None = None  # the session a newer one replaced, while on probation
        self.probation = 0  # datagrams the newer session must still send to be confirmed

    def seq_limit(self, now: float) -> int:
        """Highest sequence number one datagram may carry in the current session now."""
        base = max(self.window.highest, 0)
        if not self.baseline:
            return base + FIRST_SEQ_LIMIT
        return base + JUMP + int(RATE * max(0.0, now - self.last_accept))

    def admit(self, session: int, seq: int, now: float) -> str | None:
        """None if a datagram of (session, seq) may be accepted, else the drop reason."""
        if self.session >= 0:
            if session < self.session:
                if self.prev is not None and session == self.prev[0]:
                    why = self.prev[1].reason(seq)
                    if why is None and seq <= self.prev[1].highest + JUMP:
                        return None  # the peer still speaks there: see commit()
                    return why or "old_session"
                return "old_session"
            if session > self.session:  # a restarted peer numbers from 1 again
                if session - self.session > SESSION_JUMP:
                    return "session_jump"
                return "seq_jump" if seq > FIRST_SEQ_LIMIT else None
        elif session == 0:
            return "old_session"  # sessions start at 1
        why = self.window.reason(seq)
        if why is None and seq > self.seq_limit(now):
            return "seq_jump"
        return why

    # what a session on probation would give back if the peer turns out to be still in the old
    _KEPT = (
        "session",
        "window",
        "first",
        "arrived",
        "past_expected",
        "past_arrived",
        "past_gaps",
    )

    def _fields(self) -> tuple:
        return tuple(getattr(self, k) for k in self._KEPT)

    def commit(self, session: int, seq: int, now: float) -> bool:
        """Record an accepted datagram; True if the link's session changed (a new session of
        the peer, or back to the one a forged newer session had replaced)."""
        if self.prev is not None and session == self.prev[0] and session < self.session:
            for k, v in zip(self._KEPT, self.prev):
                setattr(self, k, v)
            self.prev, self.probation = None, 0
            self._record(seq, now)
            return True
        new = session != self.session
        if new:
            self.prev = self._fields() if self.session >= 0 else None
            self.probation = CONFIRM
            if self.arrived:
                arrived, expected = self._interior()
                self.past_expected += expected
                self.past_arrived += arrived
                self.past_gaps += self.window.gaps
            self.session = session
            self.window = ReplayWindow()
            self.first, self.arrived = seq, 0
        elif self.prev is not None:
            self._confirm(1)
        self._record(seq, now)
        return new

    def _confirm(self, n: int) -> None:
        self.probation -= n
        if self.probation <= 0:
            self.prev = None

    def _record(self, seq: int, now: float) -> None:
        self.window.record(seq)
        if seq < self.first or self.first < 0:
            self.first = seq
        self.arrived += 1
        self.last_accept = now
        self.baseline = True

    def commit_run(self, seqs, now: float) -> None:
        """Record a rising run of accepted sequence numbers of the current session."""
        self.window.advance(seqs)
        if self.prev is not None:
            self._confirm(len(seqs))
        self.arrived += len(seqs)
        self.last_accept = now
        self.baseline = True

    def note_arrival(self, seq: int) -> None:
        """An authentic datagram of the current session that nothing kept (its round was
        collected, or no buffer was free): the network delivered it, so it is no loss, and the
        window records it, so a replayed copy is refused as any other (admit() said it is
        fresh). It neither confirms a session on probation nor counts as accepted."""
        if self.window.check(seq) is not None:
            return
        self.arrived += 1
        if seq < self.first or self.first < 0:
            self.first = seq

    def note(self, session: int, seq: int) -> None:
        """note_arrival() for a datagram of either session admit() lets in: one of the session
        a newer one is on probation against is recorded in that session's window, so that its
        replay cannot take the link back there."""
        if session == self.session:
            self.note_arrival(seq)
        elif self.prev is not None and session == self.prev[0]:
            self.prev[1].check(seq)

    def note_arrivals(self, seqs) -> None:
        """note_arrival() for each of a rising run of sequence numbers (the compiled receive
        path's drops), in one update when they are all above the window."""
        if len(seqs) and int(seqs[0]) > self.window.highest:
            self.window.advance(seqs)
            self.arrived += len(seqs)
            if int(seqs[0]) < self.first or self.first < 0:
                self.first = int(seqs[0])
            return
        for seq in seqs.tolist():
            self.note_arrival(seq)

    def _expected(self) -> int:
        return self.window.highest - self.first + 1 if self.arrived else 0

    def _interior(self) -> tuple[int, int]:
        """This session's (arrived, numbered) strictly between its lowest and highest arrival.
        Those two arrived by definition: counting them put a short link's loss low (a link of m
        datagrams at loss q showed about q (m - 2) / m, and a 32-node fleet's links are short:
        10% showed as 8.1%); whether the datagrams between them arrived is independent of
        which were first and last. What was lost before the first arrival or after the last,
        the receiver cannot see."""
        if self.arrived < 2:
            return 0, 0
        expected = self._expected() - 2
        return min(self.arrived - 2, expected), expected

    def loss(self) -> tuple[int, int]:
        """(datagrams that arrived, datagrams the peer numbered for us) between each session's
        first and last arrival (_interior), all sessions."""
        arrived, expected = self._interior()
        return self.past_arrived + arrived, self.past_expected + expected

    def gaps(self) -> int:
        """Runs of datagrams numbered for us that did not arrive in order, all sessions."""
        return self.past_gaps + self.window.gaps

    def state(self) -> tuple[int, int]:
        """(session, highest) to persist: a session on probation is not, the one before is.
        Highest is the highest authentic number that arrived, kept or only noted, so that no
        replay of either is taken once the receiver restarts."""
        if self.prev is not None:
            return self.prev[0], self.prev[1].highest
        return self.session, self.window.highest

    @classmethod
    def restored(cls, session: int, highest: int) -> PeerLink:
        """A link as persisted: everything at or below highest in that session counts as seen."""
        link = cls()
        link.session = session
        link.window = ReplayWindow(highest, _MASK)
        return link


_MASK = (1 << WINDOW) - 1


FIRST_ROUND_LIMIT = 1 << 24  # a round no sender reaches in one session


def round_limit(current: int, link: PeerLink, now: float) -> int:
    """Highest round one datagram may open in a slot whose newest round is `current` (-1: none
    in this session yet); rounds, like sequence numbers, cannot run ahead faster than RATE."""
    if current < 0 or not link.baseline:
        return FIRST_ROUND_LIMIT
    return current + JUMP + int(RATE * max(0.0, now - link.last_accept))


class Links(dict[int, PeerLink]):
    """Every incoming link of one receiver, by peer id: the replay state a checkpoint keeps and
    the loss the receiver observed on each link."""

    def of(self, peer: int) -> PeerLink:
        link = self.get(peer)
        if link is None:
            link = self[peer] = PeerLink()
        return link

    def loss(self) -> tuple[int, int]:
        """(datagrams that arrived, datagrams the senders numbered) over every link: the loss
        this receiver observed, from gaps in the per-link sequence numbers."""
        arrived = expected = 0
        for link in list(self.values()):
            a, e = link.loss()
            arrived += a
            expected += e
        return arrived, expected

    def gaps(self) -> int:
        """Runs of lost datagrams over every link (sequence gaps): what was lost over this is
        the mean burst this receiver observed."""
        return sum(link.gaps() for link in list(self.values()))

    def by_link(self) -> dict[int, float | None]:
        """Observed loss on each link (None before anything was numbered)."""
        out = {}
        for peer, link in list(self.items()):
            a, e = link.loss()
            out[peer] = round(1 - a / e, 4) if e else None
        return out

    def state(self) -> np.ndarray:
        """(peer, session, highest seq) per peer, for the checkpoint."""
        rows = [(p, *link.state()) for p, link in list(self.items()) if link.session >= 0]
        return np.array(rows, np.int64).reshape(-1, 3)

    def restore(self, state: np.ndarray) -> None:
        """Take back what state() gave before a restart: nothing accepted then is accepted
        again."""
        for peer, session, highest in np.asarray(state, np.int64).reshape(-1, 3):
            self[int(peer)] = PeerLink.restored(int(session), int(highest))
