"""The chaos workload: a seeded, single-threaded driver of several Postgres
sessions, and the history of what it committed.

The driver interleaves up to MAX_OPEN transactions, each on a connection of
its own, with autocommit statements, two-phase commits and DDL. Every
event (an outbox row or a transactional logical message with the outbox
prefix) carries a unique id and, in its payload, its aggregate key and a
per-key sequence number taken with `UPDATE chaos_keys ... RETURNING seq`
inside the event's transaction. That row lock is held until commit, so per
key the sequence numbers of committed events are strictly increasing in
commit order: the checker's expected order is the seq order.

Open transactions reserve their keys (a key belongs to at most one open or
prepared transaction), so the single thread never waits on a lock it holds
itself. Statements that take table locks (TRUNCATE of another table, DDL on
the outbox table) run under a lock_timeout or only when nothing is open.

Every writing transaction inserts its name into chaos_ledger first, so a
COMMIT whose answer was lost (Postgres restarted under it) is resolved by
looking the name up once the server answers again.

The draws from the seeded random.Random do not depend on outcomes, so one
seed always asks for the same sequence of operations; what the faults do
to them depends on timing."""

import collections
import json
import time
import uuid

import psycopg2
import psycopg2.extras

MAX_OPEN = 3
NUM_KEYS = 30
LOCK_TIMEOUT = "1s"
OTHER_PREFIX = "other"
CONN_ERRORS = (psycopg2.OperationalError, psycopg2.InterfaceError)
# Features a run can leave out (Driver's without): non-transactional
# messages of any prefix (each becomes a transactional one of another
# prefix: with interleaved sessions any of them may land right before a
# COMMIT record); non-transactional messages with the outbox prefix (bad
# events; they become ones of another prefix); partitions created,
# attached or detached while streaming; transactional outbox messages
# (each becomes a one-row insert); outbox rows deleted (inserted and
# deleted in one transaction, or 20 committed rows from another session);
# committed rows moved by an UPDATE (chaos.py). A recovered slot needs the
# last three out (walfaults.SLOT_WITHOUT): the table must hold every event.
FEATURES = frozenset({"nontx-messages", "bad-messages", "new-partitions",
                      "outbox-messages", "outbox-deletes", "moves"})
# The chance, after each insert of rows in a hold_key run, of one bad row
# (headers that are not a JSON object: a bad event with a key and a
# topic, which holds its key) of one of the transaction's keys.
BAD_ROW_CHANCE = 0.08


class Event:
    """One event written by the workload: id (uuid text), key, seq (per
    key, taken under the key's row lock), kind ('row' or 'msg'), txn (the
    name of its transaction)."""

    __slots__ = ("id", "key", "seq", "kind", "txn")

    def __init__(self, id_, key, seq, kind, txn):
        self.id, self.key, self.seq, self.kind, self.txn = \
            id_, key, seq, kind, txn

    def __repr__(self):
        return "%s#%d(%s %s)" % (self.key, self.seq, self.kind, self.id[:8])


class Txn:
    """One transaction of the workload. fate is 'open', 'committed',
    'aborted', 'prepared', 'unknown' (during resolution) or 'forked' (the
    new primary lacks it after a promotion: walfaults.Primary.forget);
    commit_no is its place in the global order of observed commits; t_end
    the run time (s) its outcome was known; events are those it would
    publish, dropped those of its rolled-back savepoints; ops describes
    what it did; trailer is the kind of message it emits right before its
    end, if any."""

    def __init__(self, name, t_start):
        self.name = name
        self.t_start = t_start
        self.t_end = None
        self.fate = "open"
        self.commit_no = None
        self.lsn_after = None
        self.events = []
        self.dropped = []
        self.ops = []
        self.buckets = set()
        self.trailer = None
        self.tail = False   # committed after the holds' releases began

    def describe(self):
        return "%s [%s] %s: %s" % (
            self.name, self.fate,
            "t=%.2f..%s" % (self.t_start, "%.2f" % self.t_end
                            if self.t_end is not None else "?"),
            "; ".join(self.ops))


class BadMessage:
    """A non-transactional logical message with the outbox prefix: a bad
    event on purpose (deploy/README.md "Failure modes": dead-lettered). emitted is
    True when the server answered the SELECT, None when the answer was
    lost (it may or may not be in the WAL); lsn is what the SELECT
    returned (the end of its WAL record: the decoders' message LSN, so
    the dead-letter record's source-lsn)."""

    __slots__ = ("id", "t", "emitted", "session", "lsn")

    def __init__(self, id_, t, emitted, session):
        self.id, self.t, self.emitted, self.session = id_, t, emitted, session
        self.lsn = None


class History:
    """What the workload did: txns by name, bad messages, and a log of its
    other statements (autocommit, DDL) with run times."""

    def __init__(self):
        self.txns = collections.OrderedDict()
        self.bad = []
        self.notes = []
        self.commits = 0

    def committed(self):
        """Committed txns in commit order."""
        return sorted((t for t in self.txns.values()
                       if t.fate == "committed"), key=lambda t: t.commit_no)

    def committed_events(self):
        """{id: Event} of every event of a committed txn (its bad rows
        left out: bad_rows())."""
        return {e.id: e for t in self.committed() for e in t.events
                if e.kind != "bad"}

    def bad_rows(self):
        """{id: Event} of every bad row of a committed txn (hold_key runs:
        each is dead-lettered and holds its key)."""
        return {e.id: e for t in self.committed() for e in t.events
                if e.kind == "bad"}

    def forked_events(self):
        """{id: Event} of every event of a transaction a promotion left
        behind (fate 'forked': committed on the old timeline past the
        switch point, or maybe committed there, its answer lost): it may
        or may not be published."""
        return {e.id: e for t in self.txns.values() if t.fate == "forked"
                for e in t.events if e.kind != "bad"}

    def never_events(self):
        """{id: Event} of events that must never be published: those of
        aborted txns and of rolled-back savepoints."""
        out = {}
        for t in self.txns.values():
            out.update((e.id, e) for e in t.dropped)
            if t.fate == "aborted":
                out.update((e.id, e) for e in t.events)
        return out


class Session:
    """An open transaction of the driver: its connection slot, the Txn,
    the keys it reserved, the parts it has still to run and how it ends
    ('commit', 'rollback', 'prepare-commit', 'prepare-rollback'), with an
    optional trailer statement right before that end."""

    def __init__(self, slot, txn, keys, parts, end, trailer):
        self.slot = slot
        self.txn = txn
        self.keys = keys
        self.parts = parts
        self.end = end
        self.trailer = trailer


def keys(prefix):
    """The workload's aggregate keys: prefix and a number ("kë" in a
    LATIN1 database: a key whose bytes differ between the two)."""
    return ["%s%02d" % (prefix, i) for i in range(NUM_KEYS)]


class Driver:
    """Runs the seeded workload against cluster `pg` (a harness.PgCluster)
    into the outbox table, recording a History.

    agg is the aggregate_type of every event (so one topic); partitioned
    says whether the outbox table is partitioned by LIST (bucket);
    slot_name is outboxd's slot (read before detaching a partition);
    clock() gives the run time; without is a subset of FEATURES to leave
    out (the random draws stay the same); hold_rng, in a hold_key run, a
    generator of its own that draws the bad rows (so the other draws stay
    the same); keep_detached, whether a detached partition is kept rather
    than dropped, and detached only once its rows lie behind outboxd's
    recovery point (the runs with slot faults)."""

    def __init__(self, pg, rng, agg, partitioned, slot_name, clock,
                 without=frozenset(), key_prefix="k", hold_rng=None,
                 keep_detached=False):
        self.pg = pg
        self.rng = rng
        self.agg = agg
        self.partitioned = partitioned
        self.slot_name = slot_name
        self.clock = clock
        self.history = History()
        self.without = frozenset(without)
        self.on_commit = None   # called with each Txn that commits
        self.hold_rng = hold_rng
        self.keys = keys(key_prefix)
        self.moveable = collections.deque(maxlen=500)  # committed rows' ids
        self.reserved = set()
        self.open = []
        self.prepared = []   # (Txn, keys, decision 'commit'|'rollback')
        self.conns = {}
        self.bucket = 0
        self.bucket_last_lsn = {0: 0}
        self.detached = set()
        self.keep_detached = keep_detached
        self.columns_added = 0
        self._names = 0
        self._slots = 0

    # -- schema ---------------------------------------------------------

    @staticmethod
    def setup_schema(pg, partitioned, outbox_sql, key_prefix="k",
                     seq=False):
        """Creates chaos_keys (the keys of key_prefix), chaos_ledger,
        chaos_other and public.outbox (sql/outbox.sql plus a bucket
        column, or a table partitioned by LIST (bucket) with partition
        outbox_b0; with seq, that one gets a column seq filled from a
        sequence, the insert order a recovery's backlog must follow:
        outbox.backlog_order_by, as sql/outbox.sql's identity column is
        for the plain table)."""
        pg.sql("CREATE TABLE chaos_keys (key text PRIMARY KEY, "
               "seq bigint NOT NULL DEFAULT 0);"
               "CREATE TABLE chaos_ledger (txn text PRIMARY KEY);"
               "CREATE TABLE chaos_other (id bigserial PRIMARY KEY, v text);")
        conn = pg.connect()
        try:
            with conn.cursor() as cur:
                psycopg2.extras.execute_values(
                    cur, "INSERT INTO chaos_keys (key) VALUES %s",
                    [(k,) for k in keys(key_prefix)])
            conn.commit()
        finally:
            conn.close()
        if partitioned:
            pg.sql("""
                CREATE TABLE public.outbox (
                    id uuid NOT NULL, aggregate_type text NOT NULL,
                    aggregate_id text NOT NULL, event_type text NOT NULL,
                    payload jsonb, headers jsonb,
                    created_at timestamptz NOT NULL DEFAULT now(),
                    bucket int NOT NULL, PRIMARY KEY (id, bucket)
                ) PARTITION BY LIST (bucket);%s
                CREATE TABLE public.outbox_b0 PARTITION OF public.outbox
                    FOR VALUES IN (0);""" % (
                """
                CREATE SEQUENCE public.outbox_seq;
                ALTER TABLE public.outbox ADD COLUMN seq bigint NOT NULL
                    DEFAULT nextval('public.outbox_seq');""" if seq else ""))
        else:
            pg.run_file(outbox_sql)
            pg.sql("ALTER TABLE public.outbox ADD COLUMN bucket int "
                   "NOT NULL DEFAULT 0")

    # -- connections ----------------------------------------------------

    def _conn(self, slot, autocommit=False):
        """The connection of slot (made, with retries while the server is
        away, when missing or broken)."""
        c = self.conns.get(slot)
        if c is not None and not c.closed:
            return c
        deadline = time.monotonic() + 90
        while True:
            try:
                c = self.pg.connect()
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        c.autocommit = autocommit
        with c.cursor() as cur:
            cur.execute("SET lock_timeout = %s", (LOCK_TIMEOUT,))
        self.conns[slot] = c
        return c

    def _drop_conn(self, slot):
        c = self.conns.pop(slot, None)
        if c is not None:
            try:
                c.close()
            except psycopg2.Error:
                pass

    def close(self):
        for slot in list(self.conns):
            self._drop_conn(slot)

    def _free_slot(self):
        self._slots += 1
        return "s%d" % self._slots

    # -- the plan ---------------------------------------------------------

    def _name(self):
        self._names += 1
        return "x%05d" % self._names

    def _rows_count(self):
        r = self.rng.random()
        if r < 0.70:
            return self.rng.randint(1, 5)
        if r < 0.90:
            return self.rng.randint(6, 60)
        if r < 0.98:
            return self.rng.randint(100, 600)
        return self.rng.randint(1000, 3000)

    def _plan_part(self, depth=0):
        """One part of a transaction body (see Session)."""
        r = self.rng.random()
        if r < 0.50:
            return ("rows", self._rows_count(), self.rng.random() < 0.15)
        if r < 0.65:
            return ("msg",)
        if r < 0.75 and depth == 0:
            sub = [self._plan_part(1) for _ in range(self.rng.randint(1, 3))]
            return ("savepoint", sub, self.rng.random() < 0.6)
        if r < 0.82:
            return ("other_write",)
        if r < 0.88:
            return ("message", self.rng.choice(
                ["tx-other", "nontx-other", "nontx-bad"]))
        if r < 0.93:
            return ("side_message", self.rng.choice(
                ["nontx-other", "nontx-bad", "tx-other"]))
        return ("rows", self.rng.randint(1, 5), False)

    def _plan_session(self):
        """(keys, parts, end, trailer) of a new transaction."""
        free = [k for k in self.keys if k not in self.reserved]
        n = min(len(free), self.rng.randint(1, 5))
        keys = self.rng.sample(free, n)
        parts = [self._plan_part() for _ in range(self.rng.randint(1, 4))]
        end = self.rng.choices(
            ["commit", "rollback", "prepare-commit", "prepare-rollback"],
            [0.78, 0.1, 0.08, 0.04])[0]
        trailer = self.rng.choices(
            [None, "nontx-other", "nontx-bad", "tx-other"],
            [0.45, 0.2, 0.2, 0.15])[0]
        return keys, parts, end, trailer

    # -- running ----------------------------------------------------------

    def step(self):
        """Draws and runs one operation."""
        choices = ["open", "advance", "other", "resolve", "ddl", "pause"]
        weights = [0.22, 0.45, 0.1, 0.08, 0.05, 0.1]
        op = self.rng.choices(choices, weights)[0]
        if op == "open":
            plan = self._plan_session()
            if len(self.open) < MAX_OPEN and plan[0]:
                self._open(*plan)
            elif self.open:
                self._advance(self.open[0])
        elif op == "advance" and self.open:
            self._advance(self.rng.choice(self.open))
        elif op == "other":
            self._other(self.rng.choice(
                ["nontx-other", "nontx-bad", "tx-other", "insert", "delete",
                 "truncate", "delete-outbox"]))
        elif op == "resolve" and self.prepared:
            self._resolve(self.prepared[0])
        elif op == "ddl":
            self._ddl(self.rng.choice(["add_column", "bucket", "bucket",
                                       "detach"]))
        elif op == "pause":
            time.sleep(self.rng.uniform(0, 0.05))

    def finish(self):
        """Ends every open transaction as planned and resolves every
        prepared one (the quiescent end of a run)."""
        while self.open:
            self._advance(self.open[0])
        while self.prepared:
            self._resolve(self.prepared[0])

    def fence(self):
        """Commits one ledger-only transaction; returns the WAL position
        after it (everything before it is then on disk)."""
        txn = Txn(self._name(), self.clock())
        self.history.txns[txn.name] = txn
        slot = "fence"
        try:
            with self._conn(slot).cursor() as cur:
                cur.execute("INSERT INTO chaos_ledger VALUES (%s)",
                            (txn.name,))
            self._commit(slot, txn, "COMMIT")
        except CONN_ERRORS:
            self._drop_conn(slot)
            return self.fence()
        return self._lsn()

    def _open(self, keys, parts, end, trailer):
        """Begins a transaction (its ledger row); returns its Session, or
        None when it failed at once."""
        txn = Txn(self._name(), self.clock())
        self.history.txns[txn.name] = txn
        s = Session(self._free_slot(), txn, keys, parts, end, trailer)
        txn.trailer = trailer
        self.reserved.update(keys)
        self.open.append(s)
        txn.ops.append("keys %s" % ",".join(sorted(keys)))
        if not self._run(s, lambda cur: cur.execute(
                "INSERT INTO chaos_ledger VALUES (%s)", (txn.name,))):
            return None
        return s

    def _close_session(self, s):
        self.open.remove(s)
        self._drop_conn(s.slot)

    def _abort(self, s, why):
        """The session's transaction failed before its end: aborted."""
        s.txn.fate = "aborted"
        s.txn.t_end = self.clock()
        s.txn.ops.append("ABORTED (%s)" % why.strip().splitlines()[0][:80])
        self.reserved.difference_update(s.keys)
        try:
            self.conns[s.slot].rollback()
        except (psycopg2.Error, KeyError):
            pass
        self._close_session(s)

    def _run(self, s, fn):
        """Runs fn(cursor) in the session's transaction; on any error the
        transaction is aborted. Returns whether it ran."""
        try:
            with self._conn(s.slot).cursor() as cur:
                fn(cur)
            return True
        except psycopg2.Error as e:
            self._abort(s, "%s: %s" % (type(e).__name__, e))
            return False

    def _advance(self, s):
        """Runs the session's next part, or its trailer and end."""
        if s.parts:
            part = s.parts.pop(0)
            self._run(s, lambda cur: self._part(cur, s, part))
            return
        if s.trailer and not self._run(
                s, lambda cur: self._message(cur, s.trailer, s.txn,
                                             "trailer")):
            return
        self._end(s)

    def _part(self, cur, s, part):
        kind = part[0]
        if kind == "rows":
            self._insert_rows(cur, s, part[1], part[2])
        elif kind == "msg" and "outbox-messages" in self.without:
            self._insert_rows(cur, s, 1, False)   # the same draws
        elif kind == "msg":
            self._event_message(cur, s)
        elif kind == "savepoint":
            cur.execute("SAVEPOINT sp")
            s.txn.ops.append("SAVEPOINT")
            mark = len(s.txn.events)
            for sub in part[1]:
                self._part(cur, s, sub)
            if part[2]:
                cur.execute("ROLLBACK TO SAVEPOINT sp")
                s.txn.dropped += s.txn.events[mark:]
                del s.txn.events[mark:]
                s.txn.ops.append("ROLLBACK TO SAVEPOINT")
            else:
                cur.execute("RELEASE SAVEPOINT sp")
                s.txn.ops.append("RELEASE SAVEPOINT")
        elif kind == "other_write":
            cur.execute("INSERT INTO chaos_other (v) SELECT repeat('o', 50) "
                        "FROM generate_series(1, %s)",
                        (self.rng.randint(1, 20),))
            s.txn.ops.append("insert chaos_other")
        elif kind == "message":
            self._message(cur, part[1], s.txn, "in txn")
        elif kind == "side_message":
            s.txn.ops.append("%s message from another session" % part[1])
            self._other(part[1], during=s.txn)

    def _take_seqs(self, cur, counts):
        """Advances chaos_keys.seq by counts[key] (locking the rows);
        returns {key: first new seq}."""
        rows = psycopg2.extras.execute_values(
            cur, "UPDATE chaos_keys k SET seq = k.seq + v.c FROM (VALUES %s)"
            " v(key, c) WHERE k.key = v.key RETURNING k.key, k.seq",
            sorted(counts.items()), template="(%s, %s::bigint)", fetch=True)
        return {k: seq - counts[k] + 1 for k, seq in rows}

    def _new_events(self, cur, s, n, kind):
        """n new Events over the session's keys, in statement order, with
        their sequence numbers taken."""
        keys = [self.rng.choice(s.keys) for _ in range(n)]
        first = self._take_seqs(cur, collections.Counter(keys))
        out = []
        for k in keys:
            out.append(Event(str(uuid.UUID(int=self.rng.getrandbits(128),
                                            version=4)),
                             k, first[k], kind, s.txn.name))
            first[k] += 1
        return out

    def _payload(self, e):
        pad = "p" * self.rng.choice([0, 10, 50, 200, 200, 1500])
        return json.dumps({"e": e.id, "k": e.key, "s": e.seq, "pad": pad})

    def _insert_rows(self, cur, s, n, then_delete):
        events = self._new_events(cur, s, n, "row")
        rows = [(e.id, self.agg, e.key, "chaos.row", self._payload(e),
                 self.bucket) for e in events]
        psycopg2.extras.execute_values(
            cur, "INSERT INTO public.outbox (id, aggregate_type, "
            "aggregate_id, event_type, payload, bucket) VALUES %s", rows,
            template="(%s, %s, %s, %s, %s::jsonb, %s)", page_size=1000)
        s.txn.events += events
        s.txn.buckets.add(self.bucket)
        s.txn.ops.append("insert %d rows into bucket %d (%s..%s)"
                         % (n, self.bucket, events[0], events[-1]))
        if then_delete and "outbox-deletes" not in self.without:
            cur.execute("DELETE FROM public.outbox WHERE id = ANY(%s::uuid[])",
                        ([e.id for e in events],))
            s.txn.ops.append("delete those rows")
        if self.hold_rng is not None and \
                self.hold_rng.random() < BAD_ROW_CHANCE:
            self._bad_row(cur, s, self.hold_rng.choice(sorted(s.keys)))

    def _bad_row(self, cur, s, key):
        """One outbox row of key (its seq taken) whose headers are not a
        JSON object: a bad event with a key and a topic (hold_key runs),
        its id and nothing else drawn from hold_rng."""
        first = self._take_seqs(cur, {key: 1})
        e = Event(str(uuid.UUID(int=self.hold_rng.getrandbits(128),
                                version=4)), key, first[key], "bad",
                  s.txn.name)
        cur.execute("INSERT INTO public.outbox (id, aggregate_type, "
                    "aggregate_id, event_type, payload, headers, bucket) "
                    "VALUES (%s, %s, %s, 'chaos.bad', %s::jsonb, "
                    "'[1, 2]'::jsonb, %s)",
                    (e.id, self.agg, e.key, json.dumps(
                        {"e": e.id, "k": e.key, "s": e.seq}), self.bucket))
        s.txn.events.append(e)
        s.txn.buckets.add(self.bucket)
        s.txn.ops.append("bad row %s" % e)

    def tail(self, keys, per_key=2):
        """Commits one transaction of per_key rows of each of keys (after
        the holds' releases were asked for: the released keys' next
        events, which must follow every released one); returns its Txn
        (tail set)."""
        s = self._open(sorted(keys), [], "commit", None)
        if s is None:
            return None
        s.txn.tail = True

        def rows(cur):
            counts = {k: per_key for k in keys}
            first = self._take_seqs(cur, counts)
            events = []
            for k in sorted(keys):
                for i in range(per_key):
                    events.append(Event(str(uuid.uuid4()), k, first[k] + i,
                                        "row", s.txn.name))
            psycopg2.extras.execute_values(
                cur, "INSERT INTO public.outbox (id, aggregate_type, "
                "aggregate_id, event_type, payload, bucket) VALUES %s",
                [(e.id, self.agg, e.key, "chaos.tail", json.dumps(
                    {"e": e.id, "k": e.key, "s": e.seq}), self.bucket)
                 for e in events],
                template="(%s, %s, %s, %s, %s::jsonb, %s)")
            s.txn.events += events
            s.txn.buckets.add(self.bucket)
            s.txn.ops.append("insert %d tail rows into bucket %d"
                             % (len(events), self.bucket))
        if self._run(s, rows):
            self._end(s)
        return s.txn

    def _event_message(self, cur, s):
        e = self._new_events(cur, s, 1, "msg")[0]
        content = {"id": e.id, "aggregate_type": self.agg,
                   "aggregate_id": e.key, "event_type": "chaos.msg",
                   "payload": json.loads(self._payload(e))}
        cur.execute("SELECT pg_logical_emit_message(true, 'outbox', %s)",
                    (json.dumps(content),))
        s.txn.events.append(e)
        s.txn.ops.append("outbox message %s" % e)

    def _message(self, cur, kind, txn, where):
        """Emits a logical message of kind 'tx-other', 'nontx-other' or
        'nontx-bad' (non-transactional, outbox prefix: a bad event) on
        cursor cur; notes it in txn's ops (or the history's notes)."""
        if kind == "nontx-bad" and "bad-messages" in self.without:
            kind = "nontx-other"
        if kind.startswith("nontx") and "nontx-messages" in self.without:
            kind = "tx-other"
        transactional = kind.startswith("tx")
        prefix = "outbox" if kind == "nontx-bad" else OTHER_PREFIX
        bad = None
        if kind == "nontx-bad":
            bad = BadMessage(str(uuid.UUID(int=self.rng.getrandbits(128),
                                           version=4)),
                             self.clock(), None, txn.name if txn else None)
            self.history.bad.append(bad)
            content = json.dumps({"id": bad.id, "aggregate_type": self.agg,
                                  "aggregate_id": "bad", "event_type": "bad",
                                  "payload": {"e": bad.id}})
        else:
            content = "x"
        cur.execute("SELECT pg_logical_emit_message(%s, %s, %s)::text",
                    (transactional, prefix, content))
        if bad is not None:
            bad.emitted = True
            bad.lsn = cur.fetchone()[0]
        what = "%s message %s%s" % (kind, where,
                                    " " + bad.id[:8] if bad else "")
        if txn is not None:
            txn.ops.append(what)
        else:
            self._note(what)

    def _note(self, what):
        self.history.notes.append((self.clock(), what))

    def _other(self, kind, during=None):
        """One autocommit statement on a connection of its own (so from
        another session than any open transaction)."""
        slot = "other"
        try:
            with self._conn(slot, autocommit=True).cursor() as cur:
                if kind in ("nontx-other", "nontx-bad", "tx-other"):
                    self._message(cur, kind, None,
                                  "from another session" +
                                  (" during %s" % during.name
                                   if during else ""))
                elif kind == "insert":
                    cur.execute("INSERT INTO chaos_other (v) VALUES ('i')")
                elif kind == "delete":
                    cur.execute("DELETE FROM chaos_other WHERE id IN (SELECT "
                                "id FROM chaos_other ORDER BY random() "
                                "LIMIT 5)")
                elif kind == "truncate":
                    cur.execute("SET lock_timeout = '200ms'; "
                                "TRUNCATE chaos_other; "
                                "SET lock_timeout = %s", (LOCK_TIMEOUT,))
                    self._note("TRUNCATE chaos_other")
                elif kind == "delete-outbox" and \
                        "outbox-deletes" not in self.without:
                    cur.execute("DELETE FROM public.outbox WHERE ctid IN "
                                "(SELECT ctid FROM public.outbox LIMIT 20)")
                    self._note("DELETE 20 outbox rows")
        except psycopg2.Error as e:
            self._note("%s failed: %s" % (kind, str(e).splitlines()[0][:80]))
            self._drop_conn(slot)

    def move_rows(self, rng):
        """An UPDATE, in a session of its own, of the bucket of up to 10
        committed outbox rows drawn with rng (the moves' own generator, so
        the workload's other draws stay the same) to the current bucket:
        with a partitioned table a row of an older bucket moves to another
        partition, which the WAL holds as a delete and an insert; in a
        plain table it is updated in place. Neither is a new event
        (sql/README.md): the checker's order rule finds a moved row
        published again. Noted as "move ..."."""
        if not self.moveable or "moves" in self.without:
            return
        ids = rng.sample(list(self.moveable), min(len(self.moveable),
                                                  rng.randint(1, 10)))
        slot = "move"
        try:
            with self._conn(slot, autocommit=True).cursor() as cur:
                cur.execute("UPDATE public.outbox SET bucket = %s WHERE "
                            "id = ANY(%s::uuid[])", (self.bucket, ids))
                moved = cur.rowcount
        except psycopg2.Error as e:
            self._note("move failed: %s" % str(e).splitlines()[0][:80])
            self._drop_conn(slot)
            return
        self._note("move %d of %d rows into bucket %d (%s)"
                   % (moved, len(ids), self.bucket, ids[0][:8]))
        # The move's deletes are changes of the rows' old partitions
        # (whichever they were): none is detached before the slot is
        # confirmed past it (sql/README.md, "Partitioned outbox tables";
        # seed 8114 republished a row whose old partition was detached
        # before a re-read for a new one).
        lsn = self._lsn()
        for b in self.bucket_last_lsn:
            if b not in self.detached:
                self.bucket_last_lsn[b] = max(self.bucket_last_lsn[b], lsn)

    def _commit(self, slot, txn, statement):
        """Runs COMMIT or PREPARE TRANSACTION in the session's connection
        and records the outcome ('committed', 'prepared' or 'aborted'),
        resolving a lost answer through the ledger. Returns the fate."""
        conn = self._conn(slot)
        try:
            if statement != "COMMIT":
                with conn.cursor() as cur:
                    cur.execute(statement)
            conn.commit()
            fate = "prepared" if statement != "COMMIT" else "committed"
        except CONN_ERRORS:
            self._drop_conn(slot)
            txn.ops.append("%s: answer lost" % statement.split("'")[0])
            fate = self._resolve_lost(txn)
        except psycopg2.Error as e:
            txn.ops.append("%s failed: %s" % (statement, e))
            try:
                conn.rollback()
            except psycopg2.Error:
                pass
            fate = "aborted"
        self._record(txn, fate)
        return fate

    def _record(self, txn, fate):
        txn.fate = fate
        txn.t_end = self.clock()
        if fate == "committed":
            self.history.commits += 1
            txn.commit_no = self.history.commits
            lsn = self._lsn()
            txn.lsn_after = lsn
            for b in txn.buckets:
                self.bucket_last_lsn[b] = max(self.bucket_last_lsn.get(b, 0),
                                              lsn)
            self.moveable.extend(e.id for e in txn.events if e.kind == "row")
            if self.on_commit is not None:
                self.on_commit(txn)

    def _lsn(self):
        """pg_current_wal_lsn() as an int (waiting while the server is
        away)."""
        while True:
            try:
                with self._conn("lsn", autocommit=True).cursor() as cur:
                    cur.execute("SELECT pg_current_wal_lsn() - '0/0'")
                    return int(cur.fetchone()[0])
            except CONN_ERRORS:
                self._drop_conn("lsn")
                time.sleep(0.2)

    def _resolve_lost(self, txn):
        """The fate of txn whose COMMIT/PREPARE answer was lost."""
        while True:
            try:
                if self.pg.sql("SELECT 1 FROM chaos_ledger WHERE txn = %s",
                               (txn.name,)):
                    return "committed"
                if self.pg.sql("SELECT 1 FROM pg_prepared_xacts "
                               "WHERE gid = %s", (txn.name,)):
                    return "prepared"
                return "aborted"
            except psycopg2.OperationalError:
                time.sleep(0.2)

    def _end(self, s):
        txn = s.txn
        if s.end == "rollback":
            try:
                self.conns[s.slot].rollback()
            except (psycopg2.Error, KeyError):
                pass
            txn.ops.append("ROLLBACK")
            self._record(txn, "aborted")
        elif s.end == "commit":
            txn.ops.append("COMMIT")
            self._commit(s.slot, txn, "COMMIT")
        else:
            txn.ops.append("PREPARE TRANSACTION")
            fate = self._commit(s.slot, txn,
                                "PREPARE TRANSACTION '%s'" % txn.name)
            if fate == "prepared":
                self.prepared.append((txn, s.keys, s.end.split("-")[1]))
                self.open.remove(s)
                self._drop_conn(s.slot)
                return
        self.reserved.difference_update(s.keys)
        self._close_session(s)

    def _resolve(self, entry):
        """COMMIT PREPARED or ROLLBACK PREPARED of a prepared txn; when the
        answer is lost or the statement fails, the ledger and
        pg_prepared_xacts tell what happened (still prepared: left for a
        later try)."""
        txn, keys, decision = entry
        statement = "%s PREPARED '%s'" % (decision.upper(), txn.name)
        txn.ops.append(statement.split("'")[0].strip())
        try:
            with self._conn("2pc", autocommit=True).cursor() as cur:
                cur.execute(statement)
            fate = "committed" if decision == "commit" else "aborted"
        except psycopg2.Error as e:
            self._drop_conn("2pc")
            txn.ops.append("%s: %s" % (statement, str(e).splitlines()[0]))
            fate = self._resolve_lost(txn)
        if fate == "prepared":
            return
        self._record(txn, fate)
        self.prepared.remove(entry)
        self.reserved.difference_update(keys)

    # -- DDL ----------------------------------------------------------------

    def _ddl(self, kind):
        """DDL on the outbox table: add_column (at most 3 a run), and for a
        partitioned table a new bucket partition (created or attached) or
        the detach of an old one."""
        if kind == "add_column":
            if self.columns_added >= 3:
                return
            self.finish()
            self.columns_added += 1
            self._autocommit_ddl(
                "ALTER TABLE public.outbox ADD COLUMN extra%d text "
                "DEFAULT 'x%d'" % (self.columns_added, self.columns_added))
        elif "new-partitions" in self.without:
            return
        elif kind == "bucket" and self.partitioned:
            self._new_bucket(self.rng.choice(["create", "attach",
                                              "create-with-rows"]))
        elif kind == "detach" and self.partitioned:
            self._detach_old()

    def _autocommit_ddl(self, sql):
        """Runs DDL in autocommit on the 'ddl' connection (retrying while
        the server is away or the lock is busy); notes it."""
        for _ in range(20):
            try:
                with self._conn("ddl", autocommit=True).cursor() as cur:
                    cur.execute(sql)
                self._note(sql)
                return True
            except psycopg2.Error as e:
                self._drop_conn("ddl")
                if not isinstance(e, CONN_ERRORS) and \
                        "lock timeout" not in str(e):
                    self._note("%s failed: %s" % (sql, e))
                    return False
                time.sleep(0.3)
        self._note("%s gave up" % sql)
        return False

    def _behind_the_point(self, part):
        """Whether every row of partition part lies behind outboxd's
        recovery point (deploy/README.md, "Retention": a detached
        partition with rows past it makes a recovery halt)."""
        try:
            rows = self.pg.sql(
                "SELECT NOT EXISTS (SELECT 1 FROM %s AS o, public.outboxd_slots AS s "
                "WHERE s.slot_name = %%s AND mod(mod(o.xmin::text::bigint - "
                "s.recovery_xid::text::bigint, 4294967296) + 4294967296, 4294967296) "
                "< 2147483648) AND EXISTS (SELECT 1 FROM public.outboxd_slots WHERE "
                "slot_name = %%s AND recovery_xid IS NOT NULL)" % part,
                (self.slot_name, self.slot_name))
        except psycopg2.Error:
            return False
        return bool(rows and rows[0][0])

    def _new_bucket(self, how):
        """A partition for bucket+1 becomes the current one: attached (an
        empty table, while transactions are open), created (nothing open),
        or created by a transaction that writes rows into it."""
        b = self.bucket + 1
        part = "public.outbox_b%d" % b
        if how == "attach":
            ok = self._autocommit_ddl(
                "CREATE TABLE %s (LIKE public.outbox INCLUDING DEFAULTS)"
                % part) and self._autocommit_ddl(
                "ALTER TABLE public.outbox ATTACH PARTITION %s "
                "FOR VALUES IN (%d)" % (part, b))
            if ok:
                self.bucket = b
            return
        self.finish()
        create = ("CREATE TABLE %s PARTITION OF public.outbox "
                  "FOR VALUES IN (%d)" % (part, b))
        if how == "create":
            if self._autocommit_ddl(create):
                self.bucket = b
            return
        plan = self._plan_session()
        s = self._open(plan[0], [("rows", self._rows_count(), False)],
                       "commit", None)
        if s is None or not self._run(s, lambda cur: cur.execute(create)):
            return
        s.txn.ops.append(create)
        old = self.bucket
        self.bucket = b
        while s in self.open:
            self._advance(s)
        if s.txn.fate != "committed":
            self.bucket = old

    def _detach_old(self):
        """Detaches (and drops, unless kept) the oldest bucket partition that no open
        transaction can write and whose last commit the slot has confirmed
        (sql/README.md "Partitioned outbox tables": detach only published
        partitions); a CHECKPOINT first so a Postgres crash cannot move
        the confirmed position back before it."""
        candidates = [b for b in sorted(self.bucket_last_lsn)
                      if b < self.bucket and b not in self.detached]
        if not candidates:
            return
        b = candidates[0]
        self.finish()
        try:
            self.pg.sql("CHECKPOINT")
            row = self.pg.slot(self.slot_name)
        except psycopg2.Error:
            return
        if row is None or row["confirmed_flush_lsn_int"] is None or \
                row["confirmed_flush_lsn_int"] < self.bucket_last_lsn[b]:
            return
        part = "public.outbox_b%d" % b
        if self.keep_detached and not self._behind_the_point(part):
            return
        if self._autocommit_ddl("ALTER TABLE public.outbox DETACH PARTITION "
                                "%s" % part):
            self.detached.add(b)
            if not self.keep_detached:
                self._autocommit_ddl("DROP TABLE %s" % part)
