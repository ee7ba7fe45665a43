"""Integration tests of the pgoutput decoder (deploy/README.md, "Choosing a decoder")
against a real PostgreSQL 15 and the mock broker: both decoders give the
same records byte for byte; the publication is created when missing,
refused when it would leave events out, and named with its SQL when the
role may not create it; a slot of the other plugin names both; a
partitioned outbox table, with partitions created and attached while
outboxd streams, loses nothing.

The suites of test_stream.py, test_faults.py and test_backlog.py run with
both decoders too (their DECODERS).

Also here, the attacks on the pgoutput decoder (marked no_sanitizers and
no_version_matrix: they run in the plain pass on 15): schema changes,
publication changes, other tables, TRUNCATE, logical messages of other
prefixes and non-transactional ones, savepoints, two-phase commit, huge
values and transactions, odd session settings of the role, types pgoutput
describes with Type messages, a partition detached while streaming, the
walsender terminated inside a large transaction. Each asserts the
guarantees: every event delivered (or dead-lettered where README says so),
exactly once within one process life, in key order, and the slot never
confirmed past an undelivered event."""

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


def test_physical_slot_of_that_name_exits_1(pg, outboxd_factory, slot_name):
    """A physical slot has neither plugin nor database, as a logical slot
    another process is still creating has no plugin yet: the first is an
    error naming it, not a wait for a creation that never ends."""
    pg.sql("SELECT pg_create_physical_replication_slot(%s)", (slot_name,))
    try:
        d = outboxd_factory({})
        assert d.wait(30) == 1
        assert "uses plugin none (a physical slot)" in d.log_text(), \
            d.log_tail()
        rc, out, err = d.run_cmd(["slot", "create", "--if-not-exists"])
        assert rc == 1 and "none (a physical slot)" in out + err, out + err
        rc, out, _ = d.run_cmd(["check"])
        assert rc == 2 and "slot plugin is none (a physical slot)" in out, out
    finally:
        pg.sql("SELECT pg_drop_replication_slot(%s)", (slot_name,))


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


def own_table(pg, test_id, suffix="ob"):
    """A copy of public.outbox of the test's own, so DDL on it disturbs no
    other test."""
    t = "%s_%s" % (test_id, suffix)
    pg.sql("CREATE TABLE public.%s (LIKE public.outbox INCLUDING ALL)" % t)
    return t


def txn_conn(pg, **kw):
    """A connection whose statements make one transaction until commit()
    (pg.connect() is in autocommit mode)."""
    conn = pg.connect(**kw)
    conn.autocommit = False
    return conn


def wait_slot_caught_up(pg, slot_name, timeout=30):
    target = pg.wal_lsn()
    wait_until(lambda: pg.slot(slot_name)["confirmed_flush_lsn_int"]
               >= target - 1024 * 1024, timeout, 0.2,
               "slot confirmed close to the WAL end")


class Writer:
    """Inserts batches of rows into table with an increasing n per key
    (n counts across batches) until stopped."""

    def __init__(self, pg, table, atype, batch=10, pause=0.01):
        self.pg, self.table, self.atype = pg, table, atype
        self.batch, self.pause = batch, pause
        self.n = 0
        self.stop = threading.Event()
        self.error = None
        self.t = threading.Thread(target=self.run)

    def run(self):
        try:
            while not self.stop.is_set():
                insert(self.pg, self.table, self.atype, self.batch,
                       first=self.n)
                self.n += self.batch
                time.sleep(self.pause)
        except Exception as e:  # reported by __exit__
            self.error = e

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.t.join()
        if self.error is not None and exc[0] is None:
            raise self.error


@pytest.mark.no_sanitizers
@pytest.mark.no_version_matrix
def test_alter_table_while_streaming(pg, broker, consumer, outboxd_factory,
                                     test_id, slot_name):
    """Columns added, renamed, retyped (with and without a table rewrite),
    dropped, and DDL between inserts of one transaction, while rows stream:
    new Relation messages mid-stream and mid-transaction lose, duplicate or
    reorder nothing."""
    table = own_table(pg, test_id)
    atype = "%s_alt" % test_id
    d = outboxd_factory(pgoutput({"outbox": {"table": "public." + table}}))
    d.wait_log("streaming from slot", 20)
    ddl = [
        "ALTER TABLE public.{t} ADD COLUMN extra text DEFAULT 'x'",
        "ALTER TABLE public.{t} RENAME COLUMN extra TO extra2",
        "ALTER TABLE public.{t} ALTER COLUMN extra2 TYPE varchar(20)",
        # A rewrite: the transient table's inserts must not be published.
        "ALTER TABLE public.{t} ALTER COLUMN extra2 DROP DEFAULT, "
        "ALTER COLUMN extra2 TYPE int USING length(extra2)",
        "ALTER TABLE public.{t} ALTER COLUMN aggregate_id TYPE varchar(40)",
        "ALTER TABLE public.{t} REPLICA IDENTITY FULL",
        "ALTER TABLE public.{t} DROP COLUMN extra2",
        "ALTER TABLE public.{t} ADD COLUMN g int GENERATED ALWAYS AS "
        "(length(event_type)) STORED",
    ]
    with Writer(pg, table, atype):
        for stmt in ddl:
            time.sleep(0.3)
            pg.sql(stmt.format(t=table))
        time.sleep(0.3)
        # DDL between the inserts of one transaction, on the writer's keys
        # (its own n range, so key order still holds per key).
        conn = txn_conn(pg)
        with conn.cursor() as cur:
            base = 10 ** 6
            insert(pg, table, atype, 5, first=base, key_count=5, cur=cur)
            cur.execute("ALTER TABLE public.%s ADD COLUMN y int DEFAULT 7"
                        % table)
            insert(pg, table, atype, 5, first=base + 5, key_count=5, cur=cur)
            cur.execute("ALTER TABLE public.%s DROP COLUMN y" % table)
            insert(pg, table, atype, 5, first=base + 10, key_count=5,
                   cur=cur)
            cur.execute("SAVEPOINT s")
            cur.execute("ALTER TABLE public.%s ADD COLUMN z int" % table)
            insert(pg, table, atype, 5, first=base + 15, key_count=5,
                   cur=cur)
            cur.execute("ROLLBACK TO SAVEPOINT s")
            insert(pg, table, atype, 5, first=base + 20, key_count=5,
                   cur=cur)
        conn.commit()
        conn.close()
        time.sleep(0.5)
    ids = ids_of(pg, table, atype)
    records = consumer.collect("outbox.event." + atype, len(ids), 60)
    assert_all_delivered(records, ids)
    assert len(records) == len(ids)
    dlq = consumer.collect("%s.outbox.dlq" % test_id, 0, 3)
    assert not dlq, [r["headers"] for r in dlq]
    wait_slot_caught_up(pg, slot_name)
    assert d.running(), d.log_tail()


@pytest.mark.no_sanitizers
@pytest.mark.no_version_matrix
def test_dropped_mapped_column_dead_letters_not_loses(
        pg, broker, consumer, outboxd_factory, test_id, slot_name):
    """The headers column is dropped while streaming, then the key column:
    rows after that are dead-lettered (a missing key is a bad event), never
    skipped without a word; rows before are published."""
    table = own_table(pg, test_id)
    atype = "%s_drop" % test_id
    d = outboxd_factory(pgoutput({"outbox": {"table": "public." + table}}))
    d.wait_log("streaming from slot", 20)
    insert(pg, table, atype, 10)
    pg.sql("ALTER TABLE public.%s DROP COLUMN headers" % table)
    pg.sql("INSERT INTO public.%s (aggregate_type, aggregate_id, event_type, "
           "payload) SELECT %%s, 'k' || (g %%%% 5), 'e', "
           "jsonb_build_object('n', g) FROM generate_series(10, 19) g"
           % table, (atype,))
    before_drop_key = ids_of(pg, table, atype)
    pg.sql("ALTER TABLE public.%s DROP COLUMN aggregate_id" % table)
    pg.sql("INSERT INTO public.%s (aggregate_type, event_type, payload) "
           "SELECT %%s, 'e', jsonb_build_object('n', g) "
           "FROM generate_series(20, 24) g" % table, (atype,))
    records = consumer.collect("outbox.event." + atype,
                               len(before_drop_key), 30)
    assert_all_delivered(records, before_drop_key)
    dlq = consumer.collect("%s.outbox.dlq" % test_id, 5, 30)
    assert len(dlq) == 5, d.log_tail()
    wait_slot_caught_up(pg, slot_name)


@pytest.mark.no_sanitizers
@pytest.mark.no_version_matrix
def test_other_tables_truncate_and_messages_interleaved(
        pg, broker, consumer, outboxd_factory, test_id, slot_name):
    """A second table added to the publication while streaming (its rows in
    the same transactions as outbox rows), TRUNCATE of both, logical
    messages of other prefixes, transactional and not, and outbox messages
    not in a transaction: the outbox's events, exactly once, in key order;
    nothing of the other table."""
    table = own_table(pg, test_id)
    other = "%s_other" % test_id
    pg.sql("CREATE TABLE public.%s (id serial PRIMARY KEY, aggregate_type "
           "text, aggregate_id text, event_type text, payload jsonb, "
           "headers jsonb, created_at timestamptz DEFAULT now(), "
           "big text)" % other)
    atype = "%s_mix" % test_id
    d = outboxd_factory(pgoutput({"outbox": {"table": "public." + table}}))
    d.wait_log("streaming from slot", 20)
    pub = "pub_" + test_id
    msg_ids = []
    with Writer(pg, table, atype):
        time.sleep(0.3)
        pg.sql("ALTER PUBLICATION %s ADD TABLE public.%s" % (pub, other))
        pg.sql("ALTER PUBLICATION %s SET (publish = 'insert, update, delete, "
               "truncate')" % pub)
        for i in range(20):
            conn = txn_conn(pg)
            with conn.cursor() as cur:
                cur.execute("INSERT INTO public.%s (aggregate_type, "
                            "aggregate_id, event_type, payload, big) VALUES "
                            "(%%s, 'k1', 'e', '{\"n\": 1}', repeat('z', "
                            "%%s))" % other, (atype, 100000 if i % 5 == 0
                                              else 3))
                cur.execute("SELECT pg_logical_emit_message(true, 'other', "
                            "'x')")
                cur.execute("SELECT pg_logical_emit_message(false, "
                            "'outboxz', 'y')")
                cur.execute("SELECT pg_logical_emit_message(false, '', '')")
                mid = "m-%s-%d" % (test_id, i)
                msg_ids.append(mid)
                body = {"id": mid, "aggregate_type": atype + "_msg",
                        "aggregate_id": "m", "event_type": "e",
                        "payload": {"n": i}}
                cur.execute("SELECT pg_logical_emit_message(true, 'outbox', "
                            "%s)", (json.dumps(body),))
                # Not transactional: dead-lettered (README), never lost.
                body["id"] = "nt-" + mid
                cur.execute("SELECT pg_logical_emit_message(false, 'outbox', "
                            "%s)", (json.dumps(body),))
                cur.execute("UPDATE public.%s SET big = 'u'" % other)
                cur.execute("DELETE FROM public.%s WHERE id %% 2 = 0" % other)
                if i % 7 == 3:
                    cur.execute("TRUNCATE public.%s" % other)
            conn.commit()
            conn.close()
            time.sleep(0.05)
        time.sleep(0.3)
    # A TRUNCATE of the outbox itself (its rows were published already).
    ids = ids_of(pg, table, atype)
    pg.sql("TRUNCATE public.%s" % table)
    insert(pg, table, atype, 5, first=10 ** 6)
    ids |= ids_of(pg, table, atype)
    records = consumer.collect("outbox.event." + atype, len(ids), 60)
    assert_all_delivered(records, ids)
    assert len(records) == len(ids)
    assert_key_order(records)
    msgs = consumer.collect("outbox.event.%s_msg" % atype, len(msg_ids), 30)
    assert sorted(header(r, "id").decode() for r in msgs) == sorted(msg_ids)
    assert [json.loads(r["value"])["n"] for r in
            sorted(msgs, key=lambda r: r["offset"])] == list(range(20))
    dlq = consumer.collect("%s.outbox.dlq" % test_id, 20, 30)
    assert len(dlq) == 20, [r["headers"] for r in dlq]
    assert all(header(r, "reason") in (None, b"non-transactional-message")
               for r in dlq), [r["headers"] for r in dlq]
    wait_slot_caught_up(pg, slot_name)
    assert d.running(), d.log_tail()


@pytest.mark.no_sanitizers
@pytest.mark.no_version_matrix
def test_savepoints_and_two_phase_commit(own_cluster, broker, consumer,
                                         outboxd_factory, test_id,
                                         slot_name):
    """Rows of rolled-back subtransactions are never published, released
    ones are; a prepared transaction is published at COMMIT PREPARED (also
    when outboxd restarted, and confirmed past the PREPARE, in between) and
    never when rolled back."""
    c = own_cluster(max_prepared_transactions=5, timezone="'Asia/Kolkata'")
    atype = "%s_2pc" % test_id
    d = outboxd_factory(pgoutput({"postgres": {"conninfo": c.conninfo()}}))
    d.wait_log("streaming from slot", 20)
    conn = txn_conn(c)
    with conn.cursor() as cur:
        insert(c, "outbox", atype, 3, first=0, cur=cur)
        cur.execute("SAVEPOINT a")
        insert(c, "outbox", atype + "_gone", 3, cur=cur)
        cur.execute("SELECT pg_logical_emit_message(true, 'outbox', %s)",
                    (json.dumps({"id": "gone", "aggregate_type": atype,
                                 "aggregate_id": "k0", "payload": {"n": -1}}),))
        cur.execute("ROLLBACK TO SAVEPOINT a")
        insert(c, "outbox", atype, 3, first=3, cur=cur)
        cur.execute("SAVEPOINT b")
        insert(c, "outbox", atype, 3, first=6, cur=cur)
        cur.execute("SAVEPOINT c")
        insert(c, "outbox", atype + "_gone", 3, cur=cur)
        cur.execute("ROLLBACK TO SAVEPOINT c")
        cur.execute("RELEASE SAVEPOINT b")
    conn.commit()
    # Two prepared transactions on keys of their own.
    for gid, first in (("p1_" + test_id, 100), ("p2_" + test_id, 200)):
        with conn.cursor() as cur:
            insert(c, "outbox", atype, 5, first=first, key_count=1, cur=cur)
            cur.execute("UPDATE public.outbox SET aggregate_id = 'x' || "
                        "aggregate_id WHERE false")
            cur.execute("PREPARE TRANSACTION %s", (gid,))
        conn.commit()
    conn.autocommit = True
    insert(c, "outbox", atype, 3, first=9)
    records = consumer.collect("outbox.event." + atype, 12, 30)
    assert len(records) == 12
    # Restart outboxd while both are prepared: the slot moves past their
    # PREPARE records.
    wait_until(lambda: c.slot(slot_name)["confirmed_flush_lsn_int"]
               >= c.wal_lsn() - 64, 20, 0.2, "slot caught up")
    d.terminate()
    assert d.wait(30) == 0, d.log_tail()
    with conn.cursor() as cur:
        cur.execute("COMMIT PREPARED %s", ("p1_" + test_id,))
        cur.execute("ROLLBACK PREPARED %s", ("p2_" + test_id,))
    insert(c, "outbox", atype, 3, first=12)
    conn.close()
    d2 = outboxd_factory(pgoutput({"postgres": {"conninfo": c.conninfo()}}))
    d2.wait_log("streaming from slot", 20)
    ids = {r[0] for r in c.sql("SELECT id::text FROM public.outbox WHERE "
                               "aggregate_type = %s", (atype,))}
    assert len(ids) == 20
    records = consumer.collect("outbox.event." + atype, 20, 30)
    assert_all_delivered(records, ids)
    assert len(records) == 20
    assert not any(json.loads(r["value"])["n"] < 0 for r in records)
    wait_until(lambda: c.slot(slot_name)["confirmed_flush_lsn_int"]
               >= c.wal_lsn() - 64, 20, 0.2, "slot caught up")


@pytest.mark.no_sanitizers
@pytest.mark.no_version_matrix
def test_huge_value_between_rows(pg, broker, consumer, outboxd_factory,
                                 test_id, slot_name):
    """A 50 MB payload (TOASTed, sent whole by pgoutput) between ordinary
    rows of the same transaction: the large one is dead-lettered as
    too-large (headers only), the others published, in order; the slot
    moves on."""
    atype = "%s_huge" % test_id
    d = outboxd_factory(pgoutput())
    d.wait_log("streaming from slot", 20)
    conn = txn_conn(pg)
    with conn.cursor() as cur:
        insert(pg, "outbox", atype, 5, first=0, key_count=1, cur=cur)
        cur.execute("INSERT INTO public.outbox (aggregate_type, aggregate_id, "
                    "event_type, payload) VALUES (%s, 'k0', 'e', "
                    "jsonb_build_object('n', 5, 'pad', repeat('x', "
                    "50000000)))", (atype,))
        insert(pg, "outbox", atype, 5, first=6, key_count=1, cur=cur)
    conn.commit()
    conn.close()
    insert(pg, "outbox", atype, 5, first=11, key_count=1)
    ids = ids_of(pg, "outbox", atype)
    records = consumer.collect("outbox.event." + atype, 15, 90)
    assert len(records) == 15, d.log_tail()
    assert [json.loads(r["value"])["n"] for r in
            sorted(records, key=lambda r: r["offset"])] == \
        [n for n in range(16) if n != 5]
    dlq = consumer.collect("%s.outbox.dlq" % test_id, 1, 60)
    assert len(dlq) == 1, d.log_tail()
    delivered = {header(r, "id").decode() for r in records} | \
        {header(r, "id").decode() for r in dlq if header(r, "id")}
    assert delivered == ids
    wait_slot_caught_up(pg, slot_name, 60)
    assert d.running(), d.log_tail()


@pytest.mark.no_sanitizers
@pytest.mark.no_version_matrix
def test_walsender_terminated_inside_a_large_transaction(
        pg, broker, consumer, outboxd_factory, test_id, slot_name):
    """The walsender is terminated three times while outboxd reads one
    transaction of 60000 rows (its Relation message comes again in each new
    session): every row exactly once, in key order."""
    atype = "%s_big" % test_id
    d = outboxd_factory(pgoutput({"kafka": {
        "queue.buffering.max.kbytes": "2048"}}))
    d.wait_log("streaming from slot", 20)
    broker.cmd("rtt all 20")
    insert(pg, "outbox", atype, 60000, key_count=50)
    pids = set()
    for _ in range(3):
        wait_until(lambda: pg.sql(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = "
            "%s AND active_pid IS NOT NULL", (slot_name,)) and pg.sql(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = "
            "%s", (slot_name,))[0][0] not in pids, 30, 0.1, "walsender")
        time.sleep(1.0)
        pid = pg.sql("SELECT active_pid FROM pg_replication_slots WHERE "
                     "slot_name = %s", (slot_name,))[0][0]
        pids.add(pid)
        pg.sql("SELECT pg_terminate_backend(%s)", (pid,))
    broker.cmd("rtt all 0")
    ids = ids_of(pg, "outbox", atype)
    records = consumer.collect("outbox.event." + atype, len(ids), 180,
                               settle=3)
    assert_all_delivered(records, ids)
    assert len(records) == len(ids)
    assert_key_order(records)
    assert d.log_text().count("streaming from slot") >= 4, d.log_tail()
    wait_slot_caught_up(pg, slot_name, 60)


@pytest.mark.no_sanitizers
@pytest.mark.no_version_matrix
def test_odd_role_settings_and_types_give_the_same_records(
        pg, broker, consumer, outboxd_factory, test_id):
    """A role whose own settings are DateStyle SQL/DMY, TimeZone
    America/St_Johns, IntervalStyle iso_8601, extra_float_digits -3 and
    bytea_output escape, and a table whose columns are an enum, a domain
    over bigint, a composite, a domain over jsonb and an array: pgoutput
    under that role gives the records wal2json gives under it (and both the
    same under the default role): the walsender renders values with the
    session settings outboxd pins, the role's TimeZone only shifts the
    offset of timestamptz text, and the timestamp column is read right."""
    t = test_id
    atype = "%s_typ" % t
    role = "r_%s" % t
    pg.sql("CREATE TYPE public.%s_kind AS ENUM ('%s')" % (t, atype))
    pg.sql("CREATE DOMAIN public.%s_key AS bigint CHECK (VALUE > 0)" % t)
    pg.sql("CREATE DOMAIN public.%s_js AS jsonb" % t)
    pg.sql("CREATE TYPE public.%s_pair AS (a int, b text, c timestamptz, "
           "d float8, e bytea)" % t)
    pg.sql("CREATE TABLE public.%s_typed (id uuid PRIMARY KEY DEFAULT "
           "gen_random_uuid(), kind public.%s_kind NOT NULL, k public.%s_key, "
           "v public.%s_pair, hs public.%s_js, at timestamptz, arr int[])"
           % (t, t, t, t, t))
    pg.sql("CREATE ROLE %s LOGIN REPLICATION SUPERUSER" % role)
    for s in ("DateStyle = 'SQL, DMY'", "TimeZone = 'America/St_Johns'",
              "IntervalStyle = 'iso_8601'", "extra_float_digits = -3",
              "bytea_output = 'escape'"):
        pg.sql("ALTER ROLE %s SET %s" % (role, s))
    common = {"table": "public.%s_typed" % t, "key_column": "k",
              "type_column": "kind", "payload_column": "v",
              "headers_column": "hs", "timestamp_column": "at"}
    pg.sql("CREATE PUBLICATION pub_%s FOR TABLE public.%s_typed WITH "
           "(publish = 'insert', publish_via_partition_root = true)" % (t, t))
    w = outboxd_factory({"postgres": {"slot": "w_" + t},
                         "outbox": dict(common, topic="w.{kind}")})
    p = outboxd_factory(pgoutput({"postgres": {"slot": "p_" + t},
                                  "outbox": dict(common, topic="p.{kind}")}))
    q = outboxd_factory(pgoutput({"postgres": {
        "slot": "q_" + t, "conninfo": pg.conninfo(user=role)},
        "outbox": dict(common, topic="q.{kind}")}))
    wr = outboxd_factory({"postgres": {
        "slot": "wr_" + t, "conninfo": pg.conninfo(user=role)},
        "outbox": dict(common, topic="wr.{kind}")})
    for d in (w, p, q, wr):
        d.wait_log("streaming from slot", 20)
    pg.sql("INSERT INTO public.%s_typed (kind, k, v, hs, at, arr) VALUES "
           "(%%s, 1, ROW(1, 'a \"b\" c,', '2024-03-10 02:30:00 "
           "America/New_York', 0.1, '\\x00ff'), '{\"a\": [1, 2.50]}', "
           "'2024-12-31 23:59:59.123456+14', '{1,NULL,3}'), "
           "(%%s, 2, NULL, NULL, '1999-01-08 04:05:06 PST', '{}'), "
           "(%%s, 3, ROW(NULL, NULL, 'infinity', 'NaN', NULL), '{}', "
           "'0044-03-15 12:00:00 BC', NULL)" % t, (atype, atype, atype))
    recs = {}
    for prefix in ("w", "p", "q", "wr"):
        recs[prefix] = consumer.collect("%s.%s" % (prefix, atype), 3, 30)
        assert len(recs[prefix]) == 3, (prefix, recs[prefix])

    def by_id(records):
        return {header(r, "id"): (r["key"], r["value"], r["headers"],
                                  r["partition"], r["timestamp"])
                for r in records}
    assert by_id(recs["p"]) == by_id(recs["w"])
    assert by_id(recs["q"]) == by_id(recs["wr"])
    # The role's TimeZone is honoured (timestamptz text inside the payload
    # carries its offset) but the instants, and so the record timestamps
    # read from the timestamp column, are the same.
    assert {i: v[4] for i, v in by_id(recs["q"]).items()} == \
        {i: v[4] for i, v in by_id(recs["p"]).items()}


@pytest.mark.no_sanitizers
@pytest.mark.no_version_matrix
def test_publication_dropped_while_streaming_confirms_nothing_past_it(
        pg, broker, consumer, outboxd_factory, test_id, slot_name):
    """DROP PUBLICATION while streaming: the walsender fails on the next
    change it decodes; outboxd does not confirm past the rows written after
    the drop and exits 1 naming the fix (a new publication would not cover
    them)."""
    table = own_table(pg, test_id)
    atype = "%s_dp" % test_id
    d = outboxd_factory(pgoutput({"outbox": {"table": "public." + table}}))
    d.wait_log("streaming from slot", 20)
    insert(pg, table, atype, 10)
    records = consumer.collect("outbox.event." + atype, 10, 30)
    assert len(records) == 10
    wait_slot_caught_up(pg, slot_name)
    pg.sql("DROP PUBLICATION pub_%s" % test_id)
    before = pg.wal_lsn()
    insert(pg, table, atype, 10, first=10)
    rc = d.wait(60)
    assert rc == 1, d.log_tail()
    assert pg.slot(slot_name)["confirmed_flush_lsn_int"] <= before, \
        d.log_tail()


@pytest.mark.no_sanitizers
@pytest.mark.no_version_matrix
@pytest.mark.parametrize("change,restore", [
    ("ALTER PUBLICATION {p} DROP TABLE public.{t}",
     "ALTER PUBLICATION {p} ADD TABLE public.{t}"),
    ("ALTER PUBLICATION {p} SET (publish = 'update')",
     "ALTER PUBLICATION {p} SET (publish = 'insert')"),
    ("ALTER PUBLICATION {p} SET TABLE public.{t} WHERE (event_type <> 'e')",
     "ALTER PUBLICATION {p} SET TABLE public.{t}"),
], ids=["drop-table", "no-inserts", "row-filter"])
def test_publication_altered_while_streaming(pg, broker, consumer,
                                             outboxd_factory, test_id,
                                             slot_name, change, restore):
    """The publication stops covering the outbox's inserts for a while
    (the table dropped from it, inserts not published, a row filter), then
    is put back. pgoutput decodes each change with the publication of its
    time, so the rows written meanwhile are never sent: outboxd cannot
    publish them, and must not confirm past them without a word. It reads
    the publication every second, stops (exit 1) naming the recovery, and
    the slot stays before the first row it may have missed."""
    table = own_table(pg, test_id)
    atype = "%s_ap" % test_id
    pub = "pub_" + test_id
    d = outboxd_factory(pgoutput({"outbox": {"table": "public." + table}}))
    d.wait_log("streaming from slot", 20)
    insert(pg, table, atype, 10)
    first = consumer.collect("outbox.event." + atype, 10, 20)
    assert_all_delivered(first, ids_of(pg, table, atype))
    before = pg.wal_lsn()
    pg.sql(change.format(p=pub, t=table))
    insert(pg, table, atype, 10, first=10)
    # Put back only once outboxd saw the change (it reads the publication
    # every second; on a slow machine later).
    changed = "publication %s changed while outboxd streamed it" % pub
    wait_until(lambda: changed in d.log_text(), 30, 0.1,
               "outboxd noticed the publication changed")
    pg.sql(restore.format(p=pub, t=table))
    insert(pg, table, atype, 10, first=20)
    assert d.wait(30) == 1, d.log_tail()
    assert pg.slot(slot_name)["confirmed_flush_lsn_int"] <= before


@pytest.mark.no_sanitizers
@pytest.mark.no_version_matrix
def test_partitions_detached_while_streaming(pg, broker, consumer,
                                             outboxd_factory, test_id,
                                             slot_name):
    """Partitions of a partitioned outbox detached (plainly and
    CONCURRENTLY) while rows stream: every row written while its partition
    was attached is published exactly once, in key order; rows written to
    the detached tables afterwards are not outbox rows."""
    table = "%s_parted" % test_id
    atype = "%s_det" % test_id
    pg.sql("""
CREATE TABLE public.{t} (
    id uuid NOT NULL DEFAULT gen_random_uuid(),
    aggregate_type text NOT NULL, aggregate_id text NOT NULL,
    event_type text NOT NULL, payload jsonb, headers jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);
CREATE TABLE public.{t}_old PARTITION OF public.{t}
    FOR VALUES FROM ('2000-01-01') TO ('2030-01-01');
CREATE TABLE public.{t}_2030 PARTITION OF public.{t}
    FOR VALUES FROM ('2030-01-01') TO ('2031-01-01');
CREATE TABLE public.{t}_2031 PARTITION OF public.{t}
    FOR VALUES FROM ('2031-01-01') TO ('2032-01-01');
""".format(t=table))
    d = outboxd_factory(pgoutput({"outbox": {"table": "public." + table}}))
    d.wait_log("streaming from slot", 20)

    def future(year, first, cur=None):
        sql = ("INSERT INTO public.%s (aggregate_type, aggregate_id, "
               "event_type, payload, created_at) SELECT %%s, 'f%d', 'e', "
               "jsonb_build_object('n', g), '%d-06-01' FROM "
               "generate_series(%%s, %%s) g" % (table, year, year))
        (cur.execute if cur else lambda q, a: pg.sql(q, a))(
            sql, (atype, first, first + 19))

    with Writer(pg, table, atype):
        time.sleep(0.3)
        conn = txn_conn(pg)
        with conn.cursor() as cur:
            future(2030, 0, cur)
            future(2031, 0, cur)
        conn.commit()
        conn.close()
        future(2030, 20)
        pg.sql("ALTER TABLE public.%s DETACH PARTITION public.%s_2030"
               % (table, table))
        future(2031, 20)
        pg.sql("ALTER TABLE public.%s DETACH PARTITION public.%s_2031 "
               "CONCURRENTLY" % (table, table))
        time.sleep(0.3)
    for year in (2030, 2031):
        pg.sql("INSERT INTO public.%s_%d (aggregate_type, aggregate_id, "
               "event_type, payload, created_at) VALUES (%%s, 'gone', 'e', "
               "'{\"n\": 0}', '%d-07-01')" % (table, year, year), (atype,))
    # The root no longer shows the detached tables' rows.
    ids = ids_of(pg, table, atype)
    for year in (2030, 2031):
        ids |= {r[0] for r in pg.sql(
            "SELECT id::text FROM public.%s_%d WHERE aggregate_id <> 'gone'"
            % (table, year))}
    records = consumer.collect("outbox.event." + atype, len(ids), 60)
    assert_all_delivered(records, ids)
    assert len(records) == len(ids)
    assert_key_order(records)
    assert not [r for r in records if r["key"] == "gone"]
    wait_slot_caught_up(pg, slot_name)
