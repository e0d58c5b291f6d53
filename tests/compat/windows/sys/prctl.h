/* tests/compat/windows/sys/prctl.h - prctl(PR_SET_PDEATHSIG, sig) on
   Windows: a rank ends when the process that started it ends.  A thread
   waits on the parent (found through a Toolhelp snapshot) and then ends
   this process with exit code 128 + sig, as <sys/wait.h> here reads a
   signal's death.  Other options fail with EINVAL. */
#ifndef DIST_TEST_COMPAT_PRCTL_H
#define DIST_TEST_COMPAT_PRCTL_H
#ifndef WIN32_LEAN_AND_MEAN
#  define WIN32_LEAN_AND_MEAN
#endif
#include <winsock2.h>
#include <windows.h>
#include <tlhelp32.h>
#include <errno.h>
#include <stdint.h>

#define PR_SET_PDEATHSIG 1

typedef struct testcompat_pdeath { HANDLE parent; UINT code; } testcompat_pdeath;

static __attribute__((unused)) DWORD WINAPI testcompat_pdeath_main(LPVOID arg) {
    const testcompat_pdeath *w = (const testcompat_pdeath *)arg;
    WaitForSingleObject(w->parent, INFINITE);
    TerminateProcess(GetCurrentProcess(), w->code);
    return 0;
}

static __inline __attribute__((unused)) int prctl(int option, unsigned long arg2) {
    static testcompat_pdeath w;
    HANDLE snap, th;
    PROCESSENTRY32 pe;
    DWORD me = GetCurrentProcessId(), parent = 0;
    if (option != PR_SET_PDEATHSIG || arg2 == 0 || w.parent) { errno = EINVAL; return -1; }
    snap = CreateToolhelp32Snapshot(TH32CS_SNAPPROCESS, 0);
    if (snap == INVALID_HANDLE_VALUE) { errno = ESRCH; return -1; }
    pe.dwSize = sizeof pe;
    for (BOOL more = Process32First(snap, &pe); more; more = Process32Next(snap, &pe))
        if (pe.th32ProcessID == me) { parent = pe.th32ParentProcessID; break; }
    CloseHandle(snap);
    if (!parent || !(w.parent = OpenProcess(SYNCHRONIZE, FALSE, parent))) { errno = ESRCH; return -1; }
    w.code = 128 + (UINT)arg2;
    if (!(th = CreateThread(NULL, 0, testcompat_pdeath_main, &w, 0, NULL))) { CloseHandle(w.parent); w.parent = NULL; errno = EAGAIN; return -1; }
    CloseHandle(th);
    return 0;
}
#endif
