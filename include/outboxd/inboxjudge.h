/*
 * inboxjudge.h: whether a stored inbox position can belong to the
 * partition the broker serves (sql/README.md, "The inbox tables");
 * inboxpos.c reads what the broker says and acts on the verdict.
 *
 * Pure: no connection, no log; tests/unit/test_inboxjudge.c goes through
 * every reason with a table.
 */
#ifndef OUTBOXD_INBOXJUDGE_H
#define OUTBOXD_INBOXJUDGE_H

#include "outboxd/common.h"
#include "outboxd/inboxdb.h"
#include "outboxd/metrics.h"

/* What the broker says of one partition being started. */
typedef struct ob_broker_view {
	int64_t low, high;      /* watermarks */
	int64_t committed;      /* the group's committed offset; < 0: none */
	const char *cluster_id; /* the cluster the consumer is connected to; "": unknown */
	const char *topic_id;   /* the partition's topic's id; "": unknown */
} ob_broker_view;

/* Judge the stored position st of a partition against the broker's view
 * bv. True when it cannot belong to the partition, with *reason set and
 * what it is in text (both positions) in why. */
bool ob_inboxjudge_mismatch(const ob_inbox_position *st, const ob_broker_view *bv,
			    ob_position_mismatch *reason, char *why, size_t why_len);

#endif
