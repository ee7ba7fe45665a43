/*
 * dlqueue.h: dead-letter records waiting to be produced.
 *
 * A delivery report that refuses a record for good arrives inside
 * ob_producer_poll(), where producing (which may have to wait for queue
 * room) cannot happen. The report's handler builds the dead-letter record
 * into a new entry of this FIFO; the relay produces the entries in order
 * once the poll has returned. Each entry remembers the refused record's
 * transaction and position, which stay unconfirmable until its
 * dead-letter record is queued.
 */
#ifndef OUTBOXD_DLQUEUE_H
#define OUTBOXD_DLQUEUE_H

#include "outboxd/common.h"
#include "outboxd/event.h"

typedef struct ob_dlqueue_entry {
	struct ob_dlqueue_entry *next;
	uint64_t seq;   /* the refused record's ack tracker transaction */
	uint64_t index; /* its position in that transaction */
	int kind;       /* what the relay produces it as */
	ob_event ev;    /* the dead-letter record; owned */
} ob_dlqueue_entry;

typedef struct ob_dlqueue {
	ob_dlqueue_entry *head;
	ob_dlqueue_entry **tail;
} ob_dlqueue;

void ob_dlqueue_init(ob_dlqueue *q);
/* Append an entry with an empty event and return it, for the caller to
 * fill. The entry stays owned by the queue. */
ob_dlqueue_entry *ob_dlqueue_push(ob_dlqueue *q, uint64_t seq, uint64_t index, int kind);
/* The oldest entry, or NULL; it stays valid while entries are pushed. */
ob_dlqueue_entry *ob_dlqueue_peek(const ob_dlqueue *q);
/* Remove and free the oldest entry. */
void ob_dlqueue_pop(ob_dlqueue *q);
/* Remove and free every entry. */
void ob_dlqueue_clear(ob_dlqueue *q);

#endif
