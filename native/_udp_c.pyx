# Batched UDP receive for the native transport: one recvmmsg(2) call fills up to len(bufs)
# preallocated rows, with the GIL released, so the per-datagram syscall and interpreter cost
# is paid once per batch. Linux only; edgegossip/transport/udp.py falls back to recv_into.

from libc.errno cimport errno, EAGAIN, EINTR
from libc.string cimport memset

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd *fds, unsigned long nfds, int timeout)
    enum: POLLIN

cdef extern from "<sys/uio.h>" nogil:
    struct iovec:
        void *iov_base
        size_t iov_len

cdef extern from "<sys/socket.h>" nogil:
    struct msghdr:
        void *msg_name
        unsigned int msg_namelen
        iovec *msg_iov
        size_t msg_iovlen
        void *msg_control
        size_t msg_controllen
        int msg_flags
    struct mmsghdr:
        msghdr msg_hdr
        unsigned int msg_len
    int recvmmsg(int sockfd, mmsghdr *msgvec, unsigned int vlen, int flags, void *timeout)
    enum: MSG_DONTWAIT
    enum: MSG_TRUNC

DEF MAX_BATCH = 256


def recv_batch(int fd, unsigned char[:, ::1] bufs, Py_ssize_t[::1] lengths, int timeout_ms):
    """Wait up to timeout_ms for datagrams on fd, then read as many as fit in the rows of bufs.

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
