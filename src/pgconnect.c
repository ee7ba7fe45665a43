/*
 * pgconnect.c: open a Postgres connection with outboxd's settings, judge
 * the attempt, and tell a refusal once. The publisher's connections
 * (pgrepl.c) and the inbox's (inboxdb.c) all come from here.
 */
#include "outboxd/pgconnect.h"
#include "outboxd/pglayer.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "outboxd/awsiam.h"
#include "outboxd/credcmd.h"
#include "outboxd/log.h"
#include "outboxd/metrics.h"
#include "outboxd/runtime.h"

/* Settings pinned on every connection so outboxd does not depend on the
 * database's or the role's defaults: how wal2json renders values (bytea
 * as hex, timestamps in ISO form, intervals in the postgres style, floats
 * with every digit), and no timeouts of statements or sessions. The
 * backlog keeps a transaction open (its cursor, and the walsender that
 * exported the snapshot) while the broker acknowledges its rows, and its
 * first FETCH may sort for long; an inbox transaction may wait for its
 * locks. A database's or role's statement_timeout,
 * idle_in_transaction_session_timeout or idle_session_timeout would end
 * those attempts every time, and outboxd would retry them forever. */
#define PINNED_OPTIONS                                                                             \
	"-c bytea_output=hex -c datestyle=ISO -c intervalstyle=postgres -c extra_float_digits=3 "  \
	"-c idle_in_transaction_session_timeout=0 -c idle_session_timeout=0 -c "                   \
	"statement_timeout=0"

/* The latest attempt's refusal, and the one last logged in full (a
 * refusal is logged again only when its reason changes, or after the
 * connection worked or failed for another reason). Only the thread that
 * connects touches these. */
static struct {
	ob_pg_refusal refusal;
	ob_pg_refusal logged;
	char fix[1024];
} last;

/* How the latest attempt's credential came about (for `outboxd check`
 * and the fix of a refused password): whether postgres.password_command
 * ran or an RDS IAM token was signed, and what went wrong with it. */
static struct {
	bool command;
	bool aws_iam;
	bool failed;
	bool connected; /* the attempt connected */
	int64_t ms;
	char err[1024];
	char source[512]; /* aws_iam: what was signed, and with which credentials */
} cred;

/* libpq's message without the LOCATION lines of a verbose message and
 * without trailing newlines. */
static void
clean_message(const char *msg, char *buf, size_t size)
{
	size_t len = 0;

	for (const char *line = msg; *line && len + 1 < size;) {
		const char *end = strchr(line, '\n');
		size_t n = end ? (size_t)(end - line) + 1 : strlen(line);

		if (strncmp(line, "LOCATION:  ", 11) != 0) {
			if (n > size - 1 - len)
				n = size - 1 - len;
			memcpy(buf + len, line, n);
			len += n;
		}
		line += end ? (size_t)(end - line) + 1 : n;
	}
	while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == ' '))
		len--;
	buf[len] = '\0';
}

/* This host's address as a pg_hba.conf address ("10.1.2.3/32"): the local
 * address the kernel picks toward the server's address (a UDP socket
 * sends nothing on connect). Behind NAT the server sees another address;
 * its own message names that one. False when unknown. */
static bool
hba_address(PGconn *conn, char *buf, size_t size)
{
	const char *server = PQhostaddr(conn);
	struct addrinfo hints, *ai = NULL;
	struct sockaddr_storage local;
	socklen_t len = sizeof(local);
	char addr[INET6_ADDRSTRLEN];
	bool ok = false;
	int fd;

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
	hints.ai_socktype = SOCK_DGRAM;
	if (server == NULL || server[0] == '\0' || getaddrinfo(server, "5432", &hints, &ai) != 0)
		return false;
	fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
	    getsockname(fd, (struct sockaddr *)&local, &len) == 0) {
		if (local.ss_family == AF_INET)
			ok = inet_ntop(AF_INET, &((struct sockaddr_in *)&local)->sin_addr, addr,
				       sizeof(addr)) != NULL;
		else if (local.ss_family == AF_INET6)
			ok = inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&local)->sin6_addr, addr,
				       sizeof(addr)) != NULL;
		if (ok)
			snprintf(buf, size, "%s/%d", addr, local.ss_family == AF_INET ? 32 : 128);
	}
	if (fd >= 0)
		close(fd);
	freeaddrinfo(ai);
	return ok;
}

/* The value of one of conn's connection options, copied (NULL if unset). */
static char *
conn_option(PGconn *conn, const char *keyword)
{
	PQconninfoOption *opts = PQconninfo(conn);
	char *value = NULL;

	for (PQconninfoOption *o = opts; o != NULL && o->keyword != NULL; o++) {
		if (strcmp(o->keyword, keyword) == 0 && o->val != NULL && o->val[0] != '\0')
			value = ob_xstrdup(o->val);
	}
	PQconninfoFree(opts);
	return value;
}

/* Write the fix of refusal for conn into last.fix. */
static void
write_fix(PGconn *conn, ob_pg_refusal refusal)
{
	const char *host = PQhost(conn);
	char address[INET6_ADDRSTRLEN + 8];
	bool unix_socket = host != NULL && (host[0] == '/' || host[0] == '@');
	char *sslmode = conn_option(conn, "sslmode");
	char *sslrootcert = conn_option(conn, "sslrootcert");
	ob_pg_refusal_ctx ctx = {
	    .user = PQuser(conn),
	    .dbname = PQdb(conn),
	    .hba_address = unix_socket ? NULL : "<this host's address>/32",
	    .sslmode = sslmode,
	    .sslrootcert = sslrootcert,
	    .password_given = !PQconnectionNeedsPassword(conn),
	    .password_command = cred.command,
	    .aws_iam = cred.aws_iam,
	};

	if (!unix_socket && hba_address(conn, address, sizeof(address)))
		ctx.hba_address = address;
	ob_pg_refusal_fix(refusal, &ctx, last.fix, sizeof(last.fix));
	free(sslmode);
	free(sslrootcert);
}

/* Publish the latest attempt's refusal (or none). */
static void
set_refusal(ob_pg_refusal refusal)
{
	last.refusal = refusal;
	if (refusal == OB_PG_REFUSAL_NONE)
		last.fix[0] = '\0';
	ob_metrics_set_pg_refusal(refusal);
}

/* The options connection parameter: the user's own (from conninfo, else
 * PGOPTIONS), then the pinned settings, which win. The caller frees. */
static char *
session_options(const char *conninfo)
{
	PQconninfoOption *opts = PQconninfoParse(conninfo, NULL);
	const char *user = getenv("PGOPTIONS");
	char *out;

	for (PQconninfoOption *o = opts; o != NULL && o->keyword != NULL; o++) {
		if (strcmp(o->keyword, "options") == 0 && o->val != NULL)
			user = o->val;
	}
	out = ob_xasprintf("%s%s" PINNED_OPTIONS, user ? user : "", user ? " " : "");
	PQconninfoFree(opts);
	return out;
}

/* A command that connects once (check, slot): a refusal is not retried. */
static bool one_shot;

void
ob_pgconnect_one_shot(void)
{
	one_shot = true;
}

char *
ob_pgconnect_standby_conninfo(const char *conninfo)
{
	PQconninfoOption *opts = PQconninfoParse(conninfo, NULL);
	bool several = false;
	bool uri = strncmp(conninfo, "postgres://", 11) == 0 ||
		   strncmp(conninfo, "postgresql://", 13) == 0;
	char *out = NULL;

	for (PQconninfoOption *o = opts; o != NULL && o->keyword != NULL; o++) {
		if ((strcmp(o->keyword, "host") == 0 || strcmp(o->keyword, "hostaddr") == 0) &&
		    o->val != NULL && strchr(o->val, ',') != NULL)
			several = true;
	}
	PQconninfoFree(opts);
	/* A later setting wins over an earlier one of the same name. */
	if (several)
		out = ob_xasprintf("%s%starget_session_attrs=standby", conninfo,
				   !uri                    ? " "
				   : strchr(conninfo, '?') ? "&"
							   : "?");
	return out;
}

/* The environment a password command runs with: PGHOST, PGPORT, PGUSER
 * and PGDATABASE of conninfo, those it sets (NULL-terminated; the caller
 * frees each string and the array). */
static char **
target_env(const char *conninfo)
{
	static const char *const names[][2] = {
	    {"host", "PGHOST"}, {"port", "PGPORT"}, {"user", "PGUSER"}, {"dbname", "PGDATABASE"}};
	PQconninfoOption *opts = PQconninfoParse(conninfo, NULL);
	char **env = ob_xcalloc(OB_ARRAY_LEN(names) + 1, sizeof(*env));
	size_t n = 0;

	for (PQconninfoOption *o = opts; o != NULL && o->keyword != NULL; o++) {
		for (size_t i = 0; i < OB_ARRAY_LEN(names); i++) {
			if (strcmp(o->keyword, names[i][0]) == 0 && o->val != NULL &&
			    o->val[0] != '\0')
				env[n++] = ob_xasprintf("%s=%s", names[i][1], o->val);
		}
	}
	PQconninfoFree(opts);
	return env;
}

/* Run postgres.password_command for a connection to conninfo into
 * *password; false (cred.err) when it failed. */
static bool
command_password(const char *conninfo, const ob_config *cfg, char **password)
{
	char **env = target_env(conninfo);
	/* The daemon's loop stays alive while the command runs, and a stop
	 * request ends it. */
	bool ok = ob_credcmd_run("postgres.password_command", cfg->pg.password_command,
				 cfg->pg.credential_timeout_ms, (const char *const *)env,
				 ob_runtime_tick, password, cred.err, sizeof(cred.err));

	for (size_t i = 0; env[i] != NULL; i++)
		free(env[i]);
	free(env);
	return ok;
}

/* The value libpq uses for keyword when connecting with conninfo: the
 * conninfo's, else libpq's default (environment, compiled in); "" when
 * neither. */
static const char *
target_value(PQconninfoOption *given, PQconninfoOption *defaults, const char *keyword)
{
	for (int pass = 0; pass < 2; pass++) {
		for (PQconninfoOption *o = pass ? defaults : given; o != NULL && o->keyword; o++) {
			if (strcmp(o->keyword, keyword) == 0 && o->val != NULL && o->val[0] != '\0')
				return o->val;
		}
	}
	return "";
}

/* RDS admits IAM logins over TLS only. With sslmode prefer (libpq's
 * default) or allow, libpq tries again without TLS after a refused token,
 * and that attempt's refusal ("no pg_hba.conf entry ... no encryption")
 * is the one reported. Said once per process. */
static void
warn_without_tls(const char *sslmode)
{
	static bool warned;

	if (warned || strcmp(sslmode, "require") == 0 || strncmp(sslmode, "verify-", 7) == 0)
		return;
	warned = true;
	ob_warn("postgres.auth aws_iam with sslmode=%s: RDS and Aurora admit IAM logins over TLS "
		"only, and a refused token is then tried again without TLS and reported as a "
		"pg_hba refusal: set sslmode=verify-full (or require) in postgres.conninfo",
		sslmode);
}

/* Sign an RDS IAM token for the host, port and user libpq will connect
 * to with conninfo into *password; false (cred.err) when there is no
 * single host, or no credentials or region. */
static bool
iam_password(const char *conninfo, const ob_config *cfg, char **password)
{
	PQconninfoOption *given = PQconninfoParse(conninfo, NULL), *defaults = PQconndefaults();
	const char *host = target_value(given, defaults, "host");
	const char *port = target_value(given, defaults, "port");
	const char *user = target_value(given, defaults, "user");
	const char *service = target_value(given, NULL, "service");
	bool ok = false;

	if (host[0] == '\0')
		host = target_value(given, defaults, "hostaddr");
	/* libpq takes a service's host, port and user from pg_service.conf,
	 * which it reads for no caller: the token would be signed for another
	 * target than libpq connects to. (PGSERVICE is read by
	 * PQconndefaults() as libpq reads it.) */
	if (service[0] != '\0')
		snprintf(cred.err, sizeof(cred.err),
			 "postgres.auth aws_iam signs a token for the host, port and user of the "
			 "conninfo and the environment (PGHOST, PGPORT, PGUSER), and the conninfo "
			 "names service=%s, whose pg_service.conf outboxd cannot read as libpq "
			 "does: give host, port and user in the conninfo",
			 service);
	else if (host[0] == '\0' || host[0] == '/' || strchr(host, ',') != NULL ||
		 strchr(port, ',') != NULL)
		snprintf(cred.err, sizeof(cred.err),
			 "postgres.auth aws_iam signs a token for one host and port, and the "
			 "connection names %s: give the RDS or Aurora endpoint as its only host",
			 host[0] == '\0' ? "none" : host);
	else if (ob_awsiam_rds_password("postgres.auth aws_iam", cfg->pg.aws_region,
					cfg->pg.aws_profile, host, atoi(port), user, time(NULL),
					password, cred.source, sizeof(cred.source), cred.err,
					sizeof(cred.err))) {
		char *what = ob_xasprintf("an RDS IAM token for %s at %s:%s from %s", user, host,
					  port, cred.source);

		snprintf(cred.source, sizeof(cred.source), "%s", what);
		free(what);
		warn_without_tls(target_value(given, defaults, "sslmode"));
		ok = true;
	}
	PQconninfoFree(given);
	PQconninfoFree(defaults);
	return ok;
}

/* The password for an attempt to conninfo from postgres.password_command
 * or postgres.auth = aws_iam, into *password (the caller frees it with
 * ob_credcmd_free()); NULL, and true, with neither. False (logged) when
 * it could not be had. */
static bool
fetch_password(const char *conninfo, const ob_config *cfg, char **password)
{
	int64_t started = ob_mono_ms();

	*password = NULL;
	cred.command = cfg->pg.password_command[0] != '\0';
	cred.aws_iam = cfg->pg.aws_iam;
	if (!cred.command && !cred.aws_iam)
		return true;
	cred.failed = cred.aws_iam ? !iam_password(conninfo, cfg, password)
				   : !command_password(conninfo, cfg, password);
	cred.ms = ob_mono_ms() - started;
	if (cred.failed)
		ob_log(one_shot ? OB_LOG_ERROR : OB_LOG_WARNING,
		       "could not get a password for postgres: %s%s", cred.err,
		       one_shot ? "" : "; retrying");
	return !cred.failed;
}

bool
ob_pgconnect_auth(char *buf, size_t size)
{
	const char *fix;
	bool refused = ob_pgconnect_refusal(&fix) == OB_PG_REFUSAL_PASSWORD;

	if (!cred.command && !cred.aws_iam) {
		snprintf(buf, size, "libpq's own (conninfo, PGPASSWORD, ~/.pgpass or none)%s",
			 refused ? ": the server refused it" : "");
		return !refused;
	}
	if (cred.failed)
		snprintf(buf, size, "%s", cred.err);
	else if (cred.aws_iam)
		snprintf(buf, size, "postgres.auth aws_iam signed %s%s", cred.source,
			 cred.connected ? "; the server accepted it"
			 : refused      ? "; the server refused it"
					: "; the server was not reached");
	else
		snprintf(buf, size, "postgres.password_command gave a password in %lld ms%s",
			 (long long)cred.ms,
			 cred.connected ? "; the server accepted it"
			 : refused      ? "; the server refused it"
					: "; the server was not reached");
	return !cred.failed && !refused;
}

PGconn *
ob_pgconnect_open(const char *conninfo, bool replication, const char *application_name,
		  const ob_config *cfg)
{
	/* Defaults first: the settings in conninfo (expanded from "dbname")
	 * come later and win. A connection attempt gives up after 10 s; a
	 * server that vanished without closing the connection is noticed
	 * within about a minute, by TCP keepalives when the line is idle and
	 * by tcp_user_timeout when what outboxd sends goes unacknowledged.
	 * The session options come after conninfo, so the pinned settings
	 * always apply; so does client_encoding UTF8 (recode.h), which as a
	 * startup parameter also wins over PGCLIENTENCODING and a role's or
	 * database's setting. A password from postgres.password_command,
	 * which runs before every attempt, or an RDS IAM token signed for
	 * every attempt, comes last and wins over the conninfo's. */
	char *options, *password = NULL;
	/* clang-format off */
	const char *keys[] = {"connect_timeout", "tcp_user_timeout", "keepalives_idle",
			      "keepalives_interval", "keepalives_count", "dbname", "client_encoding",
			      "replication", "fallback_application_name", "options", "password",
			      NULL};
	const char *values[] = {"10", "60000", "30", "10", "3", conninfo, "UTF8",
				replication ? "database" : "false", application_name, NULL, NULL,
				NULL};
	/* clang-format on */
	PGconn *conn;

	cred.connected = false;
	if (!fetch_password(conninfo, cfg, &password))
		return NULL;
	options = session_options(conninfo);
	values[9] = options;
	values[10] = password;
	/* expand_dbname=1: conninfo may be a full connection string or URI;
	 * libpq's environment (PGHOST, PGPASSWORD, ...) fills the rest.
	 * libpq passes over a key whose value is NULL (no command). */
	conn = PQconnectdbParams(keys, values, 1);
	free(options);
	ob_credcmd_free(password);
	cred.connected = ob_pgconnect_ok(conn);
	if (!cred.connected) {
		PQfinish(conn);
		return NULL;
	}
	return conn;
}

bool
ob_pgconnect_ok(PGconn *conn)
{
	char msg[2048];
	ob_pg_refusal refusal;

	/* libpq writes an error the server sent as "SEVERITY:  text"; only
	 * then is there a SQLSTATE to read. */
	if (PQstatus(conn) != CONNECTION_OK && strstr(PQerrorMessage(conn), ":  ") != NULL) {
		PQsetErrorVerbosity(conn, PQERRORS_VERBOSE);
		PQreset(conn);
		PQsetErrorVerbosity(conn, PQERRORS_DEFAULT);
	}
	if (PQstatus(conn) == CONNECTION_OK) {
		if (last.logged != OB_PG_REFUSAL_NONE)
			ob_info("postgres accepts the connection now (it was refused: %s)",
				ob_pg_refusal_name(last.logged));
		last.logged = OB_PG_REFUSAL_NONE;
		set_refusal(OB_PG_REFUSAL_NONE);
		return true;
	}

	clean_message(PQerrorMessage(conn), msg, sizeof(msg));
	/* With its LOCATION lines, which tell an error raised after
	 * authentication from a refused password. */
	refusal = ob_pg_refusal_classify(PQerrorMessage(conn), PQconnectionNeedsPassword(conn),
					 PQconnectionUsedPassword(conn));
	if (refusal == OB_PG_REFUSAL_NONE && !one_shot) {
		/* A server away (restarting, failing over): the daemon retries,
		 * and /readyz says connecting meanwhile. */
		ob_warn("could not connect to postgres: %s", msg);
	} else if (refusal == OB_PG_REFUSAL_NONE) {
		ob_error("could not connect to postgres: %s", msg);
	} else if (refusal != last.logged) {
		write_fix(conn, refusal);
		ob_error("could not connect to postgres: %s; refused (%s): %s%s", msg,
			 ob_pg_refusal_name(refusal), last.fix,
			 one_shot ? "" : "; retrying until this is fixed");
	} else {
		ob_debug("could not connect to postgres: %s (refused: %s, fix logged before)", msg,
			 ob_pg_refusal_name(refusal));
	}
	last.logged = refusal;
	set_refusal(refusal);
	return false;
}

ob_pg_refusal
ob_pgconnect_refusal(const char **fix)
{
	*fix = last.fix;
	return last.refusal;
}
