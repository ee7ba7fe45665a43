/*
 * fixedport.c: the test broker's listeners on fixed ports (fixedport.h).
 *
 * ob-mockbroker defines bind: librdkafka's mock cluster, a shared library,
 * calls this definition rather than libc's (dlsym RTLD_NEXT), as it calls
 * seqcheck.c's accept and recv. Only IPv4 binds to port 0 are changed: the
 * mock cluster binds a broker's listener to its own port again when the
 * broker comes back up (`up`), and that bind is passed on as it is.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "fixedport.h"

#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int base_port;   /* 0: the kernel picks */
static int next_offset; /* the next fixed listener's port is base_port + this */

void
ob_fixedport_set(int base)
{
	pthread_mutex_lock(&lock);
	base_port = base;
	next_offset = 0;
	pthread_mutex_unlock(&lock);
}

int
bind(int fd, const struct sockaddr *addr, socklen_t len)
{
	static int (*real_bind)(int, const struct sockaddr *, socklen_t);
	struct sockaddr_in fixed;

	if (real_bind == NULL) {
		real_bind =
		    (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "bind");
		if (real_bind == NULL) {
			fprintf(stderr, "ob-mockbroker: fixedport: no bind in libc\n");
			abort();
		}
	}
	pthread_mutex_lock(&lock);
	if (base_port == 0 || addr->sa_family != AF_INET || len < (socklen_t)sizeof(fixed) ||
	    ((const struct sockaddr_in *)addr)->sin_port != 0) {
		pthread_mutex_unlock(&lock);
		return real_bind(fd, addr, len);
	}
	fixed = *(const struct sockaddr_in *)addr;
	fixed.sin_port = htons((uint16_t)(base_port + next_offset));
	if (real_bind(fd, (const struct sockaddr *)&fixed, sizeof(fixed)) != 0) {
		/* librdkafka 2.0.2 asserts while it tears down a cluster whose
		 * broker could not bind: say why and end here instead. */
		fprintf(stderr, "ob-mockbroker: could not listen on 127.0.0.1:%d: %s\n",
			base_port + next_offset, strerror(errno));
		_exit(1);
	}
	next_offset++;
	pthread_mutex_unlock(&lock);
	return 0;
}
