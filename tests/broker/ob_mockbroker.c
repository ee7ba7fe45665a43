/*
 * ob-mockbroker: a standalone Kafka-protocol broker for outboxd's tests and
 * demo.
 *
 * It holds one librdkafka mock cluster (librdkafka/rdkafka_mock.h) open in a
 * process of its own.  The mock cluster listens on loopback TCP ports and
 * speaks enough of the Kafka protocol (Metadata, Produce with idempotence,
 * Fetch, ListOffsets, ...) for any client in any process to use it like a
 * real cluster.  Topics are auto-created (4 partitions) on a producer's
 * Metadata request, never on a consumer's: create them with `topic`.
 * Built against librdkafka 2.15.1 or later, the cluster names broker 1 as
 * its controller, as a Kafka cluster names one of its brokers (the Admin
 * API's DescribeTopics is sent there); before, the mock cluster names
 * broker 0, which it does not have, so requests for the controller go
 * unanswered.
 *
 * On start it prints, each on a line of its own and flushed:
 *
 *     BOOTSTRAP 127.0.0.1:P1,127.0.0.1:P2,...
 *     READY
 *
 * then reads one command per line on stdin and answers each with exactly one
 * line, `ok` or `err <reason>`:
 *
 *     down <broker_id>|all          disconnect the broker(s), refuse new
 *                                   connections
 *     up <broker_id>|all            accept connections again
 *     rtt <broker_id>|all <ms>      delay every response by ms
 *     error <apikey> <err> [count]  fail the next count (default 1) requests
 *                                   of ApiKey (Produce=0, Metadata=3,
 *                                   InitProducerId=22) with err
 *     clear <apikey>                drop the pending errors of ApiKey
 *     refused                       `ok N`: the batches refused so far as
 *                                   out of order (seqcheck.h)
 *     batches <topic>               `ok N`: the record batches of idempotent
 *                                   producers to topic taken so far (one
 *                                   per partition of a ProduceRequest)
 *     producers <topic>             `ok N1 N2 ...`: the records of topic
 *                                   written per producer id, most first
 *     duplicates                    `ok N`: retries of written batches
 *                                   answered DUPLICATE_SEQUENCE_NUMBER
 *     topic <name> [partitions]     create a topic (replication factor
 *                                   min(3, brokers))
 *     leader <topic> <partition> <broker_id>
 *                                   move the partition's leadership (a
 *                                   topic made with `topic` starts with
 *                                   partition p led by broker p mod N + 1)
 *     topicerr <name> <err>         make Metadata report err for the topic
 *                                   (0 clears it)
 *     deletetopic <name>            delete the topic and its records, as
 *                                   Kafka does (`err unsupported` with
 *                                   librdkafka before 2.15.0, which has no
 *                                   rd_kafka_mock_topic_delete); make it
 *                                   again with `topic`, which also tells
 *                                   the sequence check its leaders. Built
 *                                   against librdkafka 2.5.0 or later the
 *                                   broker gives each topic an id (in
 *                                   Metadata v10 and later), a new one when
 *                                   a topic is made again; built against
 *                                   2.0.2 it gives none
 *     apiversion <apikey> <min> <max>
 *                                   the versions of ApiKey the brokers
 *                                   offer from now on (JoinGroup=11 2 9
 *                                   is Apache Kafka 4.0.0: no JoinGroup v0
 *                                   or v1, KIP-896)
 *     quit                          exit
 *
 * Unlike librdkafka's mock cluster alone, the broker checks idempotent
 * producers' sequence numbers as Kafka does (seqcheck.h): a batch sent
 * behind one the broker refused is refused with
 * OUT_OF_ORDER_SEQUENCE_NUMBER, never written ahead of it, and a retry of
 * a written batch with DUPLICATE_SEQUENCE_NUMBER, never written twice.
 *
 * An error code is a number (e.g. 6, -195) or a librdkafka error name with
 * or without its RD_KAFKA_RESP_ERR_ prefix (NOT_LEADER_FOR_PARTITION,
 * _TRANSPORT).  EOF on stdin, SIGTERM and SIGINT exit cleanly with status 0.
 *
 * For a person trying outboxd without Kafka (README.md, "No Kafka yet"):
 * --port P binds brokers 1..N to 127.0.0.1 ports P..P+N-1 instead of ports
 * the kernel picks (fixedport.h), and --no-stdin reads no commands and runs
 * until SIGTERM or SIGINT, whatever stdin is.  It is a broker for trials and
 * tests only: topics live in this process's memory, each partition keeps
 * only its latest 5 MB or so, and all of it is gone when the process ends.
 *
 * Usage: ob-mockbroker [--brokers N] [--partitions P] [--port P] [--no-stdin]
 *                      [--verbose]
 */

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "fixedport.h"
#include "seqcheck.h"

#define LINE_MAX_LEN      4096
#define MAX_ARGS          8
/* rd_kafka_version() of librdkafka 2.15.0, the first whose mock cluster
 * can delete a topic, and of 2.15.1, the first that can name its
 * controller. */
#define LIBRDKAFKA_2_15   0x020f00ff
#define LIBRDKAFKA_2_15_1 0x020f01ff

/* Set by the signal handler; the command loop polls it. */
static volatile sig_atomic_t stop_requested = 0;

/* Command-line settings and the cluster the commands act on. */
struct broker_state {
	rd_kafka_mock_cluster_t *mcluster;
	int broker_cnt;
	int partitions; /* default partition count for `topic` */
};

/* Records that a termination signal arrived; nothing else is safe here. */
static void
on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

/* Prints one answer line to stdout and flushes it at once, so a test driving
 * us through a pipe sees it. */
__attribute__((format(printf, 1, 2))) static void
reply(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(stdout, fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
}

/* Parses a decimal integer in [min, max]; returns false on junk or range
 * errors. */
static bool
parse_int(const char *s, long min, long max, long *out)
{
	char *end = NULL;
	long v;

	if (s == NULL || *s == '\0')
		return false;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < min || v > max)
		return false;
	*out = v;
	return true;
}

/* Parses a broker id, or `all` (-1 for the mock API); returns false if it is
 * neither. */
static bool
parse_broker(const struct broker_state *st, const char *s, int32_t *out)
{
	long v;

	if (s != NULL && strcasecmp(s, "all") == 0) {
		*out = -1;
		return true;
	}
	if (!parse_int(s, 1, st->broker_cnt, &v))
		return false;
	*out = (int32_t)v;
	return true;
}

/* Parses an error code given as a number or a librdkafka error name (with
 * or without the RD_KAFKA_RESP_ERR_ prefix); returns false if unknown. */
static bool
parse_err(const char *s, rd_kafka_resp_err_t *out)
{
	const struct rd_kafka_err_desc *descs = NULL;
	size_t cnt = 0;
	long v;

	if (s == NULL)
		return false;
	if (parse_int(s, INT_MIN, INT_MAX, &v)) {
		*out = (rd_kafka_resp_err_t)v;
		return true;
	}
	if (strncasecmp(s, "RD_KAFKA_RESP_ERR_", 18) == 0)
		s += 18;
	rd_kafka_get_err_descs(&descs, &cnt);
	for (size_t i = 0; i < cnt; i++) {
		if (descs[i].name != NULL && strcasecmp(descs[i].name, s) == 0) {
			*out = descs[i].code;
			return true;
		}
	}
	return false;
}

/* Splits line in place at blanks into at most MAX_ARGS words; returns the
 * word count. */
static int
split_words(char *line, char **argv)
{
	int argc = 0;
	char *save = NULL;

	for (char *w = strtok_r(line, " \t\r\n", &save); w != NULL;
	     w = strtok_r(NULL, " \t\r\n", &save)) {
		if (argc == MAX_ARGS)
			return MAX_ARGS + 1;
		argv[argc++] = w;
	}
	return argc;
}

/* Answers `err <reason>` with librdkafka's description when a mock call
 * failed, `ok` otherwise. */
static void
reply_result(rd_kafka_resp_err_t err)
{
	if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
		reply("ok");
	else
		reply("err %s", rd_kafka_err2str(err));
}

/* Answers `ok N1 N2 ...`: the records of topic written per producer id,
 * most first. */
static void
reply_producers(const char *topic)
{
	long records[32];
	char line[32 * 24] = "ok";
	size_t len = 2;
	int n = ob_seqcheck_producers(topic, records, 32);

	for (int i = 0; i < n; i++) {
		int most = i;

		for (int k = i + 1; k < n; k++)
			if (records[k] > records[most])
				most = k;
		long t = records[i];

		records[i] = records[most];
		records[most] = t;
		len += (size_t)snprintf(line + len, sizeof(line) - len, " %ld", records[i]);
	}
	reply("%s", line);
}

/* Moves the leadership of topic's partition to broker and tells the
 * sequence check (seqcheck.h), which refuses the partition's batches while
 * it moves: a request the mock cluster reads meanwhile may be answered by
 * either broker. A move the mock cluster refused leaves the leader. */
static rd_kafka_resp_err_t
set_leader(struct broker_state *st, const char *topic, int32_t partition, int32_t broker)
{
	rd_kafka_resp_err_t err;
	int32_t was = ob_seqcheck_set_leader(topic, partition, 0);

	err = rd_kafka_mock_partition_set_leader(st->mcluster, topic, partition, broker);
	ob_seqcheck_set_leader(topic, partition, err == RD_KAFKA_RESP_ERR_NO_ERROR ? broker : was);
	return err;
}

/* Tells the sequence check each broker's port, from the bootstrap list
 * (host:port,... in broker id order). */
static void
note_ports(const struct broker_state *st, const char *bootstraps)
{
	int ports[64];
	int n = 0;

	for (const char *s = bootstraps; s != NULL && n < 64 && n < st->broker_cnt;) {
		const char *colon = strchr(s, ':');
		const char *comma;

		if (colon == NULL)
			break;
		ports[n++] = atoi(colon + 1);
		comma = strchr(colon, ',');
		s = comma != NULL ? comma + 1 : NULL;
	}
	ob_seqcheck_set_ports(ports, n);
}

/* Deletes topic, where the librdkafka built against and the one loaded
 * can; answers the command. */
static void
delete_topic(struct broker_state *st, const char *topic)
{
#if RD_KAFKA_VERSION >= LIBRDKAFKA_2_15
	if (rd_kafka_version() >= LIBRDKAFKA_2_15) {
		reply_result(rd_kafka_mock_topic_delete(st->mcluster, topic));
		return;
	}
#endif
	reply("err unsupported: the mock cluster of librdkafka %s cannot delete a topic (2.15.0 "
	      "and later can)",
	      rd_kafka_version_str());
}

/* Names broker 1 the cluster's controller, where the librdkafka built
 * against and the one loaded can. */
static void
name_controller(struct broker_state *st)
{
#if RD_KAFKA_VERSION >= LIBRDKAFKA_2_15_1
	if (rd_kafka_version() >= LIBRDKAFKA_2_15_1)
		rd_kafka_mock_set_controller_id(st->mcluster, 1);
#endif
}

/* Runs one command line and prints its one-line answer; returns false when
 * the command was `quit`. */
static bool
run_command(struct broker_state *st, char *line)
{
	char *argv[MAX_ARGS];
	int argc = split_words(line, argv);
	int32_t broker;
	long n, cnt;
	rd_kafka_resp_err_t err;

	if (argc == 0) {
		reply("err empty command");
		return true;
	}
	if (argc > MAX_ARGS) {
		reply("err too many words");
		return true;
	}

	if (strcmp(argv[0], "quit") == 0 && argc == 1) {
		reply("ok");
		return false;
	} else if ((strcmp(argv[0], "down") == 0 || strcmp(argv[0], "up") == 0) && argc == 2) {
		if (!parse_broker(st, argv[1], &broker)) {
			reply("err bad broker id '%s' (1..%d or all)", argv[1], st->broker_cnt);
			return true;
		}
		err = argv[0][0] == 'd' ? rd_kafka_mock_broker_set_down(st->mcluster, broker)
					: rd_kafka_mock_broker_set_up(st->mcluster, broker);
		reply_result(err);
	} else if (strcmp(argv[0], "rtt") == 0 && argc == 3) {
		if (!parse_broker(st, argv[1], &broker)) {
			reply("err bad broker id '%s' (1..%d or all)", argv[1], st->broker_cnt);
			return true;
		}
		if (!parse_int(argv[2], 0, INT_MAX, &n)) {
			reply("err bad rtt '%s'", argv[2]);
			return true;
		}
		reply_result(rd_kafka_mock_broker_set_rtt(st->mcluster, broker, (int)n));
	} else if (strcmp(argv[0], "error") == 0 && (argc == 3 || argc == 4)) {
		cnt = 1;
		if (!parse_int(argv[1], 0, INT16_MAX, &n)) {
			reply("err bad apikey '%s'", argv[1]);
			return true;
		}
		if (!parse_err(argv[2], &err)) {
			reply("err bad error code '%s'", argv[2]);
			return true;
		}
		if (argc == 4 && !parse_int(argv[3], 1, 1000000, &cnt)) {
			reply("err bad count '%s'", argv[3]);
			return true;
		}
		if (n == 0 && err >= RD_KAFKA_RESP_ERR_UNKNOWN) {
			/* Produce: refused by seqcheck.c, so the batches behind
			 * a refused one are refused as out of order. A local
			 * error (below -1, e.g. _TRANSPORT) is left to the mock
			 * cluster, which acts it out; UNKNOWN (-1) is Kafka's
			 * UNKNOWN_SERVER_ERROR, a broker's answer. */
			if (!ob_seqcheck_fail_produce((int16_t)err, cnt)) {
				reply("err too many pending Produce errors");
				return true;
			}
		} else {
			rd_kafka_resp_err_t *errs = calloc((size_t)cnt, sizeof(*errs));

			if (errs == NULL) {
				reply("err out of memory");
				return true;
			}
			for (long i = 0; i < cnt; i++)
				errs[i] = err;
			rd_kafka_mock_push_request_errors_array(st->mcluster, (int16_t)n,
								(size_t)cnt, errs);
			free(errs);
		}
		reply("ok");
	} else if (strcmp(argv[0], "clear") == 0 && argc == 2) {
		if (!parse_int(argv[1], 0, INT16_MAX, &n)) {
			reply("err bad apikey '%s'", argv[1]);
			return true;
		}
		if (n == 0)
			ob_seqcheck_clear_produce();
		rd_kafka_mock_clear_request_errors(st->mcluster, (int16_t)n);
		reply("ok");
	} else if (strcmp(argv[0], "refused") == 0 && argc == 1) {
		reply("ok %ld", ob_seqcheck_refused());
	} else if (strcmp(argv[0], "batches") == 0 && argc == 2) {
		reply("ok %ld", ob_seqcheck_batches(argv[1]));
	} else if (strcmp(argv[0], "producers") == 0 && argc == 2) {
		reply_producers(argv[1]);
	} else if (strcmp(argv[0], "duplicates") == 0 && argc == 1) {
		reply("ok %ld", ob_seqcheck_duplicates());
	} else if (strcmp(argv[0], "topic") == 0 && (argc == 2 || argc == 3)) {
		n = st->partitions;
		if (argc == 3 && !parse_int(argv[2], 1, 100000, &n)) {
			reply("err bad partition count '%s'", argv[2]);
			return true;
		}
		err = rd_kafka_mock_topic_create(st->mcluster, argv[1], (int)n,
						 st->broker_cnt < 3 ? st->broker_cnt : 3);
		/* Partition p led by broker p mod n + 1 (the mock cluster
		 * picks at random), so the sequence check knows the leaders. */
		for (long p = 0; p < n && err == RD_KAFKA_RESP_ERR_NO_ERROR; p++)
			err =
			    set_leader(st, argv[1], (int32_t)p, (int32_t)(p % st->broker_cnt) + 1);
		reply_result(err);
	} else if (strcmp(argv[0], "leader") == 0 && argc == 4) {
		if (!parse_int(argv[2], 0, INT32_MAX, &n) || !parse_broker(st, argv[3], &broker) ||
		    broker < 0) {
			reply("err bad partition '%s' or broker '%s'", argv[2], argv[3]);
			return true;
		}
		reply_result(set_leader(st, argv[1], (int32_t)n, broker));
	} else if (strcmp(argv[0], "topicerr") == 0 && argc == 3) {
		if (!parse_err(argv[2], &err)) {
			reply("err bad error code '%s'", argv[2]);
			return true;
		}
		rd_kafka_mock_topic_set_error(st->mcluster, argv[1], err);
		reply("ok");
	} else if (strcmp(argv[0], "deletetopic") == 0 && argc == 2) {
		delete_topic(st, argv[1]);
	} else if (strcmp(argv[0], "apiversion") == 0 && argc == 4) {
		long min, max;

		if (!parse_int(argv[1], 0, 32767, &n) || !parse_int(argv[2], 0, 32767, &min) ||
		    !parse_int(argv[3], min, 32767, &max)) {
			reply("err bad apikey or versions");
			return true;
		}
		reply_result(rd_kafka_mock_set_apiversion(st->mcluster, (int16_t)n, (int16_t)min,
							  (int16_t)max));
	} else {
		reply("err unknown command or wrong arguments: %s", argv[0]);
	}
	return true;
}

/* Reads commands from stdin until quit, EOF or a signal; lines longer than
 * LINE_MAX_LEN are answered with an error and skipped. */
static void
command_loop(struct broker_state *st)
{
	char buf[LINE_MAX_LEN];
	size_t len = 0;
	bool overlong = false;

	while (!stop_requested) {
		struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
		ssize_t got;
		int rc = poll(&pfd, 1, 200);

		if (rc < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "ob-mockbroker: poll: %s\n", strerror(errno));
			return;
		}
		if (rc == 0)
			continue;
		got = read(STDIN_FILENO, buf + len, sizeof(buf) - 1 - len);
		if (got < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			fprintf(stderr, "ob-mockbroker: read: %s\n", strerror(errno));
			return;
		}
		if (got == 0)
			return; /* EOF: whoever drove us is gone */
		len += (size_t)got;

		for (;;) {
			char *nl = memchr(buf, '\n', len);
			size_t used;

			if (nl == NULL)
				break;
			*nl = '\0';
			used = (size_t)(nl - buf) + 1;
			if (overlong) {
				reply("err line too long");
				overlong = false;
			} else if (!run_command(st, buf)) {
				return;
			}
			memmove(buf, buf + used, len - used);
			len -= used;
		}
		if (len == sizeof(buf) - 1) { /* no newline in a full buffer */
			overlong = true;
			len = 0;
		}
	}
}

/* --no-stdin: says what this broker is for, then waits for SIGTERM or
 * SIGINT (polled, as command_loop does: any thread may take the signal). */
static void
serve_until_signal(const char *bootstraps)
{
	fprintf(stderr,
		"ob-mockbroker: serving the Kafka protocol on %s until SIGTERM or Ctrl-C.\n"
		"ob-mockbroker: for trials and tests only: topics live in this process's "
		"memory, each partition keeps only its latest 5 MB or so, and all of it is "
		"gone when it stops.\n",
		bootstraps);
	while (!stop_requested)
		(void)poll(NULL, 0, 200);
}

/* Prints the usage text to f. */
static void
usage(FILE *f)
{
	fprintf(f, "usage: ob-mockbroker [--brokers N] [--partitions P] [--port P] "
		   "[--no-stdin] [--verbose]\n"
		   "Runs a librdkafka mock Kafka cluster on loopback; prints "
		   "BOOTSTRAP and READY,\nthen takes commands on stdin "
		   "(down/up/rtt/error/clear/refused/batches/topic/topicerr/deletetopic/quit).\n"
		   "--port P: brokers on 127.0.0.1 ports P, P+1, ... (else ports the kernel "
		   "picks).\n"
		   "--no-stdin: no commands; runs until SIGTERM or SIGINT.\n"
		   "For trials and tests only: topics are kept in memory and lost when it "
		   "stops.\n");
}

/* Parses the options, starts the cluster, serves commands, tears down. */
int
main(int argc, char **argv)
{
	struct broker_state st = {.mcluster = NULL, .broker_cnt = 3, .partitions = 4};
	bool verbose = false, no_stdin = false;
	int port = 0;
	char errstr[512];
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk;
	struct sigaction sa;
	long v;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--brokers") == 0 && i + 1 < argc &&
		    parse_int(argv[i + 1], 1, 64, &v)) {
			st.broker_cnt = (int)v;
			i++;
		} else if (strcmp(argv[i], "--partitions") == 0 && i + 1 < argc &&
			   parse_int(argv[i + 1], 1, 100000, &v)) {
			st.partitions = (int)v;
			i++;
		} else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc &&
			   parse_int(argv[i + 1], 1, 65535, &v)) {
			port = (int)v;
			i++;
		} else if (strcmp(argv[i], "--no-stdin") == 0) {
			no_stdin = true;
		} else if (strcmp(argv[i], "--verbose") == 0) {
			verbose = true;
		} else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "ob-mockbroker: bad argument '%s'\n", argv[i]);
			usage(stderr);
			return 2;
		}
	}

	if (port + st.broker_cnt - 1 > 65535) {
		fprintf(stderr, "ob-mockbroker: --port %d leaves no port for broker %d\n", port,
			st.broker_cnt);
		return 2;
	}
	ob_fixedport_set(port);

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	/* The handle only hosts the cluster's threads; it never connects. */
	conf = rd_kafka_conf_new();
	if (rd_kafka_conf_set(conf, "log_level", verbose ? "7" : "3", errstr, sizeof(errstr)) !=
	    RD_KAFKA_CONF_OK) {
		fprintf(stderr, "ob-mockbroker: %s\n", errstr);
		rd_kafka_conf_destroy(conf);
		return 1;
	}
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (rk == NULL) {
		fprintf(stderr, "ob-mockbroker: could not create handle: %s\n", errstr);
		rd_kafka_conf_destroy(conf);
		return 1;
	}
	st.mcluster = rd_kafka_mock_cluster_new(rk, st.broker_cnt);
	if (st.mcluster == NULL) {
		fprintf(stderr, "ob-mockbroker: could not create mock cluster\n");
		rd_kafka_destroy(rk);
		return 1;
	}

	name_controller(&st);
	note_ports(&st, rd_kafka_mock_cluster_bootstraps(st.mcluster));
	printf("BOOTSTRAP %s\n", rd_kafka_mock_cluster_bootstraps(st.mcluster));
	printf("READY\n");
	fflush(stdout);

	if (no_stdin)
		serve_until_signal(rd_kafka_mock_cluster_bootstraps(st.mcluster));
	else
		command_loop(&st);

	rd_kafka_mock_cluster_destroy(st.mcluster);
	rd_kafka_destroy(rk);
	return 0;
}
