/* tests/compat/windows/sys/wait.h - child processes as the tests see them
   (waitpid, kill, wait statuses), on Windows.

   A child is a process this program started (testutil_start_self, which
   testutil.h's fork_ranks uses: Windows cannot fork); its handle is kept
   here by pid.  A wait status is POSIX's: the exit code << 8, or for a
   process ended by kill() (TerminateProcess with 128 + the signal, from
   any process of the test: exit codes 137 and 143 read as SIGKILL and
   SIGTERM) the signal.  kill() offers SIGKILL and SIGTERM (both end the
   process at once) and signal 0 (is it there?), on any process; others
   fail with ENOSYS: there is no SIGSTOP on Windows. */
#ifndef DIST_TEST_COMPAT_WAIT_H
#define DIST_TEST_COMPAT_WAIT_H
#ifndef WIN32_LEAN_AND_MEAN
#  define WIN32_LEAN_AND_MEAN
#endif
#include <winsock2.h>
#include <windows.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SIGKILL
#  define SIGKILL 9
#endif
#ifndef SIGALRM
#  define SIGALRM 14
#endif
#ifndef SIGCONT
#  define SIGCONT 18
#endif
#ifndef SIGSTOP
#  define SIGSTOP 19
#endif
#ifndef SIGPIPE
#  define SIGPIPE 13
#endif
#define WNOHANG 1
#define WIFEXITED(st)   (((st) & 0x7f) == 0)
#define WEXITSTATUS(st) (((st) >> 8) & 0xff)
#define WIFSIGNALED(st) (((st) & 0x7f) != 0)
#define WTERMSIG(st)    ((st) & 0x7f)

#define TESTUTIL_MAX_CHILDREN 256
static struct { int pid; HANDLE h; int signaled; } testutil_children[TESTUTIL_MAX_CHILDREN];

/* Starts this program again (its command line), with `assignment`
   ("NAME=value") added to its environment and the standard handles
   inherited: its pid, or -1. */
static __inline __attribute__((unused)) int testutil_start_self(const char *assignment) {
    STARTUPINFOA si;
    PROCESS_INFORMATION pi;
    char *cmd = _strdup(GetCommandLineA()), name[128];
    const char *eq = strchr(assignment, '=');
    int slot = -1, ok;
    for (int i = 0; i < TESTUTIL_MAX_CHILDREN && slot < 0; i++) if (!testutil_children[i].h) slot = i;
    if (!cmd || !eq || slot < 0 || (size_t)(eq - assignment) >= sizeof name) { free(cmd); errno = EAGAIN; return -1; }
    memcpy(name, assignment, (size_t)(eq - assignment));
    name[eq - assignment] = 0;
    _putenv(assignment);
    memset(&si, 0, sizeof si);
    si.cb = sizeof si;
    /* (Wine, on a loaded machine, fails a start now and then: test_launches
       saw "could not start its process" once in CI; a few more tries) */
    for (int tries = 0; !(ok = CreateProcessA(NULL, cmd, NULL, NULL, TRUE, 0, NULL, NULL, &si, &pi)) && tries < 5; tries++) Sleep(50);
    {
        char clear[140];
        snprintf(clear, sizeof clear, "%s=", name);
        _putenv(clear);
    }
    free(cmd);
    if (!ok) { errno = EAGAIN; return -1; }
    CloseHandle(pi.hThread);
    testutil_children[slot].pid = (int)pi.dwProcessId;
    testutil_children[slot].h = pi.hProcess;
    testutil_children[slot].signaled = 0;
    return (int)pi.dwProcessId;
}

static __inline __attribute__((unused)) int testutil_child_slot(int pid) {
    for (int i = 0; i < TESTUTIL_MAX_CHILDREN; i++) if (testutil_children[i].h && testutil_children[i].pid == pid) return i;
    return -1;
}

static __inline __attribute__((unused)) int waitpid(int pid, int *st, int options) {
    int i = testutil_child_slot(pid);
    DWORD code = 0;
    if (i < 0) { errno = ECHILD; return -1; }
    if (WaitForSingleObject(testutil_children[i].h, (options & WNOHANG) ? 0 : INFINITE) != WAIT_OBJECT_0) return 0;
    GetExitCodeProcess(testutil_children[i].h, &code);
    if (st) *st = testutil_children[i].signaled ? testutil_children[i].signaled
                  : code == 128 + SIGKILL ? SIGKILL : code == 128 + SIGTERM ? SIGTERM : (int)(code & 0xff) << 8;
    CloseHandle(testutil_children[i].h);
    testutil_children[i].h = NULL;
    return pid;
}

static __inline __attribute__((unused)) int kill(int pid, int sig) {
    int i = testutil_child_slot(pid);
    if (i < 0) {                              /* not our child: a sibling, say */
        HANDLE h = OpenProcess(PROCESS_TERMINATE | SYNCHRONIZE, FALSE, (DWORD)pid);
        int r = -1;
        if (!h) { errno = ESRCH; return -1; }
        if (sig == 0) r = WaitForSingleObject(h, 0) == WAIT_TIMEOUT ? 0 : -1;
        else if (sig == SIGKILL || sig == SIGTERM) r = TerminateProcess(h, 128 + (UINT)sig) ? 0 : -1;
        else errno = ENOSYS;
        CloseHandle(h);
        return r;
    }
    if (sig == 0) return WaitForSingleObject(testutil_children[i].h, 0) == WAIT_TIMEOUT ? 0 : (errno = ESRCH, -1);
    if (sig != SIGKILL && sig != SIGTERM) { errno = ENOSYS; return -1; }
    if (WaitForSingleObject(testutil_children[i].h, 0) == WAIT_TIMEOUT && TerminateProcess(testutil_children[i].h, 128 + (UINT)sig))
        testutil_children[i].signaled = sig;
    return 0;
}
/* raise(SIGKILL) or raise(SIGTERM): this process ends at once, as kill()
   would end it; other signals go to the C library's raise. */
static __inline __attribute__((unused)) int testutil_raise(int sig) {
    if (sig == SIGKILL || sig == SIGTERM) { fflush(NULL); TerminateProcess(GetCurrentProcess(), 128 + (UINT)sig); }
    return (raise)(sig);
}
#define raise(sig) testutil_raise(sig)
#endif
