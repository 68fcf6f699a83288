# Batched UDP I/O for the native transport: one recvmmsg(2) call fills up to len(bufs)
# preallocated rows, and one sendmmsg(2) call sends a batch of framed rows to one IPv4 peer,
# with the GIL released, so the per-datagram syscall and interpreter cost is paid once per
# batch. Linux only; edgegossip/transport/udp.py falls back to recv_into and sendto.

from libc.errno cimport EAGAIN

include "_sendrows.pxi"

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd *fds, unsigned long nfds, int timeout)
    enum: POLLIN


cdef Py_ssize_t _rows(unsigned char[:, ::1] bufs, Py_ssize_t[::1] lengths, mmsghdr *msgs,
                      iovec *iov) except -1:
    """Point msgs (MAX_BATCH of them) at the rows of bufs, one datagram each: how many."""
    cdef Py_ssize_t i, rows = min(bufs.shape[0], MAX_BATCH)
    if lengths.shape[0] < rows:
        raise ValueError("lengths shorter than the batch")
    memset(msgs, 0, sizeof(mmsghdr) * rows)
    for i in range(rows):
        iov[i].iov_base = &bufs[i, 0]
        iov[i].iov_len = bufs.shape[1]
        msgs[i].msg_hdr.msg_iov = &iov[i]
        msgs[i].msg_hdr.msg_iovlen = 1
    return rows


def recv_batch(int fd, unsigned char[:, ::1] bufs, Py_ssize_t[::1] lengths, int timeout_ms,
               long pause_us=0):
    """Sleep pause_us first (so that a batch gathers), then wait up to timeout_ms for datagrams
    on fd, then read as many as fit in the rows of bufs. The pause is taken here, with the GIL
    already released for the wait, rather than in Python: one GIL hand-over a batch, not two.

    lengths[i] is the size of datagram i, or -1 when it was larger than a row (truncated).
    Returns the number read (0 on timeout). Raises OSError for socket errors."""
    cdef mmsghdr msgs[MAX_BATCH]
    cdef iovec iov[MAX_BATCH]
    cdef pollfd pfd
    cdef int i, n, rc
    cdef Py_ssize_t rows = _rows(bufs, lengths, msgs, iov)
    if rows == 0:
        return 0
    pfd.fd = fd
    pfd.events = POLLIN
    with nogil:
        _sleep_us(pause_us)
        rc = poll(&pfd, 1, timeout_ms)
        if rc > 0:
            n = recvmmsg(fd, msgs, <unsigned int>rows, MSG_DONTWAIT, NULL)
        else:
            n = 0
    if rc < 0:
        if errno == EINTR:
            return 0
        raise OSError(errno, "poll failed")
    if n < 0:
        if errno == EAGAIN or errno == EINTR:
            return 0
        raise OSError(errno, "recvmmsg failed")
    for i in range(n):
        lengths[i] = -1 if msgs[i].msg_hdr.msg_flags & MSG_TRUNC else msgs[i].msg_len
    return n


def send_batch(int fd, const unsigned char[:, ::1] rows, const Py_ssize_t[::1] lengths,
               Py_ssize_t n, const unsigned char[::1] ip4, int port, bint gso=False,
               long pause_us=0):
    """Send rows[0:n] (row i is lengths[i] bytes) as n datagrams to ip4:port, the address as 4
    network-order bytes, with UDP GSO if gso (_sendrows.pxi). pause_us: sleep this long first
    (a pacer's wait), in the same release of the GIL. Blocks until the kernel took them or
    failed. Returns (datagrams sent, errno or 0)."""
    cdef sockaddr_in addr
    cdef Py_ssize_t i, sent = 0
    cdef int err
    if n > MAX_BATCH or n > rows.shape[0] or n > lengths.shape[0]:
        raise ValueError("batch larger than the rows")
    _address(ip4, port, &addr)
    if n <= 0:
        return 0, 0
    for i in range(n):
        if lengths[i] <= 0 or lengths[i] > rows.shape[1]:
            raise ValueError("row length outside the row")
    with nogil:
        _sleep_us(pause_us)
        err = _send_rows(fd, &rows[0, 0], rows.shape[1], &lengths[0], n, &addr, gso, &sent)
    return sent, err


cdef inline double _next_linger(double linger, Py_ssize_t n, Py_ssize_t rows, double least,
                                double most) noexcept nogil:
    # transport/udp.py says why: a full batch halves the pause, a batch under half full grows it
    if n >= rows:
        return max(least, linger / 2)
    if 0 < n < rows // 2:
        return min(most, linger * 1.5)
    return linger


def next_linger(double linger, Py_ssize_t n, Py_ssize_t rows, double least, double most):
    """The receive thread's next pause after a batch of n of `rows` datagrams: the linger to
    keep, which is also the pause before the next call when the batch came back short (0 < n <
    rows); bounded by least and most."""
    return _next_linger(linger, n, rows, least, most)


def drain(int fd, unsigned char[:, ::1] bufs, Py_ssize_t[::1] lengths, int timeout_ms,
          const unsigned char[::1] stop not None, double least, double most):
    """Read fd as a receive thread does (recv_batch, with next_linger's pauses) and let go of
    what was read, unlooked at, until stop[0] is set (by another thread; seen within
    timeout_ms), with the GIL released throughout: the kernel's share of receiving alone, for
    the floor (emulate/floor.py). Returns (batches, datagrams, bytes, errno or 0)."""
    cdef mmsghdr msgs[MAX_BATCH]
    cdef iovec iov[MAX_BATCH]
    cdef pollfd pfd
    cdef Py_ssize_t rows, batches = 0, count = 0, nbytes = 0
    cdef int i, n, rc, err = 0
    cdef double linger = least
    cdef long pause_us = 0
    cdef volatile const unsigned char *halt
    if stop.shape[0] == 0:
        raise ValueError("need a stop flag")
    halt = &stop[0]
    rows = _rows(bufs, lengths, msgs, iov)
    if rows == 0:
        raise ValueError("need rows")
    pfd.fd = fd
    pfd.events = POLLIN
    with nogil:
        while not halt[0]:
            _sleep_us(pause_us)
            pause_us = 0
            rc = poll(&pfd, 1, timeout_ms)
            if rc < 0:
                if errno == EINTR:
                    continue
                err = errno
                break
            if rc == 0:
                continue
            n = recvmmsg(fd, msgs, <unsigned int>rows, MSG_DONTWAIT, NULL)
            if n < 0:
                if errno == EAGAIN or errno == EINTR:
                    continue
                err = errno
                break
            if n == 0:
                continue
            batches += 1
            count += n
            for i in range(n):
                nbytes += msgs[i].msg_len
            linger = _next_linger(linger, n, rows, least, most)
            if n < rows:
                pause_us = <long>(linger * 1e6)
    return batches, count, nbytes, err


def send_rows_paced(int fd, const unsigned char[:, ::1] rows not None,
                    const Py_ssize_t[::1] lengths not None, Py_ssize_t count,
                    const unsigned char[::1] ip4 not None, int port, bint gso, Py_ssize_t batch,
                    double rate, double burst_s, double next_at,
                    const unsigned char[::1] stop not None, Py_ssize_t overhead=0):
    """Send `count` datagrams to ip4:port, `batch` at a time from rows[0:batch] (over again:
    what they hold is not looked at), each batch once the pacer's bucket allows it (_pace; rate
    0: unpaced), booking each datagram as its length plus `overhead`: _wire_c.send_paced's
    loop without the framing, one release of the GIL for the whole count. stop[0] set ends it
    before the next batch. Returns (datagrams sent, their bytes, next_at, errno or 0, gso)."""
    cdef sockaddr_in addr
    cdef Py_ssize_t done = 0, k, i, sent = 0, total = 0
    cdef int err = 0
    cdef volatile const unsigned char *halt = &stop[0] if stop.shape[0] else NULL
    batch = max(1, min(batch, rows.shape[0], lengths.shape[0], MAX_BATCH))
    for i in range(batch):
        if lengths[i] <= 0 or lengths[i] > rows.shape[1]:
            raise ValueError("row length outside the row")
    _address(ip4, port, &addr)
    with nogil:
        while done < count:
            if halt != NULL and halt[0]:
                break
            k = min(batch, count - done)
            err = _send_batch_paced(fd, &rows[0, 0], rows.shape[1], &lengths[0], k, &addr,
                                    &gso, overhead, rate, burst_s, &next_at, &sent, &total)
            done += sent
            if err:
                break
    return done, total, next_at, err, gso
