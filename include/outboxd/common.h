/*
 * common.h: definitions every outboxd module shares.
 *
 * OB_MUST_CHECK marks fallible functions: they return false (or a non-OK
 * status) after logging the failure once, and the caller must look at the
 * result. ob_xmalloc and friends abort on out-of-memory, which is the one
 * failure outboxd does not try to survive (tests/README.md, "Code style").
 */
#ifndef OUTBOXD_COMMON_H
#define OUTBOXD_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OB_MUST_CHECK    __attribute__((warn_unused_result))
#define OB_PRINTF(f, a)  __attribute__((format(printf, f, a)))
#define OB_ARRAY_LEN(a)  (sizeof(a) / sizeof((a)[0]))
/* The expansion of macro x as a string literal. */
#define OB_STRINGIFY(x)  OB_STRINGIFY_(x)
#define OB_STRINGIFY_(x) #x

/* Allocation that never returns NULL: on failure it logs and aborts. */
void *ob_xmalloc(size_t size);
void *ob_xcalloc(size_t n, size_t size);
void *ob_xrealloc(void *ptr, size_t size);
char *ob_xstrdup(const char *s);
char *ob_xstrndup(const char *s, size_t n);
char *ob_xasprintf(const char *fmt, ...) OB_PRINTF(1, 2);

/* The value (0-15) of the hex digit c, either case; -1 if c is not one. */
int ob_hex_digit(char c);

/* Wall-clock time in microseconds and milliseconds since the Unix epoch. */
int64_t ob_now_us(void);
/* Monotonic time in milliseconds, for intervals and timeouts. */
int64_t ob_mono_ms(void);

#endif
