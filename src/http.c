/*
 * http.c: /metrics, /healthz and /readyz over libmicrohttpd.
 */
#include "outboxd/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "outboxd/log.h"
#include "outboxd/metrics.h"

/* /healthz fails when the main loop has not turned for this long. */
#define HEALTH_STALL_MS 10000

/*
 * The port must stay answerable to probes while someone holds connections
 * open on it (in Kubernetes it listens beyond loopback, and a failing
 * liveness probe restarts the pod). One client address may hold
 * PER_CLIENT_LIMIT connections: libmicrohttpd accepts and at once closes
 * the ones past that, so a single client cannot fill the server nor the
 * kernel's accept queue. A connection idle for IDLE_TIMEOUT_S seconds (a
 * request sent by halves, a kept-alive scrape connection between scrapes)
 * is closed. CONNECTION_LIMIT bounds the whole. Many addresses flooding
 * the port together are kept from filling it by HEAD_WAIT_LIMIT: at most
 * that many connections may wait for a whole request head (a new
 * connection, or a kept-alive one between requests); when a new connection
 * would be one more, the one that has waited longest is closed. A probe,
 * which sends its request at once, is answered before a flood's newer
 * connections can push it out, and the table always has room for new
 * connections. Polling is epoll (MHD_USE_AUTO), which has no limit on
 * descriptor numbers.
 */
#define PER_CLIENT_LIMIT 8U
#define IDLE_TIMEOUT_S   5U
#define CONNECTION_LIMIT 128U
#define HEAD_WAIT_LIMIT  96U

/* A connection, listed while it waits for a request head. Touched only on
 * libmicrohttpd's one polling thread (every callback runs there). */
typedef struct head_wait {
	struct head_wait *prev, *next;
	MHD_socket fd;
	bool listed;
} head_wait;

struct ob_http {
	struct MHD_Daemon *daemon;
	/* The connections waiting for a request head, oldest first. */
	head_wait *oldest, *newest;
	unsigned waiting;
};

static void
wait_list(ob_http *h, head_wait *w)
{
	if (w->listed)
		return;
	w->prev = h->newest;
	w->next = NULL;
	if (h->newest != NULL)
		h->newest->next = w;
	else
		h->oldest = w;
	h->newest = w;
	w->listed = true;
	h->waiting++;
}

static void
wait_unlist(ob_http *h, head_wait *w)
{
	if (!w->listed)
		return;
	if (w->prev != NULL)
		w->prev->next = w->next;
	else
		h->oldest = w->next;
	if (w->next != NULL)
		w->next->prev = w->prev;
	else
		h->newest = w->prev;
	w->listed = false;
	h->waiting--;
}

/* The head_wait of conn (its socket context). */
static head_wait *
conn_wait(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *info =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return info != NULL ? info->socket_context : NULL;
}

/* A connection opened or closed. A new one that would make more than
 * HEAD_WAIT_LIMIT wait for a request head first closes the one that has
 * waited longest: shutting its socket down makes libmicrohttpd read its
 * end and close it (reporting MHD_CONNECTION_NOTIFY_CLOSED). */
static void
on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
	      enum MHD_ConnectionNotificationCode toe)
{
	ob_http *h = cls;
	head_wait *w = *socket_context;

	if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
		if (w != NULL)
			wait_unlist(h, w);
		free(w);
		*socket_context = NULL;
		return;
	}
	if (h->waiting >= HEAD_WAIT_LIMIT) {
		head_wait *victim = h->oldest;

		wait_unlist(h, victim);
		ob_debug("http: %u connections wait for a request; closing the oldest",
			 HEAD_WAIT_LIMIT);
		(void)shutdown(victim->fd, SHUT_RDWR);
	}
	w = ob_xcalloc(1, sizeof(*w));
	w->fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD)->connect_fd;
	*socket_context = w;
	wait_list(h, w);
}

/* A request ended: a connection kept alive waits for the next head. */
static void
on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
	     enum MHD_RequestTerminationCode toe)
{
	head_wait *w = conn_wait(conn);

	(void)req_cls;
	(void)toe;
	if (w != NULL)
		wait_list(cls, w);
}

static enum MHD_Result
respond(struct MHD_Connection *conn, unsigned status, const char *type, char *body,
	enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, mode);
	enum MHD_Result ret;

	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	ret = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result
on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
	   const char *version, const char *upload_data, size_t *upload_data_size, void **req_cls)
{
	const char *text = "text/plain; charset=utf-8";
	head_wait *w = conn_wait(conn);

	if (w != NULL)
		wait_unlist(cls, w); /* its head came whole */

	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, text, "method not allowed\n",
			       MHD_RESPMEM_PERSISTENT);
	if (strcmp(url, "/metrics") == 0)
		return respond(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8",
			       ob_metrics_render(), MHD_RESPMEM_MUST_FREE);
	if (strcmp(url, "/healthz") == 0) {
		bool ok = ob_metrics_heartbeat_age_ms() < HEALTH_STALL_MS;

		return respond(conn, ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, text,
			       ok ? "ok\n" : "stalled\n", MHD_RESPMEM_PERSISTENT);
	}
	if (strcmp(url, "/readyz") == 0) {
		ob_ready_state st = ob_metrics_ready();
		const char *failover = st == OB_READY_STREAMING ? ob_metrics_failover_word() : NULL;
		uint64_t held = ob_metrics_held_keys();
		char held_line[64] = "";
		char *body;

		/* Held keys do not make it unready: the other keys flow. */
		if (held > 0)
			snprintf(held_line, sizeof(held_line), "held-keys %llu\n",
				 (unsigned long long)held);
		body = ob_xasprintf("%s\n%s%s%s", ob_metrics_ready_word(st),
				    failover ? failover : "", failover ? "\n" : "", held_line);

		return respond(
		    conn, st == OB_READY_STREAMING ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE,
		    text, body, MHD_RESPMEM_MUST_FREE);
	}
	return respond(conn, MHD_HTTP_NOT_FOUND, text, "not found\n", MHD_RESPMEM_PERSISTENT);
}

/* libmicrohttpd's own messages (a client over its limit, a client that
 * went away) go to the log at debug level: a flood must not flood the
 * log. */
static void OB_PRINTF(2, 0) on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	size_t len;

	(void)cls;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	len = strlen(msg);
	while (len > 0 && msg[len - 1] == '\n')
		msg[--len] = '\0';
	ob_debug("http: %s", msg);
}

/* Parse "host:port", "[v6]:port" or ":port" into addr. */
static bool
parse_listen(const char *listen, struct sockaddr_storage *addr)
{
	char host[256];
	const char *colon = strrchr(listen, ':');
	char *end;
	long port;

	memset(addr, 0, sizeof(*addr));
	if (colon == NULL || (size_t)(colon - listen) >= sizeof(host))
		return false;
	port = strtol(colon + 1, &end, 10);
	if (*end != '\0' || port <= 0 || port > 65535)
		return false;
	memcpy(host, listen, (size_t)(colon - listen));
	host[colon - listen] = '\0';
	if (host[0] == '[') {
		struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)addr;
		size_t len = strlen(host);

		if (len < 2 || host[len - 1] != ']')
			return false;
		host[len - 1] = '\0';
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)port);
		return inet_pton(AF_INET6, host + 1, &a6->sin6_addr) == 1;
	}
	struct sockaddr_in *a4 = (struct sockaddr_in *)addr;

	a4->sin_family = AF_INET;
	a4->sin_port = htons((uint16_t)port);
	if (host[0] == '\0')
		return true; /* INADDR_ANY */
	if (strcmp(host, "localhost") == 0)
		strcpy(host, "127.0.0.1");
	return inet_pton(AF_INET, host, &a4->sin_addr) == 1;
}

/* Why addr could not be listened on, which libmicrohttpd does not tell:
 * the errno of binding it once more, as it does (SO_REUSEADDR), or 0 when
 * that bind succeeds (the port came free meanwhile). */
static int
bind_errno(const struct sockaddr_storage *addr)
{
	socklen_t len =
	    addr->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	int one = 1, err = 0;
	int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return errno;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)addr, len) != 0)
		err = errno;
	close(fd);
	return err;
}

bool
ob_http_listen_valid(const char *listen)
{
	struct sockaddr_storage addr;

	return listen[0] == '\0' || parse_listen(listen, &addr);
}

bool
ob_http_start(const char *listen, ob_http **out)
{
	struct sockaddr_storage addr;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
	ob_http *h;

	*out = NULL;
	if (listen[0] == '\0')
		return true;
	if (!parse_listen(listen, &addr)) {
		ob_error("invalid value \"%s\" for http.listen: expected host:port", listen);
		return false;
	}
	if (addr.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	h = ob_xcalloc(1, sizeof(*h));
	h->daemon = MHD_start_daemon(
	    flags, 0, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
	    MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_LIMIT,
	    CONNECTION_LIMIT, MHD_OPTION_PER_IP_CONNECTION_LIMIT, PER_CLIENT_LIMIT,
	    MHD_OPTION_CONNECTION_TIMEOUT, IDLE_TIMEOUT_S, MHD_OPTION_NOTIFY_CONNECTION,
	    on_connection, h, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_END);
	if (h->daemon == NULL) {
		int err = bind_errno(&addr);

		ob_error("could not listen on %s for http.listen: %s; set http.listen to a free "
			 "host:port, or empty it to serve no HTTP",
			 listen, err != 0 ? strerror(err) : "address in use or not available");
		free(h);
		return false;
	}
	ob_info("serving /metrics, /healthz and /readyz on %s", listen);
	*out = h;
	return true;
}

void
ob_http_stop(ob_http *h)
{
	if (h == NULL)
		return;
	MHD_stop_daemon(h->daemon);
	free(h);
}
