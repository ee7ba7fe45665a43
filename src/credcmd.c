/*
 * credcmd.c: run a credential command and read what it prints; parse a
 * token command's JSON (credcmd.h).
 *
 * The command starts with posix_spawn (safe in a process with threads:
 * librdkafka's, the HTTP server's) and both pipes are read with poll
 * until they close or the timeout passes; then the process group is
 * killed.
 */
#include "outboxd/credcmd.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* What is kept of the command's standard error. */
#define STDERR_KEEP 1024

/* A pipe being read into a buffer of at most cap bytes. */
typedef struct reader {
	int fd;
	char *buf;
	size_t len, cap;
	bool overflow; /* more came than cap */
} reader;

/* The process's environment with env's variables replacing or added to
 * it; the strings are borrowed, the array is the caller's to free. */
static char **
make_env(const char *const *env)
{
	size_t n = 0, extra = 0, k = 0;
	char **out;

	while (environ[n] != NULL)
		n++;
	while (env != NULL && env[extra] != NULL)
		extra++;
	out = ob_xcalloc(n + extra + 1, sizeof(*out));
	for (size_t i = 0; i < n; i++) {
		bool replaced = false;

		for (size_t j = 0; j < extra && !replaced; j++) {
			size_t name = strcspn(env[j], "=");

			replaced = strncmp(environ[i], env[j], name + 1) == 0;
		}
		if (!replaced)
			out[k++] = environ[i];
	}
	for (size_t j = 0; j < extra; j++)
		out[k++] = (char *)env[j];
	return out;
}

/* Start /bin/sh -c command with its stdout and stderr on the write ends
 * of out_pipe and err_pipe; false (errno set) when it could not start. */
static bool
spawn(const char *command, const char *const *env, int out_pipe, int err_pipe, pid_t *pid)
{
	char *argv[] = {"/bin/sh", "-c", (char *)command, NULL};
	char **envp = make_env(env);
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none, all;
	int rc;

	sigemptyset(&none);
	sigfillset(&all);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, out_pipe, STDOUT_FILENO);
	posix_spawn_file_actions_adddup2(&fa, err_pipe, STDERR_FILENO);
	posix_spawnattr_init(&attr);
	/* A group of its own, to kill it whole; signals as a fresh process
	 * has them (outboxd ignores SIGPIPE). */
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
					    POSIX_SPAWN_SETSIGDEF);
	posix_spawnattr_setpgroup(&attr, 0);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &all);
	rc = posix_spawn(pid, "/bin/sh", &fa, &attr, argv, envp);
	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&fa);
	free(envp);
	errno = rc;
	return rc == 0;
}

/* Read what is there on r; false at end of file or on an error. */
static bool
read_some(reader *r)
{
	char chunk[4096];
	ssize_t n = read(r->fd, chunk, sizeof(chunk));
	size_t take;

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return true;
	if (n <= 0)
		return false;
	take = (size_t)n;
	if (take > r->cap - r->len) {
		take = r->cap - r->len;
		r->overflow = true;
	}
	memcpy(r->buf + r->len, chunk, take);
	r->len += take;
	return true;
}

/* How often the caller's tick runs while the command does. */
#define TICK_MS 100

/* Read both pipes until they close, the deadline passes, stdout holds
 * too much or tick (when not NULL) returns false (then *stopped); true
 * when both closed in time. */
static bool
read_pipes(reader *out, reader *err, int64_t deadline, bool (*tick)(void), bool *stopped)
{
	while ((out->fd >= 0 || err->fd >= 0) && !out->overflow) {
		struct pollfd pfd[2] = {{out->fd, POLLIN, 0}, {err->fd, POLLIN, 0}};
		int64_t left = deadline - ob_mono_ms();

		*stopped = left > 0 && tick != NULL && !tick();
		if (left <= 0 || *stopped)
			return false;
		if (poll(pfd, 2, left < TICK_MS ? (int)left : TICK_MS) < 0 && errno != EINTR)
			return false;
		for (int i = 0; i < 2; i++) {
			reader *r = i == 0 ? out : err;

			if (pfd[i].revents != 0 && r->fd >= 0 && !read_some(r)) {
				close(r->fd);
				r->fd = -1;
			}
		}
	}
	return !out->overflow;
}

/* Wait for pid until the deadline; true with *status when it ended. */
static bool
wait_child(pid_t pid, int64_t deadline, int *status)
{
	for (;;) {
		pid_t got = waitpid(pid, status, WNOHANG);

		if (got == pid)
			return true;
		if (got < 0 && errno != EINTR)
			return false;
		if (ob_mono_ms() >= deadline)
			return false;
		nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
	}
}

/* The last non-empty line of what the command wrote to stderr, into buf
 * as ": line" ("" when there is none). */
static void
last_line(const reader *r, char *buf, size_t size)
{
	size_t end = r->len, start;

	while (end > 0 &&
	       (r->buf[end - 1] == '\n' || r->buf[end - 1] == '\r' || r->buf[end - 1] == ' '))
		end--;
	start = end;
	while (start > 0 && r->buf[start - 1] != '\n')
		start--;
	buf[0] = '\0';
	if (end > start)
		snprintf(buf, size, ": %.*s", (int)(end - start), r->buf + start);
}

/* The command's first word, for messages. */
static void
first_word(const char *command, char *buf, size_t size)
{
	const char *p = command + strspn(command, " \t");

	snprintf(buf, size, "%.*s", (int)strcspn(p, " \t\n;|&"), p);
}

bool
ob_credcmd_run(const char *key, const char *command, int timeout_ms, const char *const *env,
	       bool (*tick)(void), char **out, char *err, size_t err_len)
{
	int64_t deadline = ob_mono_ms() + timeout_ms;
	char errbuf[STDERR_KEEP], word[128], tail[STDERR_KEEP + 3];
	reader ro = {-1, ob_xmalloc(OB_CREDCMD_MAX_OUTPUT), 0, OB_CREDCMD_MAX_OUTPUT, false};
	reader re = {-1, errbuf, 0, sizeof(errbuf), false};
	int po[2] = {-1, -1}, pe[2] = {-1, -1}, status = 0;
	bool done = false, stopped = false, ended;
	pid_t pid;

	*out = NULL;
	first_word(command, word, sizeof(word));
	if (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0 ||
	    !spawn(command, env, po[1], pe[1], &pid)) {
		snprintf(err, err_len, "%s (\"%s\") could not be started: %s", key, word,
			 strerror(errno));
		goto out;
	}
	close(po[1]);
	close(pe[1]);
	po[1] = pe[1] = -1;
	ro.fd = po[0];
	re.fd = pe[0];
	po[0] = pe[0] = -1;
	done = read_pipes(&ro, &re, deadline, tick, &stopped);
	ended = done && wait_child(pid, deadline, &status);
	if (!ended) {
		kill(-pid, SIGKILL);
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
	}
	last_line(&re, tail, sizeof(tail));
	done = false;
	if (ro.overflow)
		snprintf(err, err_len, "%s (\"%s\") printed more than %d bytes", key, word,
			 OB_CREDCMD_MAX_OUTPUT);
	else if (stopped)
		snprintf(err, err_len, "%s (\"%s\") was killed: outboxd is stopping", key, word);
	else if (!ended)
		snprintf(err, err_len, "%s (\"%s\") timed out after %d ms and was killed%s", key,
			 word, timeout_ms, tail);
	else if (WIFSIGNALED(status))
		snprintf(err, err_len, "%s (\"%s\") was killed by signal %d%s", key, word,
			 WTERMSIG(status), tail);
	else if (WEXITSTATUS(status) != 0)
		snprintf(err, err_len, "%s (\"%s\") exited with status %d%s", key, word,
			 WEXITSTATUS(status), tail);
	else
		done = true;
	if (done) {
		if (ro.len > 0 && ro.buf[ro.len - 1] == '\n')
			ro.len--;
		if (ro.len > 0 && ro.buf[ro.len - 1] == '\r')
			ro.len--;
		if (ro.len == 0 || memchr(ro.buf, '\0', ro.len) != NULL) {
			snprintf(err, err_len, "%s (\"%s\") exited with status 0 but printed %s%s",
				 key, word, ro.len == 0 ? "nothing" : "a NUL byte", tail);
			done = false;
		} else {
			*out = ob_xstrndup(ro.buf, ro.len);
		}
	}
out:
	for (int i = 0; i < 2; i++) {
		if (po[i] >= 0)
			close(po[i]);
		if (pe[i] >= 0)
			close(pe[i]);
	}
	if (ro.fd >= 0)
		close(ro.fd);
	if (re.fd >= 0)
		close(re.fd);
	explicit_bzero(ro.buf, ro.cap);
	free(ro.buf);
	return done;
}

void
ob_credcmd_free(char *secret)
{
	if (secret == NULL)
		return;
	explicit_bzero(secret, strlen(secret));
	free(secret);
}

bool
ob_credtoken_parse(const char *json, size_t len, ob_credtoken *tok, char *err, size_t err_len)
{
	json_error_t jerr;
	json_t *root = json_loadb(json, len, 0, &jerr);
	json_t *token = json_object_get(root, "token");
	json_t *lifetime = json_object_get(root, "lifetime_ms");
	json_t *principal = json_object_get(root, "principal");
	bool ok = false;

	memset(tok, 0, sizeof(*tok));
	/* jansson's message quotes the text near the error: never shown. */
	if (!json_is_object(root))
		snprintf(err, err_len, "is not a JSON object (line %d, column %d)",
			 root == NULL ? jerr.line : 1, root == NULL ? jerr.column : 1);
	else if (!json_is_string(token) || json_string_length(token) == 0)
		snprintf(err, err_len, "has no \"token\" string");
	else if (!json_is_integer(lifetime) || json_integer_value(lifetime) <= 0)
		snprintf(err, err_len, "has no positive integer \"lifetime_ms\"");
	else if (!json_is_string(principal) || json_string_length(principal) == 0)
		snprintf(err, err_len, "has no \"principal\" string");
	else
		ok = true;
	if (ok) {
		tok->token = ob_xstrdup(json_string_value(token));
		tok->lifetime_ms = json_integer_value(lifetime);
		tok->principal = ob_xstrdup(json_string_value(principal));
	}
	json_decref(root);
	return ok;
}

void
ob_credtoken_clear(ob_credtoken *tok)
{
	ob_credcmd_free(tok->token);
	free(tok->principal);
	memset(tok, 0, sizeof(*tok));
}
