/*
 * dlqcmd.c: `outboxd dlq list|release` (dlqcmd.h); redrive is
 * dlqredrive.c's.
 */
#include "outboxd/dlqcmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "outboxd/holddb.h"
#include "outboxd/log.h"
#include "outboxd/pgsql.h"
#include "outboxd/runtime.h"

#define KEYS_SQL        "%I." OB_HOLD_KEYS_TABLE
#define EVENTS_SQL      "%I." OB_HOLD_EVENTS_TABLE
/* How long release waits for the running outboxd. */
#define RELEASE_WAIT_MS 60000
#define RELEASE_POLL_MS 200

/* The held keys, one block each. */
static bool
list_held(ob_pgconn *p, const ob_config *cfg)
{
	ob_pgres *res = NULL;
	int n;

	if (!ob_pgsql_query_rows(
		p, OB_LOG_ERROR, "read the held keys", 9, &res,
		"SELECT k.topic, encode(k.key, 'escape'), k.held_behind, k.reason, k.error, "
		"k.held_at::text, (SELECT count(*) FROM " EVENTS_SQL " e WHERE e.slot_name = "
		"k.slot_name AND e.topic = k.topic AND e.key = k.key AND NOT e.failed), "
		"coalesce(k.release_requested_at::text, ''), coalesce(k.release_error, '') "
		"FROM " KEYS_SQL
		" k WHERE k.slot_name = %L AND k.released_through IS NULL ORDER BY k.held_at",
		cfg->outbox.schema, cfg->outbox.schema, cfg->pg.slot))
		return false;
	n = ob_pgres_rows(res);
	printf("held keys: %d\n", n);
	for (int i = 0; i < n; i++) {
		printf("\nkey          %s\n", ob_pgres_value(res, i, 1));
		printf("topic        %s\n", ob_pgres_value(res, i, 0));
		printf("held behind  %s (%s: %s)\n", ob_pgres_value(res, i, 2),
		       ob_pgres_value(res, i, 3), ob_pgres_value(res, i, 4));
		printf("held since   %s\n", ob_pgres_value(res, i, 5));
		printf("held events  %s\n", ob_pgres_value(res, i, 6));
		if (ob_pgres_value(res, i, 7)[0] != '\0')
			printf("release      asked at %s\n", ob_pgres_value(res, i, 7));
		if (ob_pgres_value(res, i, 8)[0] != '\0')
			printf("release      failed: %s\n", ob_pgres_value(res, i, 8));
	}
	ob_pgres_free(res);
	return true;
}

/* Mark the keys' rows; *marked: how many. */
static bool
mark(ob_pgconn *p, const ob_config *cfg, const ob_dlq_args *a, long long *marked)
{
	*marked = 0;
	for (size_t i = 0; i < a->keys_len; i++) {
		long long n = 0;

		if (!ob_pgsql_command_count(
			p, OB_LOG_ERROR, "ask for the release", &n,
			"UPDATE " KEYS_SQL
			" SET release_requested_at = now(), release_include_failed "
			"= %s, release_error = NULL WHERE slot_name = %L AND key = "
			"convert_to(%L, 'UTF8') AND (%L = '' OR topic = %L) AND released_through "
			"IS NULL",
			cfg->outbox.schema, a->include_failed ? "true" : "false", cfg->pg.slot,
			a->keys[i], a->topic ? a->topic : "", a->topic ? a->topic : ""))
			return false;
		if (n == 0)
			ob_warn("key %s is not held%s%s", a->keys[i], a->topic ? " in topic " : "",
				a->topic ? a->topic : "");
		*marked += n;
	}
	return true;
}

/* The marks of a's keys still waiting (*waiting) and those refused
 * (*refused, each logged). */
static bool
progress(ob_pgconn *p, const ob_config *cfg, const ob_dlq_args *a, int *waiting, int *refused)
{
	*waiting = *refused = 0;
	for (size_t i = 0; i < a->keys_len; i++) {
		ob_pgres *res = NULL;

		if (!ob_pgsql_query_rows(
			p, OB_LOG_ERROR, "follow the release", 3, &res,
			"SELECT topic, release_requested_at IS NOT NULL, "
			"coalesce(release_error, '') FROM " KEYS_SQL
			" WHERE slot_name = %L AND key = convert_to(%L, 'UTF8') AND "
			"(%L = '' OR topic = %L)",
			cfg->outbox.schema, cfg->pg.slot, a->keys[i], a->topic ? a->topic : "",
			a->topic ? a->topic : ""))
			return false;
		for (int r = 0; r < ob_pgres_rows(res); r++) {
			if (ob_pgres_true(res, r, 1)) {
				(*waiting)++;
			} else if (ob_pgres_value(res, r, 2)[0] != '\0') {
				ob_error("could not release key %s of topic %s: %s", a->keys[i],
					 ob_pgres_value(res, r, 0), ob_pgres_value(res, r, 2));
				(*refused)++;
			}
		}
		ob_pgres_free(res);
	}
	return true;
}

/* Mark the keys, then wait until the running outboxd released them. */
static int
release(ob_pgconn *p, const ob_config *cfg, const ob_dlq_args *a)
{
	int64_t deadline = ob_mono_ms() + RELEASE_WAIT_MS;
	long long marked;
	int waiting = 0, refused = 0;

	if (!mark(p, cfg, a, &marked))
		return OB_EXIT_OPERATOR;
	if (marked == 0) {
		ob_error("no key to release (outboxd dlq list shows the held ones)");
		return OB_EXIT_OPERATOR;
	}
	ob_info("asked the running outboxd to release %lld held key%s", marked,
		marked == 1 ? "" : "s");
	do {
		if (!progress(p, cfg, a, &waiting, &refused))
			return OB_EXIT_OPERATOR;
		if (waiting == 0)
			break;
		usleep(RELEASE_POLL_MS * 1000);
	} while (ob_mono_ms() < deadline);
	if (waiting > 0) {
		ob_error("%d key%s not released within %d s: is outboxd running for slot %s? The "
			 "release stays asked for and happens when it runs",
			 waiting, waiting == 1 ? " was" : "s were", RELEASE_WAIT_MS / 1000,
			 cfg->pg.slot);
		return OB_EXIT_OPERATOR;
	}
	if (refused > 0)
		return OB_EXIT_OPERATOR;
	ob_info("released %lld key%s: their held events are published and new ones flow", marked,
		marked == 1 ? "" : "s");
	return OB_EXIT_OK;
}

int
ob_dlqcmd_run(const ob_config *cfg, const char *sub, const ob_dlq_args *a)
{
	ob_pgconn *p = NULL;
	int rc = OB_EXIT_OPERATOR;

	if (strcmp(sub, "redrive") == 0)
		return ob_dlqredrive_run(cfg, a);
	if (ob_pgsql_connect(cfg, OB_PGCONN_PLAIN, &p) != OB_PG_OK)
		return OB_EXIT_OPERATOR;
	if (ob_holddb_ready(p, cfg) != OB_PG_OK) {
		/* logged */
	} else if (strcmp(sub, "release") == 0) {
		rc = release(p, cfg, a);
	} else if (list_held(p, cfg)) {
		printf("\n");
		rc = ob_dlqredrive_list(cfg, stdout) ? OB_EXIT_OK : OB_EXIT_OPERATOR;
	}
	ob_pgsql_close(p);
	return rc;
}
