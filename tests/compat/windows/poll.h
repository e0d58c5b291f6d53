/* tests/compat/windows/poll.h - poll() on sockets, on Windows: WSAPoll
   (whose struct pollfd and POLL* flags <winsock2.h> has), errno set from
   Winsock's error where it fails.  Sockets only, as the tests use it. */
#ifndef DIST_TEST_COMPAT_POLL_H
#define DIST_TEST_COMPAT_POLL_H
#include <sys/socket.h>

typedef unsigned long nfds_t;

/* (a function, not a macro: testutil.h's job_pool has a member "poll") */
static __inline __attribute__((unused)) int poll(struct pollfd *p, nfds_t n, int ms) {
    int r = WSAPoll(p, (ULONG)n, ms);
    return r == SOCKET_ERROR ? testcompat_fail() : r;
}
#endif
