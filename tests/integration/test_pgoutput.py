"""Integration tests of the pgoutput decoder (deploy/README.md, "Choosing a decoder")
against a real PostgreSQL 15 and the mock broker: both decoders give the
same records byte for byte; the publication is created when missing,
refused when it would leave events out, and named with its SQL when the
role may not create it; a slot of the other plugin names both; a
partitioned outbox table, with partitions created and attached while
outboxd streams, loses nothing.

The suites of test_stream.py, test_faults.py and test_backlog.py run with
both decoders too (their DECODERS)."""

import json
import threading
import time

import pytest

from harness import header, wait_until

PARTITIONED_DDL = """
CREATE TABLE public.{t} (
    id uuid NOT NULL DEFAULT gen_random_uuid(),
    aggregate_type text NOT NULL,
    aggregate_id text NOT NULL,
    event_type text NOT NULL,
    payload jsonb,
    headers jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
CREATE TABLE public.{t}_old PARTITION OF public.{t}
    FOR VALUES FROM ('2000-01-01') TO ('2030-01-01');
"""


def pgoutput(overrides=None):
    cfg = {"postgres": {"plugin": "pgoutput"}}
    for section, items in (overrides or {}).items():
        cfg.setdefault(section, {}).update(items)
    return cfg


def insert(pg, table, atype, n, key_count=5, created="now()", first=0,
           cur=None):
    """Rows n = first .. first + n - 1 (payload {"n": n, ...}, key
    k<n % key_count>) in one statement: on cur in its transaction, or in a
    transaction of their own."""
    sql = ("INSERT INTO public.%s (aggregate_type, aggregate_id, event_type, "
           "payload, headers, created_at) SELECT %%s, 'k' || (g %%%% %d), "
           "'e', jsonb_build_object('n', g, 's', 'é \"q\" \\\\ ✓'), "
           "jsonb_build_object('h', g), %s "
           "FROM generate_series(%%s, %%s) g" % (table, key_count, created))
    args = (atype, first, first + n - 1)
    if cur is not None:
        cur.execute(sql, args)
    else:
        pg.sql(sql, args)


def ids_of(pg, table, atype):
    return {r[0] for r in pg.sql(
        "SELECT id::text FROM public.%s WHERE aggregate_type = %%s" % table,
        (atype,))}


def assert_all_delivered(records, ids, exactly_once=True):
    seen = [header(r, "id").decode() for r in records]
    missing = ids - set(seen)
    assert not missing, "%d of %d rows never published" % (len(missing),
                                                          len(ids))
    if exactly_once:
        assert len(seen) == len(set(seen)), "duplicates"


def assert_key_order(records):
    by_key = {}
    for r in sorted(records, key=lambda r: (r["partition"], r["offset"])):
        n = json.loads(r["value"])["n"]
        prev = by_key.get(r["key"], -1)
        assert n > prev, "key %s: %d after %d" % (r["key"], n, prev)
        by_key[r["key"]] = n


def test_both_decoders_give_the_same_records(pg, broker, consumer,
                                             outboxd_factory, test_id):
    """The same rows and messages through wal2json and through pgoutput:
    identical keys, values, headers and timestamps (topics differ only by
    the template's prefix), including bytes, NULLs, numbers and a message."""
    atype = "%s_same" % test_id
    pg.sql("CREATE TABLE public.%s_raw (id uuid PRIMARY KEY DEFAULT "
           "gen_random_uuid(), kind text NOT NULL, k bigint, v bytea, "
           "n numeric, f float8, b boolean, at timestamptz DEFAULT now(), "
           "hs jsonb)" % test_id)
    common = {"table": "public.%s_raw" % test_id, "key_column": "k",
              "type_column": "kind", "payload_column": "v",
              "headers_column": "hs", "timestamp_column": "at"}
    w = outboxd_factory({"postgres": {"slot": "w_" + test_id},
                         "outbox": dict(common, topic="w.{kind}")})
    p = outboxd_factory(pgoutput({"postgres": {"slot": "p_" + test_id},
                                  "outbox": dict(common, topic="p.{kind}")}))
    for d in (w, p):
        d.wait_log("streaming from slot", 20)
    hs = json.dumps({"a": 1, "b": [1, 2], "c": "x\"y \\ é"})
    pg.sql("INSERT INTO public.%s_raw (kind, k, v, n, f, b, hs) VALUES "
           "(%%s, 1, '\\x00ff10'::bytea, 1.50, 2.5e-3, true, %%s::jsonb), "
           "(%%s, 2, NULL, NULL, 'NaN', false, NULL), "
           "(%%s, 3, '\\x'::bytea, -0.0, 1e300, NULL, '{}')" % test_id,
           (atype, hs, atype, atype))
    pg.sql("SELECT pg_logical_emit_message(true, 'outbox', %s)",
           (json.dumps({"id": "m-%s" % test_id, "kind": atype, "k": 4,
                        "v": "é \"q\"", "hs": {"z": [1, "2"]}}),))
    wrec = consumer.collect("w." + atype, 4, 30)
    prec = consumer.collect("p." + atype, 4, 30)
    assert len(wrec) == 4 and len(prec) == 4, (wrec, prec)

    def by_id(records):
        return {header(r, "id"): (r["key"], r["value"], r["headers"],
                                  r["partition"])
                for r in records}
    assert by_id(wrec) == by_id(prec)
    # Rows carry their timestamp column; the message its commit time, which
    # each decoder reads from the same commit.
    assert sorted(r["timestamp"] for r in wrec) == \
        sorted(r["timestamp"] for r in prec)


def test_missing_publication_is_created_before_the_slot(pg, broker, consumer,
                                                        outboxd_factory,
                                                        test_id, slot_name):
    """With no publication, outboxd creates it (the role owns the table),
    then the slot, and streams; `check` reports the publication."""
    d = outboxd_factory(pgoutput())
    d.wait_log("created publication pub_%s" % test_id, 20)
    d.wait_log("streaming from slot", 20)
    rows = pg.sql("SELECT pubinsert, pubupdate, pubviaroot FROM "
                  "pg_publication WHERE pubname = %s", ("pub_" + test_id,))
    assert rows == [(True, False, True)]
    atype = "%s_c" % test_id
    insert(pg, "outbox", atype, 20)
    records = consumer.collect("outbox.event." + atype, 20, 30)
    assert_all_delivered(records, ids_of(pg, "outbox", atype))
    rc, out, _ = d.run_cmd(["check"])
    assert "pub_%s publishes the inserts of public.outbox" % test_id in out, out


def test_unmapped_generated_column_leaves_the_publication_whole(
        pg, broker, consumer, outboxd_factory, test_id):
    """A GENERATED ... STORED column that no setting maps is no column list:
    from PostgreSQL 16 on, pg_publication_tables.attnames leaves such
    columns out (15 names them), and pgoutput never sends them, so the
    publication still publishes every event. outboxd streams, and goes on
    streaming when another such column is added while it runs (the
    publication's stamp is read again)."""
    table = "%s_gencol" % test_id
    pg.sql("CREATE TABLE public.%s (LIKE public.outbox INCLUDING ALL, "
           "n_len int GENERATED ALWAYS AS (length(event_type)) STORED)"
           % table)
    d = outboxd_factory(pgoutput({"outbox": {"table": "public." + table}}))
    d.wait_log("streaming from slot", 20)
    rc, out, _ = d.run_cmd(["check"])
    assert "pub_%s publishes the inserts of public.%s" % (test_id, table) \
        in out, out
    atype = "%s_g" % test_id
    insert(pg, table, atype, 10)
    consumer_records = consumer.collect("outbox.event." + atype, 10, 30,
                                        settle=0.2)
    assert_all_delivered(consumer_records, ids_of(pg, table, atype))
    pg.sql("ALTER TABLE public.%s ADD COLUMN h_len int GENERATED ALWAYS AS "
           "(length(aggregate_id)) STORED" % table)
    insert(pg, table, atype, 10, first=10)
    records = consumer.collect("outbox.event." + atype, 20, 30)
    assert_all_delivered(records, ids_of(pg, table, atype))
    assert d.running(), d.log_tail()


@pytest.mark.parametrize("ddl,needle", [
    ("CREATE PUBLICATION {p} FOR TABLE public.outbox WITH (publish = 'update')",
     "SET (publish = 'insert'"),
    ("CREATE PUBLICATION {p} FOR TABLE public.{t}_other",
     "ADD TABLE public.outbox"),
    ("CREATE PUBLICATION {p} FOR TABLE public.outbox WHERE "
     "(aggregate_type <> 'x')", "row filter"),
    ("CREATE PUBLICATION {p} FOR TABLE public.outbox (id, aggregate_type, "
     "aggregate_id, event_type, payload)", "column list"),
], ids=["no-inserts", "other-table", "row-filter", "column-list"])
def test_publication_that_leaves_events_out_exits_1(pg, outboxd_factory,
                                                    test_id, slot_name, ddl,
                                                    needle):
    """A publication that would skip events without a word is refused before
    the slot is created, with the statement that fixes it."""
    pg.sql("CREATE TABLE public.%s_other (x int)" % test_id)
    pg.sql(ddl.format(p="pub_" + test_id, t=test_id))
    d = outboxd_factory(pgoutput())
    assert d.wait(30) == 1
    assert needle in d.log_text(), d.log_tail()
    assert pg.slot(slot_name) is None


def test_partitioned_publication_without_root_exits_1(pg, outboxd_factory,
                                                      test_id, slot_name):
    """publish_via_partition_root = false would send a partitioned table's
    rows under their partitions' names."""
    table = "%s_parted" % test_id
    pg.sql(PARTITIONED_DDL.format(t=table))
    pg.sql("CREATE PUBLICATION pub_%s FOR TABLE public.%s" % (test_id, table))
    d = outboxd_factory(pgoutput({"outbox": {"table": "public." + table}}))
    assert d.wait(30) == 1
    assert "publish_via_partition_root = true" in d.log_text(), d.log_tail()
    assert pg.slot(slot_name) is None


def test_role_that_may_not_create_the_publication_gets_the_sql(
        pg, outboxd_factory, test_id, slot_name):
    """The least-privilege role (sql/role.sql: REPLICATION and SELECT) may
    not create the publication: exit 1 printing the statement to run."""
    role = "r_%s" % test_id
    pg.sql("CREATE ROLE %s LOGIN REPLICATION" % role)
    pg.sql("GRANT SELECT ON public.outbox TO %s" % role)
    d = outboxd_factory(pgoutput({"postgres": {
        "conninfo": pg.conninfo(user=role)}}))
    assert d.wait(30) == 1
    log = d.log_text()
    assert ("CREATE PUBLICATION pub_%s FOR TABLE public.outbox WITH "
            "(publish = 'insert', publish_via_partition_root = true);"
            % test_id) in log, d.log_tail()
    assert pg.slot(slot_name) is None
    rc, out, _ = d.run_cmd(["check"])
    assert rc == 2 and "CREATE PUBLICATION" in out, out


@pytest.mark.parametrize("made,configured", [
    ("wal2json", "pgoutput"), ("pgoutput", "wal2json")])
def test_slot_of_the_other_plugin_names_both(pg, outboxd_factory, slot_name,
                                             made, configured):
    pg.sql("SELECT pg_create_logical_replication_slot(%s, %s)",
           (slot_name, made))
    d = outboxd_factory({"postgres": {"plugin": configured}})
    assert d.wait(30) == 1
    log = d.log_text()
    assert "uses plugin %s, but postgres.plugin is %s" % (made, configured) \
        in log, d.log_tail()
    # The error names the safe switch, not only "drop the slot".
    assert "Switching decoders" in log and "backlog_where" in log, d.log_tail()


def test_existing_slot_without_publication_exits_1(pg, outboxd_factory,
                                                    test_id, slot_name):
    """pgoutput reads the publication as of each change it decodes: one
    made after the slot does not cover the rows the slot already holds
    (seen on PostgreSQL 15: after the first "publication does not exist"
    error, a new session passed those rows over without a word). So
    outboxd never creates a publication for an existing slot: exit 1 naming
    the fix, the slot not moved."""
    pg.sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')",
           (slot_name,))
    before = pg.slot(slot_name)["confirmed_flush_lsn_int"]
    insert(pg, "outbox", "%s_early" % test_id, 3)
    d = outboxd_factory(pgoutput())
    assert d.wait(30) == 1
    log = d.log_text()
    assert "pub_%s does not exist but replication slot %s does" % (
        test_id, slot_name) in log, d.log_tail()
    assert not pg.sql("SELECT 1 FROM pg_publication WHERE pubname = %s",
                      ("pub_" + test_id,))
    assert pg.slot(slot_name)["confirmed_flush_lsn_int"] == before


def test_publication_made_after_the_slot_is_never_passed_over(
        pg, outboxd_factory, test_id, slot_name):
    """A publication made by hand after the slot: the rows in between
    cannot be decoded ("publication does not exist"), and outboxd must stop
    on that, never move the slot past them. It checks the publication on a
    plain connection: run on the replication connection, the query left
    the walsender's caches such that Postgres 15 passed those rows over
    without a word."""
    pg.sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')",
           (slot_name,))
    before = pg.slot(slot_name)["confirmed_flush_lsn_int"]
    insert(pg, "outbox", "%s_early" % test_id, 3)
    pg.sql("CREATE PUBLICATION pub_%s FOR TABLE public.outbox WITH "
           "(publish = 'insert', publish_via_partition_root = true)" % test_id)
    d = outboxd_factory(pgoutput({"postgres": {
        "reconnect_max_backoff_ms": 200}}))
    assert d.wait(60) == 1
    log = d.log_text()
    assert "the publication must exist from the slot's position on" in log, \
        d.log_tail()
    assert "failed 5 times in a row" in log, d.log_tail()
    assert pg.slot(slot_name)["confirmed_flush_lsn_int"] == before


def test_partitioned_table_with_partitions_added_while_streaming(
        pg, broker, consumer, outboxd_factory, test_id, slot_name):
    """Rows inserted into any partition, including partitions created (with
    rows in the creating transaction) and attached while outboxd streams,
    are published under the table's mapping, exactly once and in key
    order; the slot never confirms past the last delivered row."""
    table = "%s_parted" % test_id
    atype = "%s_p" % test_id
    pg.sql(PARTITIONED_DDL.format(t=table))
    d = outboxd_factory(pgoutput({"outbox": {"table": "public." + table}}))
    d.wait_log("streaming from slot", 20)

    stop = threading.Event()
    counter = [0]

    def writer():
        while not stop.is_set():
            insert(pg, table, atype, 10, first=counter[0])
            counter[0] += 10
            time.sleep(0.01)
    t = threading.Thread(target=writer)
    t.start()
    try:
        time.sleep(0.5)
        conn = pg.connect()
        with conn.cursor() as cur:
            # A new partition and rows in it, in one transaction.
            cur.execute("CREATE TABLE public.%s_2030 PARTITION OF public.%s "
                        "FOR VALUES FROM ('2030-01-01') TO ('2031-01-01')"
                        % (table, table))
            cur.execute("INSERT INTO public.%s (aggregate_type, aggregate_id, "
                        "event_type, payload, created_at) SELECT %%s, 'z', "
                        "'e', jsonb_build_object('n', g), '2030-06-01' "
                        "FROM generate_series(0, 49) g" % table, (atype,))
        conn.commit()
        # A table filled first, then attached as a partition.
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE public.%s_2031 (LIKE public.%s)"
                        % (table, table))
            cur.execute("ALTER TABLE public.%s ATTACH PARTITION "
                        "public.%s_2031 FOR VALUES FROM ('2031-01-01') TO "
                        "('2032-01-01')" % (table, table))
            cur.execute("INSERT INTO public.%s (aggregate_type, aggregate_id, "
                        "event_type, payload, created_at) SELECT %%s, 'y', "
                        "'e', jsonb_build_object('n', g), '2031-06-01' "
                        "FROM generate_series(0, 49) g" % table, (atype,))
        conn.commit()
        conn.close()
        time.sleep(0.5)
    finally:
        stop.set()
        t.join()
    ids = ids_of(pg, table, atype)
    records = consumer.collect("outbox.event." + atype, len(ids), 60)
    assert_all_delivered(records, ids)
    assert_key_order(records)
    topics = {r["topic"] for r in records}
    assert topics == {"outbox.event." + atype}
    wait_until(lambda: pg.slot(slot_name)["confirmed_flush_lsn_int"]
               >= pg.wal_lsn() - 1024 * 1024, 20, 0.2,
               "slot confirmed close to the WAL end")
