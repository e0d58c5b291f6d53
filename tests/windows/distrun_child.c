/* A rank for tests/windows/distrun_wine.sh: a Windows program that does,
   in order, what its arguments say.

     env          print one line: the launcher's variables, how many
                  entries of the environment block are named RANK in any
                  case, DIST_STORE_HOSTED, and whether the store distrun
                  hosts answers at MASTER_PORT
     stdin        print the first line read from stdin
     args         print each further argument as hex (from the wide
                  command line, by CommandLineToArgvW), then exit 0
     lines N      print N lines on stdout and N on stderr, quickly
     partial      print "no newline" without a newline
     fail R CODE  rank R exits with CODE (other ranks go on)
     pid DIR      write DIR\pid-RANK: its Windows pid
     await DIR N  wait (10 s at most) until DIR\pid-0 .. pid-(N-1) exist
     hb DIR       rewrite DIR\hb-RANK with a counter every 50 ms, forever
     spawn        start "distrun_child.exe sleep ARGS..." (the rest of the
                  arguments) holding this rank's stdout and stderr, go on
     sleep        sleep forever

   x86_64-w64-mingw32-gcc -std=c11 -O2 -o distrun_child.exe distrun_child.c -lws2_32 */
#include <winsock2.h>
#include <windows.h>
#include <shellapi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *env(const char *n) { const char *v = getenv(n); return v ? v : "-"; }

/* The store distrun hosts: "ok" when MASTER_PORT on 127.0.0.1 answers a
   connection, "remote" for another MASTER_ADDR (another node's),
   "listen-fd-set" when a DIST_STORE_LISTEN_FD reached the rank. */
static const char *store_state(void) {
    WSADATA wd;
    SOCKET c;
    struct sockaddr_in sa;
    if (getenv("DIST_STORE_LISTEN_FD")) return "listen-fd-set";
    if (strcmp(env("MASTER_ADDR"), "127.0.0.1") != 0) return "remote";
    if (WSAStartup(MAKEWORD(2, 2), &wd) != 0) return "no-winsock";
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((u_short)atoi(env("MASTER_PORT")));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
    if (connect(c, (struct sockaddr *)&sa, sizeof sa) != 0) return "no-connect";
    closesocket(c);
    return "ok";
}

/* Entries named RANK, in any case, in the environment block. */
static int count_rank_entries(void) {
    wchar_t *block = GetEnvironmentStringsW();
    int n = 0;
    for (const wchar_t *p = block; p && *p; p += wcslen(p) + 1)
        if (_wcsnicmp(p, L"RANK=", 5) == 0) n++;
    if (block) FreeEnvironmentStringsW(block);
    return n;
}

static void write_file(const char *dir, const char *what, const char *rank, unsigned long v) {
    char path[1024];
    FILE *f;
    snprintf(path, sizeof path, "%s\\%s-%s", dir, what, rank);
    if ((f = fopen(path, "w"))) { fprintf(f, "%lu\n", v); fclose(f); }
}

int main(int argc, char **argv) {
    const char *rank = env("RANK");
    setvbuf(stdout, NULL, _IOFBF, 1 << 16);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "env")) {
            printf("RANK=%s WORLD_SIZE=%s LOCAL_RANK=%s LOCAL_WORLD_SIZE=%s GROUP_RANK=%s MASTER_ADDR=%s "
                   "MASTER_PORT=%s DIST_RUN_ID=%s MARK=%s nrank=%d hosted=%s store=%s\n",
                   rank, env("WORLD_SIZE"), env("LOCAL_RANK"), env("LOCAL_WORLD_SIZE"), env("GROUP_RANK"),
                   env("MASTER_ADDR"), env("MASTER_PORT"), env("DIST_RUN_ID"), env("DISTRUN_TEST_MARK"),
                   count_rank_entries(), env("DIST_STORE_HOSTED"), store_state());
        } else if (!strcmp(argv[i], "stdin")) {
            char line[256] = "";
            if (!fgets(line, sizeof line, stdin)) strcpy(line, "<eof>");
            line[strcspn(line, "\r\n")] = 0;
            printf("stdin=%s\n", line);
        } else if (!strcmp(argv[i], "args")) {
            int n = 0;
            LPWSTR *w = CommandLineToArgvW(GetCommandLineW(), &n);
            /* the words after "args": find it among the wide ones */
            int k = 1;
            while (k < n && wcscmp(w[k], L"args") != 0) k++;
            for (k++; k < n; k++) {
                char u[4096];
                int len = WideCharToMultiByte(CP_UTF8, 0, w[k], -1, u, sizeof u, NULL, NULL);
                printf("arg:");
                for (int b = 0; b + 1 < len; b++) printf("%02x", (unsigned char)u[b]);
                printf("\n");
            }
            fflush(stdout);
            return 0;
        } else if (!strcmp(argv[i], "lines") && i + 1 < argc) {
            int n = atoi(argv[++i]);
            char pad[201];
            memset(pad, 'a' + atoi(rank) % 26, 200);
            pad[200] = 0;
            for (int k = 0; k < n; k++) {
                printf("out rank %s line %d %s\n", rank, k, pad);
                fprintf(stderr, "err rank %s line %d %s\n", rank, k, pad);
            }
        } else if (!strcmp(argv[i], "partial")) {
            printf("no newline");
        } else if (!strcmp(argv[i], "fail") && i + 2 < argc) {
            if (!strcmp(argv[i + 1], rank)) {
                printf("rank %s fails with %s\n", rank, argv[i + 2]);
                fflush(stdout);
                ExitProcess((UINT)strtoul(argv[i + 2], NULL, 0));     /* 32 bits, as Windows has */
            }
            i += 2;
        } else if (!strcmp(argv[i], "pid") && i + 1 < argc) {
            write_file(argv[++i], "pid", rank, GetCurrentProcessId());
        } else if (!strcmp(argv[i], "await") && i + 2 < argc) {
            const char *dir = argv[++i];
            int n = atoi(argv[++i]), k = 0;
            for (int tries = 0; k < n && tries < 1000; tries++) {
                char path[1024];
                snprintf(path, sizeof path, "%s\\pid-%d", dir, k);
                if (GetFileAttributesA(path) != INVALID_FILE_ATTRIBUTES) k++;
                else Sleep(10);
            }
        } else if (!strcmp(argv[i], "hb") && i + 1 < argc) {
            const char *dir = argv[++i];
            fflush(stdout);
            for (unsigned long n = 0;; n++) { write_file(dir, "hb", rank, n); Sleep(50); }
        } else if (!strcmp(argv[i], "spawn")) {
            STARTUPINFOW si;
            PROCESS_INFORMATION pi;
            wchar_t cmd[2048];
            memset(&si, 0, sizeof si);
            si.cb = sizeof si;
            si.dwFlags = STARTF_USESTDHANDLES;
            si.hStdInput = GetStdHandle(STD_INPUT_HANDLE);
            si.hStdOutput = GetStdHandle(STD_OUTPUT_HANDLE);
            si.hStdError = GetStdHandle(STD_ERROR_HANDLE);
            _snwprintf(cmd, 2047, L"\"%hs\" sleep", argv[0]);
            cmd[2047] = 0;
            for (int k = i + 1; k < argc; k++) {
                size_t len = wcslen(cmd);
                _snwprintf(cmd + len, 2047 - len, L" %hs", argv[k]);
            }
            if (!CreateProcessW(NULL, cmd, NULL, NULL, TRUE, 0, NULL, NULL, &si, &pi)) {
                printf("spawn failed: %lu\n", GetLastError());
            } else {
                printf("spawned %lu\n", pi.dwProcessId);
                CloseHandle(pi.hThread);
                CloseHandle(pi.hProcess);
            }
            fflush(stdout);
            return 0;
        } else if (!strcmp(argv[i], "sleep")) {
            fflush(stdout);
            Sleep(INFINITE);
        }
    }
    fflush(stdout);
    return 0;
}
