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

from harness import wait_until
from test_faults import collect_all, check_delivery, wait_streaming
from test_slot_recovery import RECOVERED, recoveries, report, streaming


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


def test_a_new_slot_postgres_cannot_decode_is_recovered(
        own_cluster, broker, consumer, outboxd_factory, slot_name, test_id):
    agg = "ud_%s" % test_id
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        agg, 10)
    opened = []
    try:
        c.sql("CREATE TABLE public.ud_other (v int)")
        c.sql("INSERT INTO public.ud_other VALUES (0)")
        d.stop()
        c.sql("SELECT pg_drop_replication_slot(%s)", (slot_name,))
        a = OpenTxn(c, agg)
        opened.append(a)
        d.start()
        slot_creation_waits_for(c, a.xid)
        b = OpenTxn(c, agg)
        opened.append(b)
        c.sql("TRUNCATE public.ud_other; INSERT INTO public.ud_other VALUES (1)")
        a.commit()
        slot_creation_waits_for(c, b.xid)
        feed.commit(1)
        b.commit()
        wait_until(lambda: "publishing the backlog" in d.log_text(), 60, 0.1,
                   "the recovery's slot made")
        feed.commit(1, before=lambda cur: cur.execute(
            "INSERT INTO public.ud_other VALUES (2)"))
        wait_until(lambda: len(re.findall(RECOVERED, d.log_text())) >= 2 or not d.running(),
                   120, 0.2, "a second recovery")
        assert d.running(), d.log_tail()
        assert "cannot be decoded" in d.log_text(), d.log_tail()
        assert recoveries(port, "undecodable") == 1
        assert recoveries(port, "missing") == 1
        wait_streaming(c, slot_name)
        feed.commit(5)
        ids = feed.ids + [a.id, b.id]
        recs = collect_all(consumer, topic, ids, timeout=90)
        check_delivery(recs, ids, exactly_once=False)
        report("a new slot PostgreSQL cannot decode", ids, recs)
    finally:
        for t in opened:
            if not t.conn.closed:
                t.conn.close()
        feed.close()
