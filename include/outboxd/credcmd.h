/*
 * credcmd.h: short-lived credentials from commands (deploy/README.md,
 * "Short-lived credentials").
 *
 * postgres.password_command and kafka_auth.token_command are shell
 * commands outboxd runs whenever it needs a credential: /bin/sh -c, stdin
 * /dev/null, in a process group of their own, with the caller's variables
 * added to the environment. Their standard output is the credential and
 * is never logged nor put in an error message; their standard error is
 * read too, and its last line goes into the error message of a command
 * that failed. A command that runs longer than its timeout is killed with
 * its whole process group.
 */
#ifndef OUTBOXD_CREDCMD_H
#define OUTBOXD_CREDCMD_H

#include "outboxd/common.h"

/* The most a command may print on standard output. */
#define OB_CREDCMD_MAX_OUTPUT 65536

/* Run command (the value of the setting key, e.g.
 * "postgres.password_command") for at most timeout_ms, with env (NULL, or
 * "NAME=value" strings ending with NULL) over the process's environment.
 * While it runs, tick (when not NULL) is called about every 100 ms; when
 * it returns false (the daemon is stopping) the command is killed. On
 * success *out is what it printed without one trailing newline (and a
 * carriage return before it), never empty and without NUL bytes; the
 * caller frees it with ob_credcmd_free(). On failure (it could not be
 * started, exited non-zero or on a signal, timed out or was stopped,
 * printed nothing, too much or a NUL byte) *out is NULL and err says so,
 * naming key, the command's first word and its exit status; nothing is
 * logged. */
bool ob_credcmd_run(const char *key, const char *command, int timeout_ms, const char *const *env,
		    bool (*tick)(void), char **out, char *err, size_t err_len) OB_MUST_CHECK;

/* Wipe and free a credential (NULL is a no-op). */
void ob_credcmd_free(char *secret);

/* A token command's output: {"token": "...", "lifetime_ms": N,
 * "principal": "..."}; other members are ignored. */
typedef struct ob_credtoken {
	char *token;
	int64_t lifetime_ms; /* positive: how long from now the token is valid */
	char *principal;
} ob_credtoken;

/* Parse a token command's output into *tok (released with
 * ob_credtoken_clear()). False, with err saying what is missing or wrong
 * (never quoting the output), when it is not such an object. */
bool ob_credtoken_parse(const char *json, size_t len, ob_credtoken *tok, char *err,
			size_t err_len) OB_MUST_CHECK;
void ob_credtoken_clear(ob_credtoken *tok);

#endif
