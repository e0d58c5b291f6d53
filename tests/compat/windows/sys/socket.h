/* tests/compat/windows/sys/socket.h - the POSIX sockets the tests use, on
   Winsock 2.

   A socket is an int here, as on POSIX (a Winsock handle fits in 32 bits;
   INVALID_SOCKET reads as -1).  What differs from POSIX is put right by
   wrappers the usual names lead to:
     - Winsock is started (WSAStartup) before the first socket;
     - sockets are never inherited (WSA_FLAG_NO_HANDLE_INHERIT): a test's
       child processes are started with handle inheritance on
       (testutil_start_self), and a copy held by a child would keep a
       connection open after this process closed it; SOCK_CLOEXEC is so
       anyway, SOCK_NONBLOCK is FIONBIO;
     - errno is set from WSAGetLastError() where a call fails (WSAEWOULDBLOCK
       reads as EAGAIN, as EINPROGRESS from a non-blocking connect), and
       getsockopt(SO_ERROR) gives errno values;
     - send, recv, setsockopt and getsockopt take void pointers and sizes
       (Winsock's take char pointers and ints); MSG_NOSIGNAL is 0 (Winsock
       raises no SIGPIPE), MSG_DONTWAIT is 0 (the sockets that pass it are
       non-blocking already);
     - close() closes a socket (closesocket) or, failing that (WSAENOTSOCK),
       a C runtime descriptor: mingw's unistd.h close() knows only the
       latter.  read() and write() are left to the C runtime: the tests use
       recv and send on sockets;
     - strerror() names the errno values of sockets (ECONNREFUSED,
       ETIMEDOUT, ...: the C runtime's strerror knows only the first 42,
       and said "Unknown error" for each of them).
   The code of dist.h (included first) is not touched by these macros.
   poll() is in <poll.h>; the helpers testutil.h offers on POSIX only
   (tcp_connect, recv_n, ...) are in <testutil_sockets.h>. */
#ifndef DIST_TEST_COMPAT_SOCKET_H
#define DIST_TEST_COMPAT_SOCKET_H
#ifndef WIN32_LEAN_AND_MEAN
#  define WIN32_LEAN_AND_MEAN
#endif
#include <winsock2.h>
#include <ws2tcpip.h>
#include <windows.h>
#include <errno.h>
#include <io.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>     /* (before the strerror() macro below: it declares strerror) */
#include <sys/types.h>
#include <unistd.h>     /* (before the close() macro below: it declares close) */

#define MSG_NOSIGNAL 0
#define MSG_DONTWAIT 0
#define SOCK_NONBLOCK 0x800
#define SOCK_CLOEXEC 0x80000
#define SHUT_RD SD_RECEIVE
#define SHUT_WR SD_SEND
#define SHUT_RDWR SD_BOTH

/* The errno value for a Winsock error code. */
static __inline __attribute__((unused)) int testcompat_errno_of(int e) {
    switch (e) {
    case WSAEWOULDBLOCK: return EAGAIN;
    case WSAEINPROGRESS: return EINPROGRESS;
    case WSAEALREADY: return EALREADY;
    case WSAEINTR: return EINTR;
    case WSAECONNREFUSED: return ECONNREFUSED;
    case WSAECONNRESET: return ECONNRESET;
    case WSAECONNABORTED: return ECONNABORTED;
    case WSAESHUTDOWN: return EPIPE;
    case WSAENOTCONN: return ENOTCONN;
    case WSAETIMEDOUT: return ETIMEDOUT;
    case WSAEADDRINUSE: return EADDRINUSE;
    case WSAEADDRNOTAVAIL: return EADDRNOTAVAIL;
    case WSAEAFNOSUPPORT: return EAFNOSUPPORT;
    case WSAEMFILE: return EMFILE;
    case WSAENOBUFS: return ENOBUFS;
    case WSAENOTSOCK: return ENOTSOCK;
    case WSAEINVAL: return EINVAL;
    case WSAEFAULT: return EFAULT;
    case WSAEACCES: return EACCES;
    case WSAEISCONN: return EISCONN;
    case WSAENETUNREACH: return ENETUNREACH;
    case WSAEHOSTUNREACH: return EHOSTUNREACH;
    default: return EIO;
    }
}

/* A failed call: errno from Winsock's error; -1. */
static __inline __attribute__((unused)) int testcompat_fail(void) {
    errno = testcompat_errno_of(WSAGetLastError());
    return -1;
}

/* WSAStartup, once per process (it counts its calls: a second one from
   a race is harmless; the process's end cleans up). */
static __inline __attribute__((unused)) void testcompat_net_start(void) {
    static volatile LONG started;
    WSADATA wd;
    if (!started && WSAStartup(MAKEWORD(2, 2), &wd) == 0) InterlockedExchange(&started, 1);
}

static __inline __attribute__((unused)) int testcompat_socket(int family, int type, int proto) {
    SOCKET s;
    testcompat_net_start();
    s = WSASocketW(family, type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC), proto, NULL, 0, WSA_FLAG_OVERLAPPED | WSA_FLAG_NO_HANDLE_INHERIT);
    if (s == INVALID_SOCKET) return testcompat_fail();
    if (type & SOCK_NONBLOCK) {
        u_long on = 1;
        if (ioctlsocket(s, FIONBIO, &on) != 0) { int e = WSAGetLastError(); closesocket(s); WSASetLastError(e); return testcompat_fail(); }
    }
    return (int)s;
}

static __inline __attribute__((unused)) int testcompat_connect(int fd, const struct sockaddr *a, socklen_t len) {
    if (connect((SOCKET)(intptr_t)fd, a, len) == 0) return 0;
    if (WSAGetLastError() == WSAEWOULDBLOCK) { errno = EINPROGRESS; return -1; }   /* a non-blocking connect under way */
    return testcompat_fail();
}

static __inline __attribute__((unused)) int testcompat_bind(int fd, const struct sockaddr *a, socklen_t len) {
    return bind((SOCKET)(intptr_t)fd, a, len) == 0 ? 0 : testcompat_fail();
}

static __inline __attribute__((unused)) int testcompat_listen(int fd, int backlog) {
    return listen((SOCKET)(intptr_t)fd, backlog) == 0 ? 0 : testcompat_fail();
}

/* (the accepted socket is not inheritable: Winsock gives it the
   listening socket's attributes) */
static __inline __attribute__((unused)) int testcompat_accept(int fd, struct sockaddr *a, socklen_t *len) {
    SOCKET s = accept((SOCKET)(intptr_t)fd, a, len);
    return s == INVALID_SOCKET ? testcompat_fail() : (int)s;
}

static __inline __attribute__((unused)) int testcompat_getsockname(int fd, struct sockaddr *a, socklen_t *len) {
    return getsockname((SOCKET)(intptr_t)fd, a, len) == 0 ? 0 : testcompat_fail();
}

static __inline __attribute__((unused)) ssize_t testcompat_send(int fd, const void *b, size_t n, int flags) {
    int k = send((SOCKET)(intptr_t)fd, (const char *)b, n > INT_MAX ? INT_MAX : (int)n, flags);
    return k == SOCKET_ERROR ? testcompat_fail() : k;
}

static __inline __attribute__((unused)) ssize_t testcompat_recv(int fd, void *b, size_t n, int flags) {
    int k = recv((SOCKET)(intptr_t)fd, (char *)b, n > INT_MAX ? INT_MAX : (int)n, flags);
    return k == SOCKET_ERROR ? testcompat_fail() : k;
}

static __inline __attribute__((unused)) int testcompat_setsockopt(int fd, int level, int opt, const void *v, socklen_t len) {
    return setsockopt((SOCKET)(intptr_t)fd, level, opt, (const char *)v, len) == 0 ? 0 : testcompat_fail();
}

static __inline __attribute__((unused)) int testcompat_getsockopt(int fd, int level, int opt, void *v, socklen_t *len) {
    if (getsockopt((SOCKET)(intptr_t)fd, level, opt, (char *)v, len) != 0) return testcompat_fail();
    if (level == SOL_SOCKET && opt == SO_ERROR && *len >= (socklen_t)sizeof(int) && *(int *)v != 0)
        *(int *)v = testcompat_errno_of(*(int *)v);
    return 0;
}

static __inline __attribute__((unused)) int testcompat_close(int fd) {
    int e;
    if (fd < 0) { errno = EBADF; return -1; }
    if (closesocket((SOCKET)(intptr_t)fd) == 0) return 0;
    e = WSAGetLastError();
    if (e == WSAENOTSOCK || e == WSANOTINITIALISED) return _close(fd);   /* a C runtime descriptor */
    errno = testcompat_errno_of(e);
    return -1;
}

/* strerror, with the socket errno values the C runtime does not name. */
static __inline __attribute__((unused)) const char *testcompat_strerror(int e) {
    switch (e) {
    case EINPROGRESS: return "Operation now in progress";
    case EALREADY: return "Operation already in progress";
    case ECONNREFUSED: return "Connection refused";
    case ECONNRESET: return "Connection reset by peer";
    case ECONNABORTED: return "Software caused connection abort";
    case ENOTCONN: return "Transport endpoint is not connected";
    case ETIMEDOUT: return "Connection timed out";
    case EADDRINUSE: return "Address already in use";
    case EADDRNOTAVAIL: return "Cannot assign requested address";
    case EAFNOSUPPORT: return "Address family not supported by protocol";
    case ENOBUFS: return "No buffer space available";
    case ENOTSOCK: return "Socket operation on non-socket";
    case EISCONN: return "Transport endpoint is already connected";
    case ENETUNREACH: return "Network is unreachable";
    case EHOSTUNREACH: return "No route to host";
    case EIO: return "Input/output error (a Winsock error with no errno of its own)";
    default: return strerror(e);
    }
}

#define strerror(e) testcompat_strerror(e)
#define socket(family, type, proto) testcompat_socket(family, type, proto)
#define connect(fd, a, len) testcompat_connect(fd, a, len)
#define bind(fd, a, len) testcompat_bind(fd, a, len)
#define listen(fd, backlog) testcompat_listen(fd, backlog)
#define accept(fd, a, len) testcompat_accept(fd, a, len)
#define getsockname(fd, a, len) testcompat_getsockname(fd, a, len)
#define send(fd, b, n, flags) testcompat_send(fd, b, n, flags)
#define recv(fd, b, n, flags) testcompat_recv(fd, b, n, flags)
#define setsockopt(fd, level, opt, v, len) testcompat_setsockopt(fd, level, opt, v, len)
#define getsockopt(fd, level, opt, v, len) testcompat_getsockopt(fd, level, opt, v, len)
#define close(fd) testcompat_close(fd)
#endif
