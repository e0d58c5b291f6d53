/* tests/compile/msc_atomics.h - stand-ins for the MSVC intrinsics dist.h's
   MSVC atomics use, made of gcc/clang builtins, so that the compile checks
   can build and run that branch here (tests/compile/windows.sh):
       cc -include tests/compile/msc_atomics.h -DDIST__MSC_ATOMICS ...
   The same calls and argument types as <intrin.h> declares them, except
   that a 32-bit operand is an int (long has 64 bits here:
   DIST__MSC_LONG64). */
#ifndef DIST_TEST_MSC_ATOMICS_H
#define DIST_TEST_MSC_ATOMICS_H
#define DIST__MSC_LONG64 1
#define __int64 long long
#define _ReadWriteBarrier() __atomic_signal_fence(__ATOMIC_SEQ_CST)
#define MemoryBarrier() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#if defined(__x86_64__) || defined(__i386__)
#  define _mm_pause() __builtin_ia32_pause()
#else
#  define _mm_pause() ((void)0)
#endif
static inline char _InterlockedExchangeAdd8(volatile char *p, char v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline short _InterlockedExchangeAdd16(volatile short *p, short v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline char _InterlockedCompareExchange8(volatile char *p, char x, char cmp) {
    __atomic_compare_exchange_n(p, &cmp, x, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp;
}
static inline short _InterlockedCompareExchange16(volatile short *p, short x, short cmp) {
    __atomic_compare_exchange_n(p, &cmp, x, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp;
}
static inline int _InterlockedExchangeAdd(volatile int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline long long _InterlockedExchangeAdd64(volatile long long *p, long long v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline int _InterlockedCompareExchange(volatile int *p, int x, int cmp) {
    __atomic_compare_exchange_n(p, &cmp, x, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp;
}
static inline long long _InterlockedCompareExchange64(volatile long long *p, long long x, long long cmp) {
    __atomic_compare_exchange_n(p, &cmp, x, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp;
}
#endif
