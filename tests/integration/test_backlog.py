"""Integration tests of the backlog (sql/README.md, "Migrating from a polling
outbox processor"): when outboxd creates its slot with outbox.backlog_where set,
the matching rows of the slot's own snapshot are published first, then the
stream takes over, with none missed and none twice.

Every test uses an outbox table of its own (public.<test_id>_outbox, the
shared table's columns plus a poller's processed_on_utc) and its own
aggregate types, so its own topics. Each test runs with both decoders."""

import collections
import json
import threading
import time

from harness import header, wait_until
from test_faults import collect_all

DECODERS = ("wal2json", "pgoutput")


def make_table(pg, test_id):
    table = "%s_outbox" % test_id
    pg.sql("CREATE TABLE public.%s (LIKE public.outbox INCLUDING ALL)" % table)
    pg.sql("ALTER TABLE public.%s ADD COLUMN processed_on_utc timestamptz" % table)
    return table


def insert_range(pg, table, atype, first, last, processed=False, keys=10,
                 created="'2020-01-01'::timestamptz + g * interval '1 ms'"):
    """Rows n = first..last (payload {"n": n}, key k<n % keys>), created in
    n order, processed or not; one transaction."""
    pg.sql("INSERT INTO public.%s (aggregate_type, aggregate_id, event_type, "
           "payload, processed_on_utc, created_at) "
           "SELECT %%s, 'k' || (g %%%% %d), 'e', jsonb_build_object('n', g), "
           "CASE WHEN %%s THEN now() END, %s "
           "FROM generate_series(%%s, %%s) g" % (table, keys, created),
           (atype, processed, first, last))


def ids_where(pg, table, cond):
    return {r[0] for r in pg.sql(
        "SELECT id::text FROM public.%s WHERE %s" % (table, cond))}


def config(table, where, **outbox):
    o = {"table": "public." + table, "backlog_where": where}
    o.update(outbox)
    return {"outbox": o}


def n_of(rec):
    return json.loads(rec["value"])["n"]


def assert_key_order(records):
    """Per key, n increases in partition order."""
    by_key = collections.defaultdict(list)
    for r in sorted(records, key=lambda r: (r["partition"], r["offset"])):
        by_key[r["key"]].append(n_of(r))
    for key, ns in by_key.items():
        assert ns == sorted(ns), "key %s out of order" % key


def test_cutover_with_writer_every_row_once(pg, broker, consumer,
                                            outboxd_factory, test_id):
    table = make_table(pg, test_id)
    atype = test_id + "_order"
    topic = "outbox.event." + atype
    insert_range(pg, table, atype, 1, 2000, processed=True)
    insert_range(pg, table, atype, 2001, 5000)
    stop = threading.Event()
    counter = [100000]

    def writer():
        while not stop.is_set():
            n = counter[0]
            insert_range(pg, table, atype, n, n + 19,
                         created="clock_timestamp()")
            counter[0] = n + 20
            time.sleep(0.01)

    t = threading.Thread(target=writer)
    t.start()
    try:
        time.sleep(0.3)
        d = outboxd_factory(config(table, "processed_on_utc IS NULL"))
        d.wait_log(r"backlog published", 40)
        d.wait_log(r"streaming from slot|START_REPLICATION", 20)
        time.sleep(1.5)
    finally:
        stop.set()
        t.join()
    want = ids_where(pg, table, "processed_on_utc IS NULL")
    assert len(want) > 3000
    recs = consumer.collect(topic, len(want), timeout=40)
    got = [header(r, "id").decode() for r in recs]
    dup = [i for i, c in collections.Counter(got).items() if c > 1]
    assert not dup, "published twice: %d" % len(dup)
    assert set(got) == want
    assert_key_order(recs)
    assert "backlog:" in d.log_text() or "publishing the backlog" in d.log_text()


def test_kill9_during_backlog_loses_nothing(pg, broker, consumer,
                                            outboxd_factory, test_id):
    table = make_table(pg, test_id)
    atype = test_id + "_order"
    topic = "outbox.event." + atype
    broker.create_topic(topic, partitions=16)
    insert_range(pg, table, atype, 1, 60000, keys=64)
    # Slow acknowledgements keep the backlog unfinished when it is killed.
    broker.cmd("rtt all 300")
    d = outboxd_factory(config(table, "processed_on_utc IS NULL"))
    d.wait_log(r"publishing the backlog", 30)
    time.sleep(0.3)
    d.kill9()
    assert "backlog published" not in d.log_text()
    broker.cmd("rtt all 0")
    slot = d.config["postgres"]["slot"]
    wait_until(lambda: pg.slot(slot) is None, 10, 0.1,
               "no slot left behind by the killed backlog")
    insert_range(pg, table, atype, 60001, 60500, keys=64)
    d2 = outboxd_factory(config(table, "processed_on_utc IS NULL"))
    d2.wait_log(r"backlog published", 50)
    insert_range(pg, table, atype, 60501, 60600, keys=64,
                 created="clock_timestamp()")
    want = ids_where(pg, table, "true")
    recs = consumer.collect(topic, len(want), timeout=50, settle=0.5)
    got = {header(r, "id").decode() for r in recs}
    assert want - got == set()


def test_bad_predicate_exit_2_and_no_slot(pg, broker, outboxd_factory,
                                          test_id):
    table = make_table(pg, test_id)
    d = outboxd_factory(config(table, "no_such_column IS NULL"), start=False)
    rc, out, err = d.run_cmd(["check"])
    assert rc == 2
    assert "backlog" in out and "no_such_column" in out
    d.start()
    assert d.wait(30) == 2
    assert "no_such_column" in d.log_text()
    assert pg.slot(d.config["postgres"]["slot"]) is None


def test_slot_create_publishes_backlog_then_run_streams(pg, broker, consumer,
                                                        outboxd_factory,
                                                        test_id):
    table = make_table(pg, test_id)
    atype = test_id + "_order"
    topic = "outbox.event." + atype
    insert_range(pg, table, atype, 1, 500)
    d = outboxd_factory(config(table, "processed_on_utc IS NULL"),
                        start=False)
    rc, out, err = d.run_cmd(["slot", "create"])
    assert rc == 0, err
    slot = d.config["postgres"]["slot"]
    assert pg.slot(slot) is not None
    first = consumer.collect(topic, 500, timeout=20, settle=0.5)
    assert len(first) == 500
    d.start()
    d.wait_log(r"streaming from slot|START_REPLICATION", 20)
    assert "publishing the backlog" not in d.log_text()
    insert_range(pg, table, atype, 501, 600, created="clock_timestamp()")
    recs = consumer.collect(topic, 600, timeout=20)
    got = [header(r, "id").decode() for r in recs]
    assert len(got) == 600 and len(set(got)) == 600
    assert_key_order(recs)


def test_backlog_order_by_honoured(pg, broker, consumer, outboxd_factory,
                                   test_id):
    table = make_table(pg, test_id)
    atype = test_id + "_order"
    topic = "outbox.event." + atype
    insert_range(pg, table, atype, 1, 300, keys=1)
    d = outboxd_factory(config(table, "processed_on_utc IS NULL",
                               backlog_order_by="(payload->>'n')::int DESC"))
    d.wait_log(r"backlog published", 30)
    recs = consumer.collect(topic, 300, timeout=20, settle=0.5)
    ns = [n_of(r) for r in sorted(recs, key=lambda r: r["offset"])]
    assert ns == list(range(300, 0, -1))


def test_bad_backlog_row_dead_lettered(pg, broker, consumer, outboxd_factory,
                                       test_id):
    table = make_table(pg, test_id)
    atype = test_id + "_order"
    topic = "outbox.event." + atype
    insert_range(pg, table, atype, 1, 50)
    bad = pg.sql("INSERT INTO public.%s (aggregate_type, aggregate_id, "
                 "event_type, payload, headers) VALUES (%%s, 'kb', 'e', "
                 "'{\"n\": 0}', '[1, 2]') RETURNING id::text" % table,
                 (atype,))[0][0]
    d = outboxd_factory(config(table, "processed_on_utc IS NULL"))
    d.wait_log(r"backlog published", 30)
    recs = consumer.collect(topic, 50, timeout=20, settle=0.5)
    assert len(recs) == 50
    dlq = consumer.collect(d.config["outbox"]["dlq_topic"], 1, timeout=20,
                           settle=0.5)
    assert [header(r, "id").decode() for r in dlq] == [bad]
    assert header(dlq[0], "error").startswith(b"headers column")


def test_batch_refused_during_backlog_suspects_retried_alone(
        pg, broker, consumer, outboxd_factory, test_id):
    """The broker refuses a whole batch while the backlog is published: the
    backlog is published again from a new snapshot (a new consistent
    point), and the refused batch's records are still produced alone there
    (they are known by the old point until then), so a record the broker
    keeps refusing cannot hold the cutover forever. Every row arrives,
    nothing is dead-lettered."""
    table = make_table(pg, test_id)
    atype = test_id + "_order"
    topic = "outbox.event." + atype
    insert_range(pg, table, atype, 1, 400)
    broker.cmd("error 0 INVALID_RECORD 1")
    d = outboxd_factory(config(table, "processed_on_utc IS NULL"))
    d.wait_log(r"backlog published", 60)
    log = d.log_text()
    assert "recreating the kafka producer" in log, d.log_tail()
    assert "alone: the broker refused the batch" in log, d.log_tail()
    # The refused batch's partition is published again and other
    # partitions' records may be there twice: 400 records read are no
    # proof that every row was, so read until every row's id was seen.
    recs = collect_all(consumer, topic, ids_where(pg, table, "true"), timeout=30)
    assert {n_of(r) for r in recs} == set(range(1, 401))
    assert consumer.collect(d.config["outbox"]["dlq_topic"], 0, timeout=3,
                            settle=0.5) == []
