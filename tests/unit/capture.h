/*
 * capture.h: capturing what outboxd writes to stderr, for unit tests.
 *
 * The logger writes each line with one write(2) on fd 2, so the capture
 * points fd 2 at an unlinked temporary file and reads it back afterwards.
 * Captures do not nest.
 */
#ifndef OUTBOXD_TEST_CAPTURE_H
#define OUTBOXD_TEST_CAPTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int capture_saved_fd = -1;
static FILE *capture_file;

static inline void
capture_start(void)
{
	fflush(stderr);
	capture_file = tmpfile();
	if (capture_file == NULL)
		abort();
	capture_saved_fd = dup(STDERR_FILENO);
	if (capture_saved_fd < 0 || dup2(fileno(capture_file), STDERR_FILENO) < 0)
		abort();
}

/* Stop capturing and return everything written meanwhile (caller frees). */
static inline char *
capture_end(void)
{
	long len;
	char *out;

	fflush(stderr);
	if (dup2(capture_saved_fd, STDERR_FILENO) < 0)
		abort();
	close(capture_saved_fd);
	capture_saved_fd = -1;
	/* Writes went through another descriptor: ask the kernel for the size. */
	len = (long)lseek(fileno(capture_file), 0, SEEK_END);
	if (len < 0 || fseek(capture_file, 0, SEEK_SET) != 0)
		abort();
	out = malloc((size_t)len + 1);
	if (out == NULL || fread(out, 1, (size_t)len, capture_file) != (size_t)len)
		abort();
	out[len] = '\0';
	fclose(capture_file);
	capture_file = NULL;
	return out;
}

#endif
