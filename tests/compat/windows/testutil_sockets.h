/* tests/compat/windows/testutil_sockets.h - on Windows, the socket helpers
   testutil.h has on POSIX only, for the tests that talk to the library's
   ports themselves.  Include it after testutil.h (and dist.h, for
   read_refusal), under #ifdef _WIN32.

   (tcp_connect, send_all, recv_n and wait_close are testutil.h's own,
   built on Windows too when this directory's <sys/socket.h> came before
   it.)  The same names and contracts as testutil.h's (see there):
   listen_loopback, read_refusal, listening_ports (GetExtendedTcpTable,
   and under Wine, which knows no owners, a walk of the process's handles:
   process_socket_ports).  Windows only: still_listening(pid, port, ms)
   (a port listening_ports gave may be one a process listens on for a
   moment: dist.h's wake-up pairs there); listen_loopback_on(port,
   backlog, &got), a listening socket on 127.0.0.1:port, for a process
   that makes its store socket itself (nothing can hand one down: see
   testutil.h's fork_ranks); free_port_any(family), a free port of either
   family (testutil.h's free_port is IPv4 only there); and
   testcompat_listeners, the host's listeners.  Every socket is
   <sys/socket.h>'s (not inheritable, errno set). */
#ifndef DIST_TEST_COMPAT_TESTUTIL_SOCKETS_H
#define DIST_TEST_COMPAT_TESTUTIL_SOCKETS_H
#ifndef DIST_TESTUTIL_H
#  error "include testutil.h before testutil_sockets.h"
#endif
#include <sys/socket.h>
#include <poll.h>
#include <iphlpapi.h>     /* (its types: the library is loaded when needed) */

/* A loopback port (127.0.0.1 or ::1, by family) nobody listens on right
   now; -1 when it cannot tell. */
static inline __attribute__((unused)) int free_port_any(int family) {
    int s = socket(family, SOCK_STREAM, 0), port = -1;
    struct sockaddr_storage ss;
    socklen_t len;
    if (s < 0) return -1;
    memset(&ss, 0, sizeof ss);
    if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_loopback;
        len = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof *a;
    }
    if (bind(s, (struct sockaddr *)&ss, len) == 0 && getsockname(s, (struct sockaddr *)&ss, &len) == 0)
        port = family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    close(s);
    return port;
}

/* A TCP socket listening on 127.0.0.1:port (0: one the system picks, in
   *got when not NULL), or -1 (errno set). */
static inline __attribute__((unused)) int listen_loopback_on(int port, int backlog, int *got) {
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0), e;
    if (fd < 0) return -1;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, backlog) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0) {
        e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (got) *got = ntohs(sa.sin_port);
    return fd;
}

/* testutil.h's, but not inheritable: nothing is handed down on Windows. */
static inline __attribute__((unused)) int listen_loopback(int backlog, int *port) { return listen_loopback_on(0, backlog, port); }

/* This host's listening TCP sockets from GetExtendedTcpTable (iphlpapi,
   loaded here: the tests link ws2_32 alone), IPv4 (families & 1) and
   IPv6 (families & 2): up to max ports, owners (0: not known) and whether
   IPv6 (v6s may be NULL) into port[], owner[] and v6s[]; how many, or -1.
   (Under Wine a read goes through every connection of the host: tens of
   ms with a thousand open.) */
static inline __attribute__((unused)) int testcompat_listeners(int *port, int *owner, int *v6s, int max, int families) {
    typedef DWORD(WINAPI * table_fn)(PVOID, PDWORD, BOOL, ULONG, TCP_TABLE_CLASS, ULONG);
    static table_fn get_table;
    int n = 0;
    if (!get_table) {
        HMODULE lib = LoadLibraryA("iphlpapi.dll");
        FARPROC f = lib ? GetProcAddress(lib, "GetExtendedTcpTable") : NULL;
        if (!f) return -1;
        memcpy(&get_table, &f, sizeof get_table);
    }
    for (int v6 = 0; v6 < 2; v6++) {
        DWORD size = 0, r = ERROR_INSUFFICIENT_BUFFER;
        void *t = NULL;
        if (!(families & (1 << v6))) continue;
        for (int tries = 0; tries < 4 && r == ERROR_INSUFFICIENT_BUFFER; tries++) {   /* (it may grow between two calls) */
            r = get_table(t, &size, FALSE, v6 ? AF_INET6 : AF_INET, TCP_TABLE_OWNER_PID_LISTENER, 0);
            if (r == ERROR_INSUFFICIENT_BUFFER) {
                free(t);
                if (!(t = malloc(size += 4096))) return -1;
            }
        }
        if (r != NO_ERROR) {          /* (no IPv6 table: IPv4 alone) */
            free(t);
            if (v6 && (families & 1)) break;
            return -1;
        }
        if (v6) {
            const MIB_TCP6TABLE_OWNER_PID *tb = (const MIB_TCP6TABLE_OWNER_PID *)t;
            for (DWORD i = 0; i < tb->dwNumEntries && n < max; i++, n++) {
                port[n] = ntohs((u_short)tb->table[i].dwLocalPort);
                owner[n] = (int)tb->table[i].dwOwningPid;
                if (v6s) v6s[n] = 1;
            }
        } else {
            const MIB_TCPTABLE_OWNER_PID *tb = (const MIB_TCPTABLE_OWNER_PID *)t;
            for (DWORD i = 0; i < tb->dwNumEntries && n < max; i++, n++) {
                port[n] = ntohs((u_short)tb->table[i].dwLocalPort);
                owner[n] = (int)tb->table[i].dwOwningPid;
                if (v6s) v6s[n] = 0;
            }
        }
        free(t);
    }
    return n;
}

/* The local ports of the sockets process `pid` holds (as /proc/PID/fd
   tells on Linux): its handles are walked, each copied here
   (DuplicateHandle) and asked its address.  Handle values are small (the
   lowest free one is taken): the walk covers 4 x (2 x its handle count +
   256).  How many ports, each once, up to max; -1 when the process cannot
   be opened. */
static inline __attribute__((unused)) int process_socket_ports(int pid, int *ports, int max) {
    HANDLE p = OpenProcess(PROCESS_DUP_HANDLE | PROCESS_QUERY_LIMITED_INFORMATION, FALSE, (DWORD)pid);
    DWORD count = 0;
    int np = 0;
    if (!p) return -1;
    if (!GetProcessHandleCount(p, &count)) count = 1024;
    for (uintptr_t h = 4; h <= 4 * (2 * (uintptr_t)count + 256) && np < max; h += 4) {
        HANDLE d;
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int port = -1, dup = 0;
        if (!DuplicateHandle(p, (HANDLE)h, GetCurrentProcess(), &d, 0, FALSE, DUPLICATE_SAME_ACCESS)) continue;
        if (getsockname((int)(intptr_t)d, (struct sockaddr *)&ss, &len) == 0 && (ss.ss_family == AF_INET || ss.ss_family == AF_INET6))
            port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
        CloseHandle(d);
        for (int i = 0; i < np; i++) dup |= ports[i] == port;
        if (port > 0 && !dup) ports[np++] = port;
    }
    CloseHandle(p);
    return np;
}

/* The TCP ports (IPv4 and IPv6) process `pid` listens on: how many, up to
   max, into ports; -1 when it cannot tell.  The host's listeners (above)
   by their owner; where the owners are not known (Wine says 0 for every
   one), those among the ports of pid's sockets (process_socket_ports: a
   connection it accepted has its listener's port too). */
static inline __attribute__((unused)) int listening_ports(int pid, int *ports, int max) {
    int lport[512], lowner[512], mine[1024], nl = testcompat_listeners(lport, lowner, NULL, 512, 3), nm, np = 0, known = 0;
    if (nl < 0) return -1;
    for (int i = 0; i < nl; i++) known |= lowner[i] != 0;
    if (known) {
        for (int i = 0; i < nl; i++) if (lowner[i] == pid && np < max) ports[np++] = lport[i];
        return np;
    }
    if ((nm = process_socket_ports(pid, mine, 1024)) < 0) return -1;
    for (int i = 0; i < nl && np < max; i++) {
        int dup = 0;
        for (int k = 0; k < np; k++) dup |= ports[k] == lport[i];
        for (int k = 0; k < nm && !dup; k++)
            if (mine[k] == lport[i]) { ports[np++] = lport[i]; break; }
    }
    return np;
}

/* Whether process pid still listens on port ms later: a lasting
   listener (a mesh port), not one of the moments dist.h listens for on
   Windows while it makes the loopback pair of a wake-up. */
static inline __attribute__((unused)) int still_listening(int pid, int port, int ms) {
    int ports[16], np;
    sleep_ms(ms);
    np = listening_ports(pid, ports, 16);
    for (int i = 0; i < np; i++) if (ports[i] == port) return 1;
    return 0;
}

#if defined(DIST_H) && defined(DIST_IMPLEMENTATION)
/* Reads a refusal (a hello with status 1, a u32 length, the reason) before
   the deadline: 1 refused (reason), 0 closed without a word, -1 no answer
   in time, -2 something else (what in `reason`). */
static inline __attribute__((unused)) int read_refusal(int fd, long deadline, char *reason, size_t cap) {
    uint8_t b[DIST__HELLO_SIZE + 4];
    dist__hello h;
    char why[200];
    size_t got = 0, len;
    int r = recv_n(fd, b, sizeof b, deadline, &got);
    reason[0] = 0;
    if (r == R_TIMEOUT) { snprintf(reason, cap, "no answer (%zu bytes) in time", got); return -1; }
    if (r == R_EOF && got == 0) return 0;
    if (r == R_EOF) { snprintf(reason, cap, "closed after %zu bytes of an answer", got); return -2; }
    if (dist__hello_decode(b, &h, why, sizeof why) != 0) { snprintf(reason, cap, "an answer that is no hello: %s", why); return -2; }
    if (h.status != 1) { snprintf(reason, cap, "a hello with status %d, not a refusal", (int)h.status); return -2; }
    len = dist__get32(b + DIST__HELLO_SIZE);
    if (len == 0 || len >= cap) { snprintf(reason, cap, "a refusal with a reason of %zu bytes", len); return -2; }
    if (recv_n(fd, (uint8_t *)reason, len, deadline, &got) != R_FULL) { snprintf(reason, cap, "a refusal cut short"); return -2; }
    reason[len] = 0;
    return 1;
}
#endif
#endif
