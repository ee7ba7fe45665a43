/*
 * dlqcmd.h: `outboxd dlq list|release|redrive` (deploy/README.md, "Held
 * keys and dead letters").
 *
 * list and release work on the held keys' tables in the outbox database
 * (hold.h): release marks the keys' rows, and the running outboxd, which
 * alone orders a key's held events before its new ones, publishes them;
 * the command waits until it did. redrive reads the dead-letter topic
 * itself and publishes the chosen dead letters to the topics they were
 * for (dlqredrive.c).
 */
#ifndef OUTBOXD_DLQCMD_H
#define OUTBOXD_DLQCMD_H

#include <stdio.h>

#include "outboxd/common.h"
#include "outboxd/config.h"

typedef struct ob_dlq_args {
	const char **keys; /* release: the keys, as text */
	size_t keys_len;
	const char *topic;   /* release: only this topic's hold (NULL: every topic's) */
	bool include_failed; /* release: publish the held-behind dead letter too */
	const char **ids;    /* redrive --id */
	size_t ids_len;
	const char *since; /* redrive --since (RFC 3339) */
} ob_dlq_args;

/* Run dlq's subcommand sub ("list", "release" or "redrive"); returns the
 * exit code (0 done, 1 refused or failed: logged). */
int ob_dlqcmd_run(const ob_config *cfg, const char *sub, const ob_dlq_args *a);

/* redrive (dlqredrive.c): publish the dead letters a chooses. */
int ob_dlqredrive_run(const ob_config *cfg, const ob_dlq_args *a);

/* list's second part (dlqredrive.c): the dead letters in outbox.dlq_topic
 * by key and reason, to out. False (logged) when the topic could not be
 * read. */
bool ob_dlqredrive_list(const ob_config *cfg, FILE *out);

#endif
