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
    cdef Py_ssize_t rows = bufs.shape[0], width = bufs.shape[1]
    if rows > MAX_BATCH:
        rows = MAX_BATCH
    if lengths.shape[0] < rows:
        raise ValueError("lengths shorter than the batch")
    if rows == 0:
        return 0
    memset(msgs, 0, sizeof(mmsghdr) * rows)
    for i in range(rows):
        iov[i].iov_base = &bufs[i, 0]
        iov[i].iov_len = width
        msgs[i].msg_hdr.msg_iov = &iov[i]
        msgs[i].msg_hdr.msg_iovlen = 1
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
