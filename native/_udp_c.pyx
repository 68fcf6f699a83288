# Batched UDP I/O for the native transport: one recvmmsg(2) call fills up to len(bufs)
# preallocated rows, and one sendmmsg(2) call sends a batch of framed rows to one IPv4 peer,
# with the GIL released, so the per-datagram syscall and interpreter cost is paid once per
# batch. Linux only; edgegossip/transport/udp.py falls back to recv_into and sendto.

from libc.errno cimport errno, EAGAIN, EINTR
from libc.string cimport memcpy, memset

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
    int sendmmsg(int sockfd, mmsghdr *msgvec, unsigned int vlen, int flags)
    enum: MSG_DONTWAIT
    enum: MSG_TRUNC

cdef extern from "<netinet/in.h>" nogil:
    struct in_addr:
        unsigned int s_addr
    struct sockaddr_in:
        unsigned short sin_family
        unsigned short sin_port
        in_addr sin_addr
    unsigned short htons(unsigned short)
    enum: AF_INET

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


cdef extern from "<sys/socket.h>" nogil:
    struct cmsghdr:
        size_t cmsg_len
        int cmsg_level
        int cmsg_type
    cmsghdr *CMSG_FIRSTHDR(msghdr *m)
    unsigned char *CMSG_DATA(cmsghdr *c)
    size_t CMSG_SPACE(size_t n)
    size_t CMSG_LEN(size_t n)

DEF SOL_UDP = 17
DEF UDP_SEGMENT = 103   # linux/udp.h: send one buffer as datagrams of this size (UDP GSO)
DEF GSO_MAX_BYTES = 65507  # one IPv4 packet's UDP payload
DEF GSO_MAX_SEGMENTS = 64
DEF CMSG_ROOM = 32


def send_batch(int fd, const unsigned char[:, ::1] rows, const Py_ssize_t[::1] lengths,
               Py_ssize_t n, const unsigned char[::1] ip4, int port, bint gso=False):
    """Send rows[0:n] (row i is lengths[i] bytes) as n datagrams to ip4:port, the address as 4
    network-order bytes. With gso, runs of equal-length rows leave as one UDP GSO buffer each
    (the kernel cuts it into the same datagrams; one trip down the stack instead of several).
    Blocks until the kernel took them or failed. Returns (datagrams sent, errno or 0)."""
    cdef mmsghdr msgs[MAX_BATCH]
    cdef iovec iov[MAX_BATCH]
    cdef unsigned char control[MAX_BATCH][CMSG_ROOM]
    cdef Py_ssize_t first[MAX_BATCH + 1]
    cdef sockaddr_in addr
    cdef cmsghdr *cm
    cdef unsigned short seg
    cdef Py_ssize_t i, k, m = 0, bytes_in = 0
    cdef int done = 0, rc = 0, err = 0
    if n > MAX_BATCH or n > rows.shape[0] or n > lengths.shape[0]:
        raise ValueError("batch larger than the rows")
    if ip4.shape[0] != 4 or not 0 < port < 65536:
        raise ValueError("need a 4-byte IPv4 address and a port")
    if n <= 0:
        return 0, 0
    memset(&addr, 0, sizeof(addr))
    addr.sin_family = AF_INET
    addr.sin_port = htons(<unsigned short>port)
    memcpy(&addr.sin_addr, &ip4[0], 4)
    for i in range(n):
        if lengths[i] <= 0 or lengths[i] > rows.shape[1]:
            raise ValueError("row length outside the row")
        iov[i].iov_base = <void *>&rows[i, 0]
        iov[i].iov_len = lengths[i]
    # group rows into messages: one row each, or with gso a run of rows of one length (the
    # last may be shorter) within one IPv4 packet
    for i in range(n):
        if (m and gso and lengths[i] <= lengths[first[m - 1]]
                and lengths[i - 1] == lengths[first[m - 1]]
                and i - first[m - 1] < GSO_MAX_SEGMENTS
                and bytes_in + lengths[i] <= GSO_MAX_BYTES):
            bytes_in += lengths[i]
            continue
        first[m] = i
        bytes_in = lengths[i]
        m += 1
    first[m] = n
    memset(msgs, 0, sizeof(mmsghdr) * m)
    for k in range(m):
        msgs[k].msg_hdr.msg_iov = &iov[first[k]]
        msgs[k].msg_hdr.msg_iovlen = first[k + 1] - first[k]
        msgs[k].msg_hdr.msg_name = &addr
        msgs[k].msg_hdr.msg_namelen = sizeof(addr)
        if first[k + 1] - first[k] > 1:
            msgs[k].msg_hdr.msg_control = control[k]
            msgs[k].msg_hdr.msg_controllen = CMSG_SPACE(sizeof(unsigned short))
            cm = CMSG_FIRSTHDR(&msgs[k].msg_hdr)
            cm.cmsg_level = SOL_UDP
            cm.cmsg_type = UDP_SEGMENT
            cm.cmsg_len = CMSG_LEN(sizeof(unsigned short))
            seg = <unsigned short>lengths[first[k]]
            memcpy(CMSG_DATA(cm), &seg, sizeof(seg))
    with nogil:
        while done < m:
            rc = sendmmsg(fd, &msgs[done], <unsigned int>(m - done), 0)
            if rc < 0:
                if errno == EINTR:
                    continue
                err = errno
                break
            done += rc
    return first[done], err
