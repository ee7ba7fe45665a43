/*
 * util.c: the aborting allocator and clocks every module uses.
 */
#include "outboxd/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void
out_of_memory(size_t size)
{
	char msg[96];
	int n = snprintf(msg, sizeof(msg), "outboxd: out of memory (%zu bytes)\n", size);

	if (n > 0 && write(STDERR_FILENO, msg, (size_t)n) < 0)
		abort();
	abort();
}

void *
ob_xmalloc(size_t size)
{
	void *p = malloc(size ? size : 1);

	if (p == NULL)
		out_of_memory(size);
	return p;
}

void *
ob_xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (p == NULL)
		out_of_memory(n * size);
	return p;
}

void *
ob_xrealloc(void *ptr, size_t size)
{
	void *p = realloc(ptr, size ? size : 1);

	if (p == NULL)
		out_of_memory(size);
	return p;
}

char *
ob_xstrdup(const char *s)
{
	return ob_xstrndup(s, strlen(s));
}

char *
ob_xstrndup(const char *s, size_t n)
{
	char *p = ob_xmalloc(n + 1);

	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

char *
ob_xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *out = NULL;

	va_start(ap, fmt);
	if (vasprintf(&out, fmt, ap) < 0)
		out_of_memory(strlen(fmt));
	va_end(ap);
	return out;
}

int64_t
ob_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t
ob_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int
ob_hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}
