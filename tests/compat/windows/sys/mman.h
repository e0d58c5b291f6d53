/* tests/compat/windows/sys/mman.h - what the tests ask of mmap, on Windows.

   The tests share tables between a parent and its ranks with
       mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)
   before dist_spawn.  Windows has no fork: a rank is the program started
   again, which runs main (and these calls) again in the same order.  So the
   n-th such call of every process of one test names the same mapping,
   "Local\disttest.ROOT.n", ROOT being the first process's id (inherited
   through TESTUTIL_ROOT): the first process creates it, the others open
   it.  Only that use of mmap is offered. */
#ifndef DIST_TEST_COMPAT_MMAN_H
#define DIST_TEST_COMPAT_MMAN_H
#ifndef WIN32_LEAN_AND_MEAN
#  define WIN32_LEAN_AND_MEAN
#endif
#include <winsock2.h>
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>

#define PROT_READ 1
#define PROT_WRITE 2
#define MAP_SHARED 1
#define MAP_ANONYMOUS 0x20
#define MAP_ANON MAP_ANONYMOUS
#define MAP_FAILED ((void *)-1)

static __inline __attribute__((unused)) unsigned long testutil_root(int *is_root) {
    static unsigned long root;
    static int me;
    if (!root) {
        const char *v = getenv("TESTUTIL_ROOT");
        if (v && *v) {
            root = strtoul(v, NULL, 10);
        } else {
            char buf[32];
            root = GetCurrentProcessId();
            me = 1;
            snprintf(buf, sizeof buf, "TESTUTIL_ROOT=%lu", root);
            _putenv(buf);                   /* (the children inherit it) */
        }
    }
    if (is_root) *is_root = me;
    return root;
}

static __inline __attribute__((unused)) void *mmap(void *addr, size_t len, int prot, int flags, int fd, long off) {
    static int calls;
    char name[64];
    int root_here;
    unsigned long root = testutil_root(&root_here);
    HANDLE h;
    void *m;
    (void)addr; (void)prot; (void)off;
    if (!(flags & MAP_SHARED) || !(flags & MAP_ANONYMOUS) || fd != -1) { errno = EINVAL; return MAP_FAILED; }
    snprintf(name, sizeof name, "Local\\disttest.%lu.%d", root, ++calls);
    h = root_here ? CreateFileMappingA(INVALID_HANDLE_VALUE, NULL, PAGE_READWRITE, (DWORD)((unsigned long long)len >> 32), (DWORD)len, name)
                  : OpenFileMappingA(FILE_MAP_ALL_ACCESS, FALSE, name);
    if (!h) { errno = ENOMEM; return MAP_FAILED; }
    m = MapViewOfFile(h, FILE_MAP_ALL_ACCESS, 0, 0, len);
    /* the handle stays open: the mapping must outlive a root that unmaps
       while a rank still starts */
    if (!m) { CloseHandle(h); errno = ENOMEM; return MAP_FAILED; }
    return m;
}

static __inline __attribute__((unused)) int munmap(void *addr, size_t len) {
    (void)len;
    return UnmapViewOfFile(addr) ? 0 : -1;
}
#endif
