/*
 * inboxpos.c: stored positions judged against the broker (see inboxpos.h).
 */
#include "outboxd/inboxpos.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/inboxjudge.h"
#include "outboxd/log.h"

static const char *const mismatch_policy_names[] = {"halt", "earliest", "latest", "stored"};

/* The stored positions of parts, in a new array of n (the caller frees);
 * NULL when the database failed. */
static ob_inbox_position *
read_stored(ob_inboxdb *db, const ob_kpart *parts, size_t n)
{
	ob_inbox_position *pos = ob_xcalloc(n + 1, sizeof(*pos));

	for (size_t i = 0; i < n; i++) {
		pos[i].topic = parts[i].topic;
		pos[i].partition = parts[i].partition;
	}
	if (ob_inboxdb_stored(db, pos, n) != OB_INBOXDB_OK) {
		free(pos);
		return NULL;
	}
	return pos;
}

/* Where partition p starts after the mismatch of position st (described
 * in why): set by inbox.on_position_mismatch, and stored in place of st
 * (unless the setting is "stored"). OB_INBOXPOS_HALT for "halt",
 * OB_INBOXPOS_DB when the database failed. */
static ob_inboxpos_status
recover_start(ob_inboxdb *db, const ob_config *cfg, const ob_kpart *p, ob_inbox_position *st,
	      const ob_broker_view *bv, const char *why, int64_t *start)
{
	ob_mismatch_policy policy = cfg->inbox.on_position_mismatch;

	*start = policy == OB_MISMATCH_EARLIEST ? bv->low
		 : policy == OB_MISMATCH_LATEST ? bv->high
		 : st->next_offset >= 0         ? st->next_offset
						: bv->committed;
	if (policy == OB_MISMATCH_HALT) {
		ob_error("position mismatch on %s [%d]: %s; stopping without consuming it "
			 "(inbox.on_position_mismatch = halt; set it to earliest, latest or stored "
			 "to start there instead)",
			 p->topic, (int)p->partition, why);
		return OB_INBOXPOS_HALT;
	}
	ob_warn("position mismatch on %s [%d]: %s; starting at offset %lld "
		"(inbox.on_position_mismatch = %s)",
		p->topic, (int)p->partition, why, (long long)*start, mismatch_policy_names[policy]);
	if (policy == OB_MISMATCH_STORED)
		return OB_INBOXPOS_OK;
	st->next_offset = *start;
	snprintf(st->cluster_id, sizeof(st->cluster_id), "%s", bv->cluster_id);
	snprintf(st->topic_id, sizeof(st->topic_id), "%s", bv->topic_id);
	return ob_inboxdb_reset(db, st) == OB_INBOXDB_OK ? OB_INBOXPOS_OK : OB_INBOXPOS_DB;
}

/* Log where partition p starts. */
static void
log_start(const ob_kpart *p, int64_t stored, int64_t start)
{
	if (start >= 0 && start == stored)
		ob_info("assigned %s [%d] at stored offset %lld", p->topic, (int)p->partition,
			(long long)start);
	else if (stored < 0)
		ob_info("assigned %s [%d] at offset %lld (nothing stored)", p->topic,
			(int)p->partition, (long long)start);
	else
		ob_info("assigned %s [%d] at offset %lld", p->topic, (int)p->partition,
			(long long)start);
}

/* The inbox would consume its own dead letters: a configuration error
 * (logged). */
static bool
takes_dead_letters(const ob_kpart *parts, size_t n, const ob_config *cfg)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(parts[i].topic, cfg->outbox.dlq_topic) == 0) {
			ob_error("inbox.topics (%s) took in outbox.dlq_topic (%s): the inbox would "
				 "consume its own dead letters; change one of them",
				 cfg->inbox.topics, cfg->outbox.dlq_topic);
			return true;
		}
	}
	return false;
}

ob_inboxpos_status
ob_inboxpos_start(ob_consumer *c, ob_inboxdb *db, const ob_config *cfg)
{
	size_t n;
	ob_kpart *parts = ob_consumer_unstarted(c, &n);
	ob_kpart *committed = ob_xcalloc(n + 1, sizeof(*committed));
	ob_inbox_position *pos = NULL;
	ob_inboxpos_status st = OB_INBOXPOS_WAIT, verdict = OB_INBOXPOS_OK;

	/* Without the cluster id a position stored for another cluster would
	 * pass unseen: wait for the broker to tell. */
	if (!ob_consumer_read_cluster_id(c))
		goto out;
	if (takes_dead_letters(parts, n, cfg)) {
		st = OB_INBOXPOS_CONFIG;
		goto out;
	}
	/* Without a topic id a topic created again that holds more records
	 * than the stored position passes unseen: asked once for all the
	 * topics, and judged without it when it is not to be had. */
	ob_consumer_read_topic_ids(c, parts, n);
	memcpy(committed, parts, n * sizeof(*parts));
	if (!ob_consumer_group_offsets(c, committed, n))
		goto out;
	pos = read_stored(db, parts, n);
	if (pos == NULL) {
		st = OB_INBOXPOS_DB;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		int64_t stored = pos[i].next_offset, start = stored;
		ob_position_mismatch reason;
		ob_broker_view bv = {0, 0, committed[i].offset, ob_consumer_cluster_id(c),
				     ob_consumer_topic_id(c, parts[i].topic)};
		char why[512];

		if (!ob_consumer_watermarks(c, parts[i].topic, parts[i].partition, &bv.low,
					    &bv.high, true))
			goto out;
		if (ob_inboxjudge_mismatch(&pos[i], &bv, &reason, why, sizeof(why))) {
			ob_inboxpos_status rs;

			ob_metrics_inbox_mismatch(reason);
			rs = recover_start(db, cfg, &parts[i], &pos[i], &bv, why, &start);
			if (rs == OB_INBOXPOS_DB) {
				st = rs;
				goto out;
			}
			if (rs == OB_INBOXPOS_HALT)
				verdict = rs;
		}
		if (verdict != OB_INBOXPOS_OK)
			continue; /* halt: every mismatch is logged before the exit */
		if (start < 0)    /* nothing stored, nothing committed: a watermark */
			start = cfg->inbox.on_position_mismatch == OB_MISMATCH_LATEST ? bv.high
										      : bv.low;
		parts[i].offset = start;
		log_start(&parts[i], stored, start);
	}
	st = verdict;
	if (st == OB_INBOXPOS_OK && !ob_consumer_start(c, parts, n))
		st = OB_INBOXPOS_WAIT;
out:
	free(pos);
	free(committed);
	free(parts);
	return st;
}

/* The lag of parts, their stored positions pos: into each .offset, a
 * count of records; false when the broker did not answer. */
static bool
lag_of(ob_consumer *c, ob_kpart *parts, const ob_inbox_position *pos, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int64_t low, high, from;

		if (!ob_consumer_watermarks(c, parts[i].topic, parts[i].partition, &low, &high,
					    false))
			return false;
		from = pos[i].next_offset >= 0 ? pos[i].next_offset : low;
		parts[i].offset = high > from ? high - from : 0;
	}
	return true;
}

/* Where each of parts resumes, their stored positions pos: the stored
 * one, else where it resumed already (the first record read from it). */
static void
resume_points(ob_kpart *parts, const ob_inbox_position *pos, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (pos[i].next_offset >= 0)
			parts[i].offset = pos[i].next_offset;
	}
}

ob_inboxpos_status
ob_inboxpos_note_lag(ob_consumer *c, ob_inboxdb *db)
{
	size_t n;
	ob_kpart *parts = ob_consumer_unstarted(c, &n);
	ob_inbox_position *pos = read_stored(db, parts, n);
	ob_inboxpos_status st = pos != NULL ? OB_INBOXPOS_OK : OB_INBOXPOS_DB;

	if (pos != NULL && lag_of(c, parts, pos, n))
		ob_consumer_set_unstarted_lag(c, parts, n);
	free(pos);
	free(parts);
	return st;
}

/* The partitions of parts (their stored positions pos) that this process
 * started and stored, but for which postgres holds no position any more:
 * a failover to a standby that lacked the stored rows, or a restore. Their
 * own resume points would skip what the lost rows held. Moved to the end
 * of parts; returns how many stay in front. */
static size_t
split_unstored(ob_kpart *parts, ob_inbox_position *pos, size_t n)
{
	size_t kept = 0;

	for (size_t i = 0; i < n; i++) {
		if (pos[i].next_offset < 0 && parts[i].offset >= 0) {
			ob_warn(
			    "postgres holds no stored position for %s [%d] any more, though this "
			    "process stored up to offset %lld (a failover to a server without "
			    "those rows, or a restore?): it starts again as when assigned, "
			    "checked against the group's committed offset",
			    parts[i].topic, (int)parts[i].partition, (long long)parts[i].offset);
			continue;
		}
		if (kept != i) {
			ob_kpart p = parts[kept];
			ob_inbox_position q = pos[kept];

			parts[kept] = parts[i];
			pos[kept] = pos[i];
			parts[i] = p;
			pos[i] = q;
		}
		kept++;
	}
	return kept;
}

ob_inboxpos_status
ob_inboxpos_resume(ob_consumer *c, ob_inboxdb *db)
{
	size_t n, kept;
	ob_kpart *parts = ob_consumer_assigned(c, &n);
	ob_inbox_position *pos = read_stored(db, parts, n);
	ob_inboxpos_status st = OB_INBOXPOS_DB;

	if (pos != NULL) {
		kept = split_unstored(parts, pos, n);
		resume_points(parts, pos, kept);
		st = ob_consumer_resume_at(c, parts, kept) ? OB_INBOXPOS_OK : OB_INBOXPOS_WAIT;
		/* Paused again before anything is polled: ob_inboxpos_start()
		 * starts them, as at assignment. */
		ob_consumer_unstart(c, parts + kept, n - kept);
	}
	free(pos);
	free(parts);
	return st;
}
