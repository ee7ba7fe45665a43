"""A new slot PostgreSQL cannot decode (deploy/README.md, "Recovering from
a lost or invalidated slot"): a bug of new logical slots in PostgreSQL
(15 to 18 at least). The first session on a new slot rebuilds its
catalog view from the WAL after the slot's creation point; a transaction
that gave a relation a new file (TRUNCATE, a new partition) and
committed while the slot was still being made, before the builder took
note of commits, is missing from that view, and the first later change
of that relation fails: "could not map filenode ... to relation OID"
(XX000). Every session rebuilds the same view from the same WAL: the slot
never gets past it. The fault checker met it in a recovery's own slot
(seed 6945713: outboxd exited 1 again and again, 11 transactions'
events lost, a table of the workload truncated while the slot was made).

outboxd now takes such a slot as lost: with postgres.on_slot_lost =
recover it drops it and recovers from the outbox table (reason
undecodable). The test makes the bug's interleaving on purpose: a
recovery's temporary slot waits for transaction A; B starts; T truncates
another table and commits; A commits; C writes an event; B commits (the
slot is consistent); U writes to the truncated table and an event."""

import re

from conftest import UNSET
from harness import wait_until
from test_faults import (Feed, collect_all, check_delivery, expect_exit, make_topic,
                         on_cluster, wait_streaming)
from test_slot_recovery import ENV, RECOVERED, drop_slot, recoveries, report, streaming


def slot_creation_waits_for(c, xid):
    """Waits until a walsender making a slot waits for transaction xid."""
    wait_until(lambda: c.sql(
        "SELECT count(*) FROM pg_locks AS l JOIN pg_stat_activity AS a USING (pid) "
        "WHERE a.backend_type = 'walsender' AND l.locktype = 'transactionid' "
        "AND NOT l.granted AND l.transactionid::text::bigint = %s", (xid,))[0][0] > 0,
        60, 0.05, "the slot's creation waits for transaction %d" % xid)


class OpenTxn:
    """A transaction that wrote one event of agg and stays open."""

    def __init__(self, c, agg):
        self.conn = c.connect()
        self.conn.autocommit = False
        with self.conn.cursor() as cur:
            cur.execute("INSERT INTO public.outbox (id, aggregate_type, aggregate_id, "
                        "event_type, payload) VALUES (gen_random_uuid(), %s, %s, 'x', "
                        "'{}') RETURNING id::text, txid_current()", (agg, agg + "-open"))
            self.id, self.xid = cur.fetchone()

    def commit(self):
        self.conn.commit()
        self.conn.close()


def make_undecodable(c, d, agg, feed):
    """Starts outboxd d, whose cutover (a recovery, or its backlog) makes
    a slot, with the bug's interleaving around it: the temporary slot
    waits for A; B starts; T truncates public.ud_other and commits; A
    commits; C writes an event; B commits; U writes to public.ud_other
    and an event once the slot is made. Returns the ids of A and B."""
    a = OpenTxn(c, agg)
    b = None
    try:
        d.start()
        slot_creation_waits_for(c, a.xid)
        b = OpenTxn(c, agg)
        c.sql("TRUNCATE public.ud_other; INSERT INTO public.ud_other VALUES (1)")
        a.commit()
        slot_creation_waits_for(c, b.xid)
        feed.commit(1)
        b.commit()
        wait_until(lambda: "publishing the backlog" in d.log_text(), 60, 0.1,
                   "the cutover's slot made")
        feed.commit(1, before=lambda cur: cur.execute(
            "INSERT INTO public.ud_other VALUES (2)"))
        return [a.id, b.id]
    finally:
        for t in (a, b):
            if t is not None and not t.conn.closed:
                t.conn.close()


def test_a_new_slot_postgres_cannot_decode_is_recovered(
        own_cluster, broker, consumer, outboxd_factory, slot_name, test_id):
    agg = "ud_%s" % test_id
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        agg, 10)
    try:
        c.sql("CREATE TABLE public.ud_other (v int)")
        c.sql("INSERT INTO public.ud_other VALUES (0)")
        d.stop()
        drop_slot(c, slot_name)
        opened = make_undecodable(c, d, agg, feed)
        wait_until(lambda: len(re.findall(RECOVERED, d.log_text())) >= 2 or not d.running(),
                   120, 0.2, "a second recovery")
        assert d.running(), d.log_tail()
        assert "cannot be decoded" in d.log_text(), d.log_tail()
        assert recoveries(port, "undecodable") == 1
        assert recoveries(port, "missing") == 1
        wait_streaming(c, slot_name)
        feed.commit(5)
        ids = feed.ids + opened
        recs = collect_all(consumer, topic, ids, timeout=90)
        check_delivery(recs, ids, exactly_once=False)
        report("a new slot PostgreSQL cannot decode", ids, recs)
    finally:
        feed.close()


def test_a_first_slot_postgres_cannot_decode_halts(own_cluster, broker, outboxd_factory,
                                                     slot_name, test_id):
    """The first slot, made by a start with outbox.backlog_where, meets
    the bug: no recovery point was stored yet (nothing was streamed), so
    the table cannot prove what a recovery would need. outboxd halts,
    saying the slot cannot be decoded, why it cannot be recovered and
    that it is to be dropped first; the slot is left as it is."""
    agg = "uf_%s" % test_id
    c = own_cluster()
    make_topic(broker, agg)
    c.sql("CREATE TABLE public.ud_other (v int)")
    c.sql("INSERT INTO public.ud_other VALUES (0)")
    feed = Feed(c, agg)
    try:
        feed.commit(3)
        d = outboxd_factory(on_cluster(c, outbox_backlog_where="true",
                                       outbox_message_prefix=UNSET), start=False, env=ENV)
        # A slow broker holds the backlog's acknowledgement, so that U
        # commits before the slot is copied and its marker row written (a
        # transaction the stream decodes before U otherwise: then the
        # second session, started past it, decodes U).
        assert broker.cmd("rtt all 1500") == "ok"
        try:
            make_undecodable(c, d, agg, feed)
        finally:
            assert broker.cmd("rtt all 0") == "ok"
        expect_exit(d, 1, "cannot be decoded", "no recovery point was stored",
                    "drop it (pg_drop_replication_slot)")
        assert c.slot(slot_name) is not None
    finally:
        feed.close()
