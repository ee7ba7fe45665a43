/*
 * dlqueue.c: dead-letter records waiting to be produced (see dlqueue.h).
 */
#include "outboxd/dlqueue.h"

#include <stdlib.h>

void
ob_dlqueue_init(ob_dlqueue *q)
{
	q->head = NULL;
	q->tail = &q->head;
}

ob_dlqueue_entry *
ob_dlqueue_push(ob_dlqueue *q, uint64_t seq, uint64_t index, int kind)
{
	ob_dlqueue_entry *e = ob_xcalloc(1, sizeof(*e));

	e->seq = seq;
	e->index = index;
	e->kind = kind;
	ob_event_init(&e->ev);
	*q->tail = e;
	q->tail = &e->next;
	return e;
}

ob_dlqueue_entry *
ob_dlqueue_peek(const ob_dlqueue *q)
{
	return q->head;
}

void
ob_dlqueue_pop(ob_dlqueue *q)
{
	ob_dlqueue_entry *e = q->head;

	if (e == NULL)
		return;
	q->head = e->next;
	if (q->head == NULL)
		q->tail = &q->head;
	ob_event_free(&e->ev);
	free(e);
}

void
ob_dlqueue_clear(ob_dlqueue *q)
{
	while (q->head != NULL)
		ob_dlqueue_pop(q);
}
