# Sending a batch of framed rows to one IPv4 peer with sendmmsg(2), and the pacer's token
# bucket, shared by _udp_c.pyx (the transport's send_batch; send_rows_paced, the floor's) and
# _wire_c.pyx (send_paced: a whole round framed, paced and sent with the GIL released once),
# included textually by both. Linux only.

from libc.errno cimport errno, EINTR, EINVAL, EIO
from libc.string cimport memcpy, memset
from posix.time cimport timespec, nanosleep, clock_gettime
from posix.time cimport CLOCK_MONOTONIC

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
    struct cmsghdr:
        size_t cmsg_len
        int cmsg_level
        int cmsg_type
    int recvmmsg(int sockfd, mmsghdr *msgvec, unsigned int vlen, int flags, void *timeout)
    int sendmmsg(int sockfd, mmsghdr *msgvec, unsigned int vlen, int flags)
    cmsghdr *CMSG_FIRSTHDR(msghdr *m)
    unsigned char *CMSG_DATA(cmsghdr *c)
    size_t CMSG_SPACE(size_t n)
    size_t CMSG_LEN(size_t n)
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
DEF SOL_UDP = 17
DEF UDP_SEGMENT = 103   # linux/udp.h: send one buffer as datagrams of this size (UDP GSO)
DEF GSO_MAX_BYTES = 65507  # one IPv4 packet's UDP payload
DEF GSO_MAX_SEGMENTS = 64
DEF CMSG_ROOM = 32


cdef inline void _sleep_us(long us) noexcept nogil:
    cdef timespec t
    if us > 0:
        t.tv_sec = us // 1000000
        t.tv_nsec = (us % 1000000) * 1000
        nanosleep(&t, NULL)


cdef inline double _monotonic() noexcept nogil:
    cdef timespec t
    clock_gettime(CLOCK_MONOTONIC, &t)
    return t.tv_sec + t.tv_nsec * 1e-9


cdef inline double _pace(double next_at, Py_ssize_t nbytes, double rate,
                         double burst_s) noexcept nogil:
    """The token bucket of transport/pacing.py's Pacer: book nbytes at `rate` bytes a second on
    the clock reading next_at (when what was booked so far has left, never more than burst_s
    in the past), sleep until they may leave, and return the new next_at. A wait under
    EARLY_S is not slept: the burst absorbs it."""
    cdef double now = _monotonic(), ahead
    if next_at < now - burst_s:  # idle: do not save up an unbounded burst
        next_at = now - burst_s
    next_at += nbytes / rate
    ahead = next_at - now
    if ahead > 0.0005:  # pacing.EARLY_S
        _sleep_us(<long>(ahead * 1e6))
    return next_at


cdef int _send_rows(int fd, const unsigned char *rows, Py_ssize_t stride,
                    const Py_ssize_t *lengths, Py_ssize_t n, const sockaddr_in *addr, bint gso,
                    Py_ssize_t *sent) noexcept nogil:
    """Send rows 0..n-1 (row i at rows + i * stride, lengths[i] bytes; n <= MAX_BATCH) as n
    datagrams to addr. With gso, runs of equal-length rows leave as one UDP GSO buffer each
    (the kernel cuts it into the same datagrams; one trip down the stack instead of several).
    Blocks until the kernel took them or failed: *sent is how many it took; returns errno or 0."""
    cdef mmsghdr msgs[MAX_BATCH]
    cdef iovec iov[MAX_BATCH]
    cdef unsigned char control[MAX_BATCH][CMSG_ROOM]
    cdef Py_ssize_t first[MAX_BATCH + 1]
    cdef cmsghdr *cm
    cdef unsigned short seg
    cdef Py_ssize_t i, k, m = 0, bytes_in = 0
    cdef int done = 0, rc = 0
    sent[0] = 0
    for i in range(n):
        iov[i].iov_base = <void *>(rows + i * stride)
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
        msgs[k].msg_hdr.msg_name = <void *>addr
        msgs[k].msg_hdr.msg_namelen = sizeof(sockaddr_in)
        if first[k + 1] - first[k] > 1:
            msgs[k].msg_hdr.msg_control = control[k]
            msgs[k].msg_hdr.msg_controllen = CMSG_SPACE(sizeof(unsigned short))
            cm = CMSG_FIRSTHDR(&msgs[k].msg_hdr)
            cm.cmsg_level = SOL_UDP
            cm.cmsg_type = UDP_SEGMENT
            cm.cmsg_len = CMSG_LEN(sizeof(unsigned short))
            seg = <unsigned short>lengths[first[k]]
            memcpy(CMSG_DATA(cm), &seg, sizeof(seg))
    while done < m:
        rc = sendmmsg(fd, &msgs[done], <unsigned int>(m - done), 0)
        if rc < 0:
            if errno == EINTR:
                continue
            sent[0] = first[done]
            return errno
        done += rc
    sent[0] = n
    return 0


cdef int _send_rows_any(int fd, const unsigned char *rows, Py_ssize_t stride,
                        const Py_ssize_t *lengths, Py_ssize_t n, const sockaddr_in *addr,
                        bint *gso, Py_ssize_t *sent) noexcept nogil:
    """_send_rows, and when a kernel refuses UDP GSO (EINVAL, EIO: one without it, or a device
    that cannot checksum it) the rest without it, which *gso then stays."""
    cdef Py_ssize_t first
    cdef int err = _send_rows(fd, rows, stride, lengths, n, addr, gso[0], sent)
    if err and gso[0] and (err == EINVAL or err == EIO):
        gso[0] = False
        first = sent[0]
        err = _send_rows(fd, rows + first * stride, stride, lengths + first, n - first, addr,
                         False, sent)
        sent[0] += first
    return err


cdef int _send_batch_paced(int fd, const unsigned char *rows, Py_ssize_t stride,
                           const Py_ssize_t *lengths, Py_ssize_t k, const sockaddr_in *addr,
                           bint *gso, Py_ssize_t overhead, double rate, double burst_s,
                           double *next_at, Py_ssize_t *sent, Py_ssize_t *total) noexcept nogil:
    """One batch of a paced round: book rows 0..k-1 in the bucket as their lengths plus
    `overhead` each (rate 0: unpaced), wait for it, send them with _send_rows_any, and add the
    bytes of those sent to *total. Returns errno or 0; *sent is how many left."""
    cdef Py_ssize_t i, nbytes = k * overhead
    cdef int err
    for i in range(k):
        nbytes += lengths[i]
    if rate > 0:
        next_at[0] = _pace(next_at[0], nbytes, rate, burst_s)
    err = _send_rows_any(fd, rows, stride, lengths, k, addr, gso, sent)
    for i in range(sent[0]):
        total[0] += lengths[i]
    return err


cdef int _address(const unsigned char[::1] ip4, int port, sockaddr_in *addr) except -1:
    if ip4.shape[0] != 4 or not 0 < port < 65536:
        raise ValueError("need a 4-byte IPv4 address and a port")
    memset(addr, 0, sizeof(sockaddr_in))
    addr.sin_family = AF_INET
    addr.sin_port = htons(<unsigned short>port)
    memcpy(&addr.sin_addr, &ip4[0], 4)
    return 0
