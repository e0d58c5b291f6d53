/* tests/compat/windows/netinet/in.h - on Windows, what <winsock2.h> and
   <ws2tcpip.h> declare (through the tests' <sys/socket.h>). */
#ifndef DIST_TEST_COMPAT_NETINET_IN_H
#define DIST_TEST_COMPAT_NETINET_IN_H
#include <sys/socket.h>
#endif
