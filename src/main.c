/*
 * main.c: the command line (deploy/README.md, "Command line"). Parses arguments, builds the
 * configuration and hands over to the relay, the checks or the slot
 * commands. Exit codes: 0 clean stop, 1 needs an operator, 2 usage or
 * configuration error (or `check` found problems).
 */
#include <getopt.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ob_build.h"
#include "outboxd/check.h"
#include "outboxd/config.h"
#include "outboxd/dlqcmd.h"
#include "outboxd/failover.h"
#include "outboxd/http.h"
#include "outboxd/inbox.h"
#include "outboxd/log.h"
#include "outboxd/metrics.h"
#include "outboxd/pgconnect.h"
#include "outboxd/pgrepl.h"
#include "outboxd/producer.h"
#include "outboxd/recpointdb.h"
#include "outboxd/relay.h"
#include "outboxd/reload.h"
#include "outboxd/runtime.h"
#include "outboxd/slotcreate.h"
#include "outboxd/slotmark.h"

/* Where the configuration is read from when neither -c nor OUTBOXD_CONFIG
 * names a file (used only when it exists), as pgbouncer reads
 * /etc/pgbouncer/pgbouncer.ini. */
#define DEFAULT_CONFIG "/etc/outboxd/outboxd.ini"

static const char usage_text[] =
    "outboxd publishes transactional-outbox events from PostgreSQL to Kafka.\n"
    "\n"
    "Usage:\n"
    "  outboxd [run]  [-c FILE] [-s KEY=VALUE]...   stream until stopped (default)\n"
    "  outboxd check  [-c FILE] [-s KEY=VALUE]...   preflight; prints every problem found\n"
    "  outboxd slot create [--if-not-exists] [--accept-gap] [-c FILE] [-s KEY=VALUE]...\n"
    "  outboxd slot drop|status [-c FILE] [-s KEY=VALUE]...\n"
    "  outboxd inbox  [-c FILE] [-s KEY=VALUE]...   consume Kafka into a Postgres inbox table\n"
    "  outboxd dlq list | release KEY... [--topic T] [--include-failed]\n"
    "            | redrive --id ID... | --since TIME   [-c FILE] [-s KEY=VALUE]...\n"
    "  outboxd --version | --help\n"
    "\n"
    "Options:\n"
    "  -c, --config FILE        INI configuration file (also $OUTBOXD_CONFIG; default\n"
    "                           " DEFAULT_CONFIG " when it exists)\n"
    "  -s, --set S.KEY=VALUE    override one setting, e.g. -s postgres.slot=orders\n"
    "  -h, --help               show this help (outboxd COMMAND --help: that command's)\n"
    "  -V, --version            show the version\n"
    "      --if-not-exists      slot create: exit 0 when a healthy slot exists already\n"
    "      --accept-gap         slot create: replace a lost or invalidated slot, accepting\n"
    "                           that events committed since the loss are not published\n"
    "                           (unless outbox.backlog_where selects them)\n"
    "\n"
    "Exit codes: 0 stopped cleanly, 1 needs an operator, 2 usage or configuration error.\n";

/* The options every command takes; example is a setting of that command. */
#define COMMON_OPTIONS_FOR(example)                                                                \
	"Options:\n"                                                                               \
	"  -c, --config FILE        INI configuration file (also $OUTBOXD_CONFIG; default\n"       \
	"                           " DEFAULT_CONFIG " when it exists)\n"                          \
	"  -s, --set S.KEY=VALUE    override one setting, e.g. -s " example "\n"                   \
	"  -h, --help               show this help\n"
#define COMMON_OPTIONS COMMON_OPTIONS_FOR("postgres.slot=orders")
#define INBOX_OPTIONS  COMMON_OPTIONS_FOR("inbox.topics=orders")

/* The help of each command: `outboxd COMMAND --help`. */
static const struct command_help {
	const char *command;
	const char *subcommand; /* NULL: the command's own */
	const char *text;
} command_help[] = {
    {"run", NULL,
     "Usage: outboxd [run] [-c FILE] [-s KEY=VALUE]...\n"
     "\n"
     "Stream the outbox's inserts and logical messages from the replication slot\n"
     "(postgres.slot) to Kafka until SIGTERM or SIGINT, creating the slot first when\n"
     "it is missing (postgres.create_slot). Serves /metrics, /healthz and /readyz on\n"
     "http.listen (default 127.0.0.1:7187). Reconnects to Postgres and Kafka by\n"
     "itself. SIGHUP reads the configuration again: log.level and log.format change\n"
     "at once, and every other setting that changed is logged as needing a restart.\n"
     "\n" COMMON_OPTIONS "\n"
     "Exit codes: 0 stopped by a signal, 1 needs an operator (the last log line says\n"
     "why), 2 usage or configuration error.\n"},
    {"check", NULL,
     "Usage: outboxd check [-c FILE] [-s KEY=VALUE]...\n"
     "\n"
     "Check everything outboxd needs, without streaming or changing anything, and\n"
     "print one line per check: its name, then ok, FAIL or warn, then what was found\n"
     "(for a FAIL, the fix). A warn line passes but names a cost to choose.\n"
     "\n"
     "  postgres, server version, wal_level   the server and its settings\n"
     "  outbox table, outbox columns          the table and every mapped column\n"
     "  table privilege, backlog              SELECT, the backlog_where predicate\n"
     "                                        (only before the slot exists)\n"
     "  replication role, slot, pgoutput/wal2json, publication\n"
     "                                        the role, the slot's state, the decoder\n"
     "  slot marker, failover, standby copy   whether a lost slot is caught, and\n"
     "                                        whether the slot survives a promotion\n"
     "  wal retention                         warn: max_slot_wal_keep_size = -1\n"
     "  message prefix                        warn: another slot publishes the same\n"
     "                                        logical messages\n"
     "  held keys                             with on_bad_event = hold_key: its tables,\n"
     "                                        the keys and events held\n"
     "  kafka, dead-letter topic              the brokers and outbox.dlq_topic\n"
     "  inbox tables                          with inbox.topics set: the inbox's tables\n"
     "                                        and the grants its role needs\n"
     "\n" COMMON_OPTIONS "\n"
     "Exit codes: 0 every check passed, 2 a check failed or the configuration is\n"
     "invalid.\n"},
    {"slot", NULL,
     "Usage: outboxd slot create [--if-not-exists] [--accept-gap] | drop | status\n"
     "                    [-c FILE] [-s KEY=VALUE]...\n"
     "\n"
     "Manage the replication slot postgres.slot; `outboxd slot COMMAND --help` says\n"
     "more of each.\n"
     "\n" COMMON_OPTIONS
     "      --if-not-exists      create: exit 0 when a healthy slot exists already\n"
     "      --accept-gap         create: replace a lost or invalidated slot, accepting\n"
     "                           that events committed since the loss are not\n"
     "                           published (unless outbox.backlog_where selects them)\n"},
    {"slot", "create",
     "Usage: outboxd slot create [--if-not-exists] [--accept-gap] [-c FILE]\n"
     "                           [-s KEY=VALUE]...\n"
     "\n"
     "Create the replication slot postgres.slot (with postgres.plugin), after the\n"
     "same table checks as run. Create it before the application writes events: a\n"
     "slot sees only WAL written after it exists. With outbox.backlog_where set, the\n"
     "matching rows are published first and the command exits 0 only once the broker\n"
     "acknowledged them.\n"
     "\n"
     "A slot that was lost (missing, while its row in outboxd_slots says outboxd\n"
     "created it: a failover, a restore or a drop) or invalidated (wal_status lost)\n"
     "is replaced only with --accept-gap; without it the command exits 1 naming the\n"
     "recovery, as run does, and creates nothing.\n"
     "\n" COMMON_OPTIONS
     "      --if-not-exists      exit 0 when a healthy slot exists already (with the\n"
     "                           configured plugin) and leave it, as pg_recvlogical\n"
     "                           does; with postgres.slot_failover, turn its FAILOVER\n"
     "                           on\n"
     "      --accept-gap         replace a lost slot, or drop and replace an\n"
     "                           invalidated one: the new slot starts at the current\n"
     "                           WAL position, so events committed since the loss are\n"
     "                           not published unless outbox.backlog_where selects\n"
     "                           them (e.g. -s \"outbox.backlog_where=created_at >\n"
     "                           '<the time of the loss>'\")\n"
     "\n"
     "Exit codes: 0 created (or there, healthy, with --if-not-exists), 1 refused\n"
     "(exists, lost or invalidated; the log says why and what to do), 2 usage or\n"
     "configuration error.\n"},
    {"slot", "drop",
     "Usage: outboxd slot drop [-c FILE] [-s KEY=VALUE]...\n"
     "\n"
     "Drop the replication slot postgres.slot. Events committed after its confirmed\n"
     "position and not yet published are published only if a new slot is created\n"
     "with outbox.backlog_where naming them.\n"
     "\n" COMMON_OPTIONS "\n"
     "Exit codes: 0 dropped, 1 refused (missing, or active), 2 usage or configuration\n"
     "error.\n"},
    {"slot", "status",
     "Usage: outboxd slot status [-c FILE] [-s KEY=VALUE]...\n"
     "\n"
     "Print the replication slot postgres.slot as the server sees it, one line each:\n"
     "\n"
     "  slot, plugin, database\n"
     "  active_pid            the walsender serving it, - when none\n"
     "  confirmed_flush_lsn   what outboxd confirmed: published up to here\n"
     "  restart_lsn           the oldest WAL the slot keeps\n"
     "  wal_status            reserved, extended, unreserved (invalidation near) or lost\n"
     "  retained_wal_bytes    WAL kept for the slot\n"
     "  failover, synced      the slot's flags (PostgreSQL 17 and later)\n"
     "  failover_ready        whether a promoted standby would have the slot, and why\n"
     "  standby_copy          what a standby's copy of the slot holds (PostgreSQL 17\n"
     "                        and later, with postgres.slot_failover, on a primary)\n"
     "\n" COMMON_OPTIONS "\n"
     "Exit codes: 0 printed, 1 the slot does not exist or Postgres could not be\n"
     "reached (the message says which), 2 usage or configuration error.\n"},
    {"dlq", NULL,
     "Usage: outboxd dlq list | release KEY... [--topic TOPIC] [--include-failed]\n"
     "                   | redrive --id ID... | --since TIME   [-c FILE] [-s KEY=VALUE]...\n"
     "\n"
     "The dead letters (outbox.dlq_topic) and, with outbox.on_bad_event = hold_key,\n"
     "the keys held behind them (outboxd_held_keys and outboxd_held_events in the\n"
     "outbox's schema).\n"
     "\n"
     "  list      print every held key (topic, key, reason, the dead letter it is held\n"
     "            behind, its held events) and the dead letters by key and reason\n"
     "  release   ask the running outboxd to publish the held events of each KEY (in\n"
     "            every topic, or --topic's) to their own topics in commit order, then\n"
     "            let the key's new events flow; waits until it did (or 60 s)\n"
     "  redrive   publish the chosen dead letters to the topics they were for, with\n"
     "            their key, headers and id (not held ones: release those)\n"
     "\n" COMMON_OPTIONS "      --topic TOPIC        release: only the key's hold in TOPIC\n"
     "      --include-failed     release: publish the dead letter the key was held\n"
     "                           behind too (its cause is fixed), first\n"
     "      --id ID              redrive: the dead letter whose id header is ID\n"
     "                           (repeatable)\n"
     "      --since TIME         redrive: every dead letter written since TIME (RFC\n"
     "                           3339, e.g. 2026-11-29T10:00:00Z)\n"
     "\n"
     "Exit codes: 0 done, 1 refused or failed (the message says why), 2 usage or\n"
     "configuration error.\n"},
    {"inbox", NULL,
     "Usage: outboxd inbox [-c FILE] [-s KEY=VALUE]...\n"
     "\n"
     "Consume inbox.topics (consumer group inbox.group) and store every record as a\n"
     "row of inbox.table in inbox.conninfo's database, one row per event id, until\n"
     "SIGTERM or SIGINT (sql/inbox.sql makes the tables, sql/inbox_role.sql the\n"
     "role). Serves /metrics, /healthz and /readyz on http.listen (default\n"
     "127.0.0.1:7188, another port than the publisher's). SIGHUP reads the\n"
     "configuration again, as for run.\n"
     "\n" INBOX_OPTIONS "\n"
     "Exit codes: 0 stopped by a signal, 1 needs an operator (the last log line says\n"
     "why), 2 usage or configuration error.\n"},
};

typedef struct cli {
	const char *config_path;
	const char **overrides;
	size_t overrides_len;
	const char *command;
	const char *subcommand;
	bool help;
	bool if_not_exists; /* slot create --if-not-exists */
	bool accept_gap;    /* slot create --accept-gap */
	ob_dlq_args dlq;    /* dlq's arguments */
} cli;

/* One line on stderr: what went wrong, with arg (NULL: none). */
static int
usage_error(const char *what, const char *arg)
{
	fprintf(stderr, "outboxd: %s%s%s%s (try \"outboxd --help\")\n", what, arg ? " \"" : "",
		arg ? arg : "", arg ? "\"" : "");
	return OB_EXIT_CONFIG;
}

/* outboxd's version and those of the libraries it runs with. */
static void
print_version(void)
{
	int pq = ob_pgrepl_library_version();

	printf("outboxd %s\n", OB_VERSION);
	printf("librdkafka %s\n", ob_producer_library_version());
	printf("libpq %d.%d\n", pq / 10000, pq % 10000);
}

/* The help of c's command and subcommand (the command's own when its
 * subcommand has none), or the general usage when none was named. */
static void
print_help(const cli *c)
{
	const char *text = usage_text;

	for (size_t i = 0; c->command != NULL && i < OB_ARRAY_LEN(command_help); i++) {
		const struct command_help *h = &command_help[i];

		if (strcmp(h->command, c->command) != 0)
			continue;
		if (h->subcommand == NULL)
			text = h->text;
		else if (c->subcommand != NULL && strcmp(h->subcommand, c->subcommand) == 0) {
			text = h->text;
			break;
		}
	}
	fputs(text, stdout);
}

/* dlq's subcommand and, for release, its keys (the rest of argv); the
 * options each subcommand takes. Returns -1 to go on, or an exit code. */
static int
parse_dlq(int argc, char **argv, cli *c)
{
	const ob_dlq_args *a = &c->dlq;

	if (optind < argc)
		c->subcommand = argv[optind++];
	else if (!c->help)
		return usage_error("dlq needs list, release or redrive", NULL);
	if (c->help)
		return -1;
	if (strcmp(c->subcommand, "release") == 0) {
		c->dlq.keys = (const char **)&argv[optind];
		c->dlq.keys_len = (size_t)(argc - optind);
		optind = argc;
		if (a->keys_len == 0)
			return usage_error("dlq release needs at least one key", NULL);
	} else if (strcmp(c->subcommand, "redrive") == 0) {
		if ((a->ids_len > 0) == (a->since != NULL))
			return usage_error("dlq redrive needs --id ID... or --since TIME", NULL);
	} else if (strcmp(c->subcommand, "list") != 0) {
		return usage_error("unknown dlq command", c->subcommand);
	}
	if ((a->topic != NULL || a->include_failed) && strcmp(c->subcommand, "release") != 0)
		return usage_error("--topic and --include-failed belong to \"dlq release\"", NULL);
	if ((a->ids_len > 0 || a->since != NULL) && strcmp(c->subcommand, "redrive") != 0)
		return usage_error("--id and --since belong to \"dlq redrive\"", NULL);
	return -1;
}

/* Parse argv into c. Returns -1 to go on, or an exit code. */
static int
parse_args(int argc, char **argv, cli *c)
{
	enum {
		OPT_IF_NOT_EXISTS = 256,
		OPT_ACCEPT_GAP,
		OPT_TOPIC,
		OPT_INCLUDE_FAILED,
		OPT_ID,
		OPT_SINCE
	};
	static const struct option longopts[] = {
	    {"config", required_argument, NULL, 'c'},
	    {"set", required_argument, NULL, 's'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {"if-not-exists", no_argument, NULL, OPT_IF_NOT_EXISTS},
	    {"accept-gap", no_argument, NULL, OPT_ACCEPT_GAP},
	    {"topic", required_argument, NULL, OPT_TOPIC},
	    {"include-failed", no_argument, NULL, OPT_INCLUDE_FAILED},
	    {"id", required_argument, NULL, OPT_ID},
	    {"since", required_argument, NULL, OPT_SINCE},
	    {NULL, 0, NULL, 0},
	};
	int opt;
	bool named = false;

	c->overrides = ob_xcalloc((size_t)argc, sizeof(*c->overrides));
	c->dlq.ids = ob_xcalloc((size_t)argc, sizeof(*c->dlq.ids));
	opterr = 0; /* usage_error() says it, in one line */
	while ((opt = getopt_long(argc, argv, ":c:s:hV", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			c->config_path = optarg;
			break;
		case 's':
			c->overrides[c->overrides_len++] = optarg;
			break;
		case 'h':
			c->help = true;
			break;
		case 'V':
			print_version();
			return 0;
		case OPT_IF_NOT_EXISTS:
			c->if_not_exists = true;
			break;
		case OPT_ACCEPT_GAP:
			c->accept_gap = true;
			break;
		case OPT_TOPIC:
			c->dlq.topic = optarg;
			break;
		case OPT_INCLUDE_FAILED:
			c->dlq.include_failed = true;
			break;
		case OPT_ID:
			c->dlq.ids[c->dlq.ids_len++] = optarg;
			break;
		case OPT_SINCE:
			c->dlq.since = optarg;
			break;
		case ':':
			return usage_error("option needs a value:", argv[optind - 1]);
		default: {
			char short_opt[3] = {'-', (char)optopt, '\0'};
			bool long_opt = strncmp(argv[optind - 1], "--", 2) == 0;

			return usage_error("invalid option",
					   optopt != 0 && !long_opt ? short_opt : argv[optind - 1]);
		}
		}
	}
	named = optind < argc;
	c->command = named ? argv[optind++] : "run";
	if (strcmp(c->command, "slot") == 0) {
		if (optind < argc)
			c->subcommand = argv[optind++];
		else if (!c->help)
			return usage_error("slot needs create, drop or status", NULL);
		if (c->subcommand != NULL && strcmp(c->subcommand, "create") != 0 &&
		    strcmp(c->subcommand, "drop") != 0 && strcmp(c->subcommand, "status") != 0)
			return usage_error("unknown slot command", c->subcommand);
	} else if (strcmp(c->command, "dlq") == 0) {
		int rc = parse_dlq(argc, argv, c);

		if (rc >= 0)
			return rc;
	} else if (strcmp(c->command, "run") != 0 && strcmp(c->command, "check") != 0 &&
		   strcmp(c->command, "inbox") != 0) {
		return usage_error("unknown command", c->command);
	}
	if (optind < argc)
		return usage_error("unexpected argument", argv[optind]);
	if (c->help) {
		if (!named)
			c->command = NULL;
		print_help(c);
		return 0;
	}
	if ((c->dlq.topic != NULL || c->dlq.include_failed || c->dlq.ids_len > 0 ||
	     c->dlq.since != NULL) &&
	    strcmp(c->command, "dlq") != 0)
		return usage_error("--topic, --include-failed, --id and --since belong to \"dlq\"",
				   NULL);
	if ((c->if_not_exists || c->accept_gap) &&
	    (c->subcommand == NULL || strcmp(c->subcommand, "create") != 0))
		return usage_error(c->if_not_exists ? "--if-not-exists belongs to \"slot create\""
						    : "--accept-gap belongs to \"slot create\"",
				   NULL);
	return -1;
}

/* DEFAULT_CONFIG; a test build reads OUTBOXD_TEST_DEFAULT_CONFIG instead
 * when it is set, so tests need not write to /etc. */
static const char *
default_config(void)
{
#if OB_TEST_HOOKS
	if (getenv("OUTBOXD_TEST_DEFAULT_CONFIG") != NULL)
		return getenv("OUTBOXD_TEST_DEFAULT_CONFIG");
#endif
	return DEFAULT_CONFIG;
}

/* The configuration file c names (-c, else OUTBOXD_CONFIG, else
 * DEFAULT_CONFIG when it exists); NULL or "": none. */
static const char *
config_path(const cli *c)
{
	const char *path = c->config_path ? c->config_path : getenv("OUTBOXD_CONFIG");

	if (path == NULL && access(default_config(), F_OK) == 0)
		path = default_config();
	return path;
}

static void
log_startup(const ob_config *cfg)
{
	char *masked = ob_log_mask_conninfo(cfg->pg.conninfo);
	const char *servers = ob_config_kafka_get(cfg, "bootstrap.servers");

	ob_info("outboxd %s starting: postgres \"%s\", slot %s, table %s.%s, kafka %s", OB_VERSION,
		masked, cfg->pg.slot, cfg->outbox.schema, cfg->outbox.table_name,
		servers ? servers : "(unset)");
	for (size_t i = 0; i < cfg->kafka_len; i++)
		ob_debug("kafka.%s = %s", cfg->kafka[i].key,
			 ob_config_is_secret_key(cfg->kafka[i].key) ? "****" : cfg->kafka[i].value);
	free(masked);
}

/* The checks of the settings that need more than the config module
 * knows, made alike for every command (so `check` passes nothing `run`
 * refuses): http.listen is host:port, and a command of the publisher has a
 * publisher configured when the file configures an inbox (a receiving
 * service's file run without `inbox` would stream from libpq's defaults).
 * False, logged, on the first problem. */
static bool
settings_fit(const ob_config *cfg, const char *command)
{
	bool publisher_command = strcmp(command, "run") == 0 || strcmp(command, "slot") == 0 ||
				 strcmp(command, "dlq") == 0;

	if (!ob_http_listen_valid(cfg->http.listen)) {
		ob_error("invalid value \"%s\" for http.listen: expected host:port",
			 cfg->http.listen);
		return false;
	}
	if (publisher_command && cfg->inbox.topics[0] != '\0' && !cfg->publisher_set) {
		ob_error(
		    "this configuration has an [inbox] section and no publisher "
		    "(postgres.conninfo, postgres.slot or outbox.table): run \"outboxd inbox\" "
		    "to consume into the inbox, or configure the publisher");
		return false;
	}
	return true;
}

/* outbox.topic when it has no {column}: every event goes there, so its
 * published counter can be shown from the start; else NULL. */
static const char *
fixed_topic(const ob_config *cfg)
{
	return strchr(cfg->outbox.topic, '{') == NULL ? cfg->outbox.topic : NULL;
}

/* Turn glibc's fastbins off for the daemons. Every record the producer
 * queues is several small allocations of librdkafka's (the message, its
 * headers object and their list, one per header), freed together when the
 * broker acknowledges them. In fastbins those freed chunks stay apart and
 * the next records' headers land scattered over them, each in a cache line
 * of its own, which the broker threads then read to serialize them; freed
 * into the ordinary bins they merge with their neighbours and the next
 * records are carved from the merged runs in order. A producer benchmark
 * of records with four headers at 100,000 a second spent about a tenth
 * less CPU this way (tests/README.md, "Where the CPU goes"). Other C
 * libraries have no fastbins to turn off. */
static void
tune_malloc(void)
{
#ifdef M_MXFAST
	(void)mallopt(M_MXFAST, 0); /* only fails for a size out of range */
#endif
}

/* Serve HTTP around the relay (run) or the inbox consumer (inbox). */
static int
run(const ob_config *cfg, bool inbox)
{
	ob_http *http = NULL;
	int rc;

	tune_malloc();
	if (!inbox)
		log_startup(cfg);
	ob_metrics_init(cfg->http.stall_after_ms, inbox ? OB_METRICS_INBOX : OB_METRICS_PUBLISHER,
			fixed_topic(cfg));
	if (!ob_http_start(cfg->http.listen, &http)) /* the address is taken or not ours */
		return ob_runtime_exit(inbox ? "outboxd inbox" : "outboxd", OB_EXIT_OPERATOR);
	rc = inbox ? ob_inbox_run(cfg) : ob_relay_run(cfg);
	ob_http_stop(http);
	return rc;
}

/* `slot status`'s failover lines (failover.h); false when a query failed. */
static bool
print_failover(ob_pgconn *pg, const ob_config *cfg, const ob_slot_info *info)
{
	static const char *const words[] = {"n/a", "yes", "no"};
	ob_failover_state st;
	char detail[768];
	bool seen, ready;

	if (!ob_failover_read(pg, cfg, &st))
		return false;
	printf("failover_ready       %s (%s)\n", words[st.verdict], st.why);
	if (st.verdict != OB_FAILOVER_NA) {
		ob_failover_standby_copy(cfg, info->confirmed_flush, &seen, &ready, detail,
					 sizeof(detail));
		printf("standby_copy         %s (%s)\n",
		       !seen   ? "unseen"
		       : ready ? "ready"
			       : "not-ready",
		       detail);
	}
	return true;
}

/* `slot status`'s recovery point line (recpointdb.h); false when a query
 * failed. */
static bool
print_recovery_point(ob_pgconn *pg, const ob_config *cfg)
{
	char line[1024];
	ob_pg_status st = ob_recpointdb_describe(pg, cfg, line, sizeof(line));

	printf("recovery point       %s\n", line);
	return st != OB_PG_RETRY;
}

/* slot drop|status (slot create: slotcreate.h). */
static int
slot_command(const ob_config *cfg, const char *sub)
{
	ob_pgconn *pg = NULL;
	ob_slot_info info;
	int rc = OB_EXIT_OPERATOR;

	if (ob_pgrepl_connect(cfg, &pg) != OB_PG_OK)
		return OB_EXIT_OPERATOR;
	if (strcmp(sub, "drop") == 0) {
		/* The slot goes by the operator's hand: its marker with it. */
		if (ob_pgrepl_drop_slot(pg, cfg->pg.slot) && ob_slotmark_clear(pg, cfg)) {
			ob_info("dropped replication slot %s", cfg->pg.slot);
			rc = 0;
		}
	} else if (ob_pgrepl_slot_info(pg, cfg->pg.slot, &info)) {
		if (!info.exists) {
			ob_error("replication slot %s does not exist", cfg->pg.slot);
		} else {
			printf("slot                 %s\n", cfg->pg.slot);
			printf("plugin               %s\n", info.plugin);
			printf("database             %s\n", info.database);
			if (info.active_pid)
				printf("active_pid           %d\n", info.active_pid);
			else
				printf("active_pid           -\n");
			printf("confirmed_flush_lsn  " OB_LSN_FMT "\n",
			       OB_LSN_ARGS(info.confirmed_flush));
			printf("restart_lsn          " OB_LSN_FMT "\n",
			       OB_LSN_ARGS(info.restart_lsn));
			printf("wal_status           %s\n", info.wal_status);
			printf("retained_wal_bytes   %lld\n", (long long)info.retained_bytes);
			printf("failover             %s\n", info.failover ? "true" : "false");
			printf("synced               %s\n", info.synced ? "true" : "false");
			rc = print_failover(pg, cfg, &info) && print_recovery_point(pg, cfg)
				 ? OB_EXIT_OK
				 : OB_EXIT_OPERATOR;
		}
	}
	ob_pgrepl_close(pg, false);
	return rc;
}

int
main(int argc, char **argv)
{
	cli c = {0};
	ob_config cfg;
	bool inbox;
	int rc = parse_args(argc, argv, &c);

	if (rc >= 0) {
		free(c.overrides);
		free(c.dlq.ids);
		return rc;
	}
	inbox = strcmp(c.command, "inbox") == 0;
	if (!ob_config_load(&cfg, inbox, config_path(&c), c.overrides, c.overrides_len)) {
		rc = OB_EXIT_CONFIG;
		goto out;
	}
	ob_log_configure(cfg.log.format, cfg.log.level);
	/* The daemons read it again on SIGHUP (reload.h). */
	ob_reload_init(inbox, config_path(&c), c.overrides, c.overrides_len, &cfg);
	if (!settings_fit(&cfg, c.command)) {
		rc = OB_EXIT_CONFIG;
		goto out;
	}
	/* The inbox's lines carry its group; so do check's when it checks
	 * only an inbox. */
	if (strcmp(c.command, "inbox") == 0 ||
	    (strcmp(c.command, "check") == 0 && cfg.inbox.topics[0] != '\0' && !cfg.publisher_set))
		ob_log_set_context("group", cfg.inbox.group);
	else
		ob_log_set_context("slot", cfg.pg.slot);
	if (strcmp(c.command, "run") == 0 || strcmp(c.command, "inbox") == 0) {
		rc = run(&cfg, strcmp(c.command, "inbox") == 0);
	} else {
		ob_pgconnect_one_shot();
		if (strcmp(c.command, "check") == 0) {
			rc = ob_check_run(&cfg, stdout);
		} else if (strcmp(c.command, "dlq") == 0) {
			rc = ob_dlqcmd_run(&cfg, c.subcommand, &c.dlq);
		} else if (strcmp(c.subcommand, "create") == 0) {
			/* Its backlog, when it has one, counts its events. */
			ob_metrics_init(cfg.http.stall_after_ms, OB_METRICS_PUBLISHER,
					fixed_topic(&cfg));
			rc = ob_slotcreate_run(&cfg, c.if_not_exists, c.accept_gap);
		} else {
			rc = slot_command(&cfg, c.subcommand);
		}
	}
out:
	ob_config_free(&cfg);
	free(c.overrides);
	free(c.dlq.ids);
	return rc;
}
