/* tests/compat/windows/arpa/inet.h - on Windows, what <winsock2.h> and
   <ws2tcpip.h> declare (through the tests' <sys/socket.h>). */
#ifndef DIST_TEST_COMPAT_ARPA_INET_H
#define DIST_TEST_COMPAT_ARPA_INET_H
#include <sys/socket.h>
#endif
