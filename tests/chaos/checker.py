"""The chaos checker: judges what reached Kafka against the workload's
history, the fault log and the daemon's log, by deploy/README.md "Delivery
guarantees" and "Failure modes".

check() returns a Report: findings (each a kind, a one-line summary and
the smallest excerpt of the history that shows it) and the run's counts.
The rules:

- loss: every event of a committed transaction is in its topic at least
  once, or was dead-lettered as refused by the broker alone (below);
- phantom: nothing of an aborted transaction, a rolled-back savepoint or
  a rolled-back prepared transaction, and nothing the workload did not
  write, is published; a bad event (non-transactional outbox message) is
  never published to the event topic; every record has its event's key
  and the key's murmur2 partition;
- order: per key, first deliveries follow commit order (seq order), with
  no exception (a whole batch failed by the broker included); and every
  copy published again resumes its key's stream: per key, in partition
  order, a record is the next event after the one before it or an earlier
  one (a crash, a recreated producer or a re-read sends the transactions
  after a position again, in commit order), never a copy alone (a row
  moved to another partition by an UPDATE is not a new event);
- dead letters: a non-transactional outbox message must be dead-lettered
  (unless a Postgres crash may have taken it before it reached disk); a
  good event may be dead-lettered only as refused alone by the broker, and
  only as many as the injected record-class errors (INVALID_RECORD,
  MSG_SIZE_TOO_LARGE) allow; any other dead letter is a finding;
- duplicates: counted; allowed only after what README names (a process
  crash, an exit, a Postgres crash, a recreated producer, a re-read for a
  new wal2json partition); otherwise a finding (broker outages, leader
  moves, retriable produce errors and a slow broker allow none: the test
  broker answers a retry of a written batch DUPLICATE_SEQUENCE_NUMBER, as
  Kafka does);
- fork: after a promotion of a standby that lagged, the events of the
  transactions the new primary lacks ('forked') may or may not be
  published (nor are they expected in commit order); the ones published,
  and the bad messages of the old timeline past the switch point that
  were dead-lettered, must be exactly as many as outboxd logged "N events
  handed to Kafka from timeline T past the switch point" (summed), and
  none may be published when it logged none. outboxd counts handings: when
  it read the slot again meanwhile (a recreated producer, new partitions)
  it may say more, never fewer (with "at least N", anything goes but
  none); duplicates are allowed after a promotion;
- deploy: each `outboxd slot create --if-not-exists` a deployment loop
  ran before a start exited 0 (the slot is healthy throughout), except
  those run while the slot was lost (during a slot fault, or in a run
  where outboxd recovered a slot): they exit 1 naming the loss and create
  nothing (a new slot would skip events);
- slot faults (slot_drop, slot_invalidate; their runs write no outbox
  messages and delete or move no outbox rows, so the table can give back
  every event): the same rules (loss, order, inbox); duplicates are
  allowed after a recovery (outboxd logged "recovering it from the outbox
  table"); outboxd halting instead ("cannot be recovered") is an exit
  finding, as is a SIGTERM of the fault that does not exit 0;
- the slot is confirmed up to the WAL end once the run is drained; every
  exit of outboxd nobody asked for is a finding, except exit 1 on a failed
  dead-letter publish when record errors were injected (README); a fast
  shutdown of Postgres that does not end in 60 s (pg_ctl's wait) is a
  finding (README: a walsender outboxd reads must not hold it up).

With an inbox (sql/README.md "The inbox tables": `outboxd inbox` consumed the event topic
into an inbox table), once it caught up:

- inbox-loss: every committed event that is in the event topic has its
  row (a committed event the publisher lost is the `loss` finding; one
  the broker refused alone is dead-lettered, never in the inbox);
- inbox-phantom: no row for an event that was not committed (rolled
  back, of a rolled-back savepoint, a bad event, never written), nor for
  an id the event topic does not hold;
- inbox-row: each row names the first record of its id in the topic (its
  partition and offset: a later copy is a duplicate by id, an earlier one
  skipped) and has that record's key and payload;
- inbox-position: the positions stored for the group equal the event
  topic's high watermarks (none for an empty partition, or 0), and they
  got there within the wait;
- inbox-dead-letter: nothing is dead-lettered by the inbox (every record
  the publisher writes has an id header and a UTF-8 key);
- inbox-exit: the inbox never exits by itself and exits 0 on SIGTERM.

With outbox.on_bad_event = hold_key (the workload also writes bad rows:
headers that are not a JSON object, with a key and the event topic), per
key, before the releases (the event topic up to its high watermarks
then):

- hold: the key's first failed event (a bad row or a record refused
  alone) and every later one of the key is not in the event topic; every
  earlier one is; every later committed event (bad rows left out) is in
  the dead-letter topic as a held record (header held_behind = the first
  failed event's id, its key, original-topic the event topic), and no
  held record is anything else; outboxd_held_keys lists exactly the keys
  that failed;
- release: each `outboxd dlq release KEY --topic T` exits 0 and no key is
  held once drained; the rules above (loss, order, duplicates allowed
  after a kill -9 inside a release) then hold for the whole topic: the
  held events are published after the key's earlier ones, their first
  copies in commit order, and the key's next events (committed while the
  releases ran) after them; the failed events never are."""

import collections
import json
import re

from harness import header, int_to_lsn, lsn_to_int, murmur2_partition
from walfaults import KILLED, RECOVERED

RECREATED = "recreating the kafka producer"
RECOVERING = "recovering it from the outbox table"
# What retention says it deleted (outbox.retention, on in runs with slot
# faults).
RETENTION = re.compile(r"retention: deleted (\d+) published outbox rows")
SLOT_FAULTS = ("slot_drop", "slot_invalidate")
# What `slot create --if-not-exists` says of a lost slot (it creates none).
SLOT_LOST = ("does not exist, but outboxd created it",
             "has been invalidated (wal_status lost)")
NEW_PARTITIONS = "new partitions of"
# The faults that end the publisher's process without its last
# confirmation.
CRASHES = ("kill9", "kill9_after_commit", "outage_kill9", "exit",
           "release_crash", "release_kill9")
NOT_TRANSACTIONAL = "logical message is not transactional"
REFUSED = ("broker refused the record", "producer refused the record")
RECORD_CODES = ("INVALID_RECORD", "MSG_SIZE_TOO_LARGE")
DLQ_PUBLISH_FAILED = "could not publish dead-letter record"
BEYOND_FORK = re.compile(r"(at least )?(\d+) events handed to Kafka from "
                         r"timeline \d+ past the switch point")
CONTEXT = 4
HELD_BEHIND = "held_behind"


class Finding:
    """kind (loss, phantom, order, dead-letter, duplicate, fork, deploy,
    slot, exit, shutdown, record, inbox-...), summary, and lines: the
    excerpt of the history that shows it."""

    def __init__(self, kind, summary, lines=()):
        self.kind = kind
        self.summary = summary
        self.lines = list(lines)

    def render(self):
        return "\n".join(["FINDING %s: %s" % (self.kind, self.summary)]
                         + ["    " + ln for ln in self.lines])


class Report:
    """findings, stats (name -> number) and notes (lines that are not
    findings: duplicates and why they were allowed)."""

    def __init__(self):
        self.findings = []
        self.stats = collections.Counter()
        self.notes = []

    def add(self, kind, summary, lines=()):
        self.findings.append(Finding(kind, summary, lines))


class Delivered:
    """One record of the event topic, decoded: id, key, seq (None when the
    value is not a workload payload), partition, offset, and the record."""

    __slots__ = ("id", "key", "seq", "partition", "offset", "rec")

    def __init__(self, rec):
        self.rec = rec
        self.partition = rec["partition"]
        self.offset = rec["offset"]
        raw = header(rec, "id")
        self.id = raw.decode() if raw is not None else None
        self.key = self.seq = None
        try:
            body = json.loads(rec["value"])
            self.key, self.seq = body["k"], body["s"]
            self.id = self.id or body["e"]
        except (TypeError, ValueError, KeyError):
            pass


def check(history, records, dead, faults, daemon_log, partitions, drained,
          inbox=None, hold=None):
    """Judges a drained run. records: the event topic's records, dead:
    the dead-letter topic's (harness.Consumer dicts); faults: the
    FaultLog; daemon_log: outboxd's whole log; partitions: the event
    topic's partition count; drained: (end LSN, confirmed LSN, final
    exit code); inbox: what `outboxd inbox` stored (chaos.InboxState),
    None without an inbox; hold: a hold_key run's releases
    (chaos.HoldRun), None without hold_key. Returns a Report."""
    rep = Report()
    ctx = _Context(history, faults, daemon_log)
    ctx.hold = hold
    delivered = [Delivered(r) for r in records]
    refused = _check_dead_letters(rep, ctx, dead)
    if hold is not None:
        _check_holds(rep, ctx, delivered, refused)
    _check_records(rep, ctx, delivered, partitions)
    _check_loss(rep, ctx, delivered, refused)
    _check_order(rep, ctx, delivered, refused)
    _check_resumes(rep, ctx, delivered, refused)
    _check_duplicates(rep, ctx, delivered)
    _check_fork(rep, ctx, delivered, refused)
    _check_daemon(rep, ctx, drained)
    if inbox is not None:
        _check_inbox(rep, ctx, delivered, inbox)
    rep.stats.update(
        committed_txns=len(history.committed()),
        events=len(ctx.committed), records=len(records),
        dead_letters=len(dead), bad_messages=len(history.bad),
        aborted_txns=sum(1 for t in history.txns.values()
                         if t.fate == "aborted"))
    return rep


class _Context:
    """What the checks share: the history's indexes and the run's
    circumstances."""

    def __init__(self, history, faults, daemon_log):
        self.history = history
        self.faults = faults
        self.log = daemon_log
        self.committed = history.committed_events()
        self.forked = history.forked_events()
        self.never = history.never_events()
        self.bad = {b.id: b for b in history.bad}
        self.bad_rows = history.bad_rows()
        self.hold = None
        self.held = []        # held records of the dead-letter topic
        self.dead_rows = {}   # {bad row id: its dead-letter record}
        self.txns = history.txns
        self.order = history.committed()
        self.record_errors = faults.produce_errors(RECORD_CODES)
        self.too_large_errors = faults.produce_errors(("MSG_SIZE_TOO_LARGE",))
        kinds = set(faults.kinds())
        self.promoted = any(e[2] == "promote" and "standby promoted" in e[3]
                            for e in faults.entries)
        # a promotion takes what the standby never got, as a crash does
        self.pg_crashed = "pg_immediate" in kinds or self.promoted
        self.dead_bad = set()   # bad messages dead-lettered (ids)

    def txn_excerpt(self, name, around=1):
        """The committed txns around txn name in commit order (itself
        marked), or just itself when it did not commit."""
        t = self.txns[name]
        if t.commit_no is None:
            return ["  " + t.describe()]
        i = t.commit_no - 1
        lines = []
        for u in self.order[max(0, i - around):i + around + 1]:
            lines.append(("> " if u is t else "  ") + u.describe())
        return lines

    def around(self, t0, t1):
        """Faults and workload notes between t0 and t1."""
        lines = ["fault %7.2f..%7.2f %s %s" % e[:4]
                 for e in self.faults.near(t0, t1)]
        lines += ["note  %7.2f %s" % n for n in self.history.notes
                  if t0 <= n[0] <= t1]
        return lines


def _check_dead_letters(rep, ctx, dead):
    """Classifies dead-letter records; returns {id} of good events the
    broker refused alone (counted as delivered)."""
    refused, seen_bad = set(), set()
    bad_at = {b.lsn: b.id for b in ctx.history.bad if b.lsn}
    for r in dead:
        error = (header(r, "error") or b"").decode("utf-8", "replace")
        rid = header(r, "id")
        rid = rid.decode() if rid is not None else None
        if error.startswith(NOT_TRANSACTIONAL):
            lsn = (header(r, "source-lsn") or b"").decode()
            try:
                rid = json.loads(r["value"])["id"]
            except (TypeError, ValueError, KeyError):
                # headers only: its own dead-letter record was refused as
                # too large (README), which only an injected error can do
                rid = bad_at.get(lsn) if ctx.too_large_errors else None
            if rid in ctx.bad:
                seen_bad.add(rid)
                continue
        elif error.startswith(REFUSED) and (rid in ctx.committed
                                            or rid in ctx.forked):
            refused.add(rid)
            if ctx.hold is not None and header(r, HELD_BEHIND) is None:
                ctx.dead_rows.setdefault(rid, r)
            continue
        elif ctx.hold is not None and header(r, HELD_BEHIND) is not None:
            ctx.held.append(r)
            continue
        elif rid in ctx.bad_rows:
            ctx.dead_rows.setdefault(rid, r)
            continue
        rep.add("dead-letter", "a dead letter the workload did not make bad "
                "(error %r, id %s)" % (error[:100], rid),
                ["headers %s" % r["headers"][:6]]
                + (ctx.txn_excerpt(ctx.committed[rid].txn)
                   if rid in ctx.committed else []))
    if len(refused) > ctx.record_errors:
        rep.add("dead-letter", "%d good events dead-lettered as refused "
                "alone, but only %d record errors were injected"
                % (len(refused), ctx.record_errors),
                sorted(refused)[:10] + ctx.faults.lines())
    for b in ctx.history.bad:
        if b.id in seen_bad or not b.emitted:
            continue
        if ctx.pg_crashed:
            rep.notes.append("bad message %s not dead-lettered (a Postgres "
                             "crash may have taken it)" % b.id[:8])
            continue
        rep.add("dead-letter", "non-transactional outbox message %s (t=%.2f,"
                " in %s) was not dead-lettered" % (b.id, b.t, b.session),
                ctx.around(b.t - 1, b.t + 1))
    for i, e in ctx.bad_rows.items():
        if i not in ctx.dead_rows:
            rep.add("dead-letter", "bad row %r was not dead-lettered" % e,
                    ctx.txn_excerpt(e.txn, around=0))
    rep.stats["refused_alone"] = len(refused)
    ctx.dead_bad = seen_bad
    return refused


def _check_holds(rep, ctx, delivered, refused):
    """hold_key: per key, nothing from its first failed event on in the
    event topic before the releases, everything committed after it held
    in the dead-letter topic behind it; the held keys listed; every
    release done (the order rules judge the whole topic after it)."""
    hr = ctx.hold
    failed = collections.defaultdict(list)
    for i in refused:
        e = ctx.committed.get(i)
        if e is not None:
            failed[e.key].append(e)
    for e in ctx.bad_rows.values():
        failed[e.key].append(e)
    first = {k: min(v, key=lambda e: e.seq) for k, v in failed.items()}
    topics = {header(r, "original-topic") for r in ctx.dead_rows.values()}
    topic = next(iter(topics)).decode() if len(topics) == 1 else None
    rep.stats["held_keys"] = len(first)
    rep.stats["bad_rows"] = len(ctx.bad_rows)
    rep.stats["release_seconds"] = hr.seconds
    tail = set(e.id for e in hr.tail.events) \
        if hr.tail is not None and hr.tail.fate == "committed" else set()
    # the dead letters that hold: key and original topic
    for i, r in ctx.dead_rows.items():
        e = ctx.committed.get(i) or ctx.bad_rows[i]
        if r["key"] != e.key or (topic is not None and header(
                r, "original-topic") != topic.encode()):
            rep.add("hold", "dead letter of %r has key %r, original-topic %r"
                    % (e, r["key"], header(r, "original-topic")))
    # the keys outboxd held when the releases began
    listed = sorted(k for _, k in hr.held)
    if listed != sorted(first) or (topic is not None and any(
            t != topic for t, _ in hr.held)):
        rep.add("hold", "outboxd_held_keys held %s before the releases; "
                "the keys that failed are %s" % (
                    hr.held, sorted((k, e.id[:8]) for k, e in first.items())))
    # the event topic before the releases
    before = collections.defaultdict(set)
    for d in delivered:
        if d.offset < hr.hw.get(d.partition, 0) and d.key is not None:
            before[d.key].add(d.id)
    held = collections.defaultdict(list)
    for r in ctx.held:
        rid = header(r, "id")
        held[rid.decode() if rid is not None else None].append(r)
    # A stream read again from before a key's first failed event (a
    # crash, a recreated producer, a re-read) finds the key held, but from
    # the failed event's place on: the key's earlier events of that
    # stretch go to the topic again, never behind it. One held is a
    # finding (outboxd held them until held_from was kept with the key).
    rereads = _reread_reasons(ctx)
    early = {i for i in held if i in ctx.committed and first.get(
        ctx.committed[i].key) is not None and ctx.committed[i].seq <
        first[ctx.committed[i].key].seq}
    if early and rereads:
        e = min((ctx.committed[i] for i in early),
                key=lambda e: ctx.txns[e.txn].commit_no)
        rep.notes.append("%d events before their key's first failed event "
                         "held too (%d of them not published before the "
                         "releases), after %s; e.g. %r of %s (committed "
                         "#%d) held behind %r of %s (#%d)" % (
                             len(early), sum(
                                 1 for i in early if i not in before[
                                     ctx.committed[i].key]),
                             ", ".join(rereads), e, e.txn,
                             ctx.txns[e.txn].commit_no, first[e.key],
                             first[e.key].txn,
                             ctx.txns[first[e.key].txn].commit_no))
    rep.stats["held_early"] = len(early)
    rep.stats["held_early_late"] = sum(
        1 for i in early if i not in before[ctx.committed[i].key])
    early = set()
    wrong = []
    for e in ctx.committed.values():
        f = first.get(e.key)
        if f is None or e.id in tail:
            if e.id not in before[e.key] and e.id not in refused and \
                    e.id not in tail:
                wrong.append((e, "not held, yet not published before the "
                              "releases"))
        elif e.seq < f.seq and e.id not in before[e.key] and \
                e.id not in refused and e.id not in early:
            wrong.append((e, "before %r, yet not published before the "
                          "releases" % f))
        elif e.seq > f.seq and e.id in before[e.key]:
            wrong.append((e, "behind %r, yet published before the "
                          "releases" % f))
    for e, what in wrong[:3]:
        rep.add("hold", "%r: %s" % (e, what),
                ctx.txn_excerpt(e.txn, around=0)
                + ["first failed events: %s" % sorted(
                    "%r" % f for f in first.values())])
    if len(wrong) > 3:
        rep.add("hold", "... %d such events in all" % len(wrong))
    # the held records
    odd = []
    for i, rs in held.items():
        e = ctx.committed.get(i)
        f = first.get(e.key) if e is not None else None
        if e is None or f is None or (e.seq < f.seq and i not in early):
            odd.append("held record of %s: %s" % (
                e or i, "no failed event of its key before it"
                if e is not None else "not a committed event"))
            continue
        for r in rs:
            if header(r, HELD_BEHIND) != f.id.encode() or \
                    r["key"] != e.key or (topic is not None and header(
                        r, "original-topic") != topic.encode()):
                odd.append("held record of %r: held_behind %r, key %r, "
                           "original-topic %r (want %s, %s, %s)" % (
                               e, header(r, HELD_BEHIND), r["key"],
                               header(r, "original-topic"), f.id, e.key,
                               topic))
                break
    for e in ctx.committed.values():
        f = first.get(e.key)
        if f is not None and e.seq > f.seq and e.id not in tail and \
                e.id not in held and e.id not in refused:
            odd.append("%r is behind %r but not held" % (e, f))
    for line in odd[:3]:
        rep.add("hold", line)
    if len(odd) > 3:
        rep.add("hold", "... %d such findings in all" % len(odd))
    rep.stats["held_events"] = len(set(held) - early)
    # the releases
    for key, rc, out in hr.results:
        if rc != 0:
            rep.add("release", "`outboxd dlq release %s --topic ...` exited "
                    "%s" % (key, rc), out.splitlines()[-4:])
    if hr.left:
        rep.add("release", "keys still held once drained after the "
                "releases: %s" % hr.left)
    if hr.tail is not None and hr.tail.fate != "committed":
        rep.notes.append("the released keys' next events: %s"
                         % hr.tail.describe())
    rep.notes.append("hold: %d keys held, %d held events in the table, "
                     "release crash %s, released in %.1f s"
                     % (len(hr.held), hr.events, hr.crash, hr.seconds))


def _reread_reasons(ctx):
    """What read the slot again in the run (crashes, a Postgres crash, a
    recreated producer, a re-read for new partitions)."""
    reasons = [k for k in CRASHES + ("pg_immediate",)
               if ctx.faults.count(k)
               # (a crash inside a release reads only what came after it)
               and not k.startswith("release_")]
    if RECREATED in ctx.log:
        reasons.append("producer recreated")
    if NEW_PARTITIONS in ctx.log:
        reasons.append("slot re-read for new partitions")
    return reasons


def _check_records(rep, ctx, delivered, partitions):
    """Phantoms (aborted, rolled back, unknown, bad) and key/partition."""
    reported = collections.Counter()
    for d in delivered:
        e = ctx.committed.get(d.id) or ctx.forked.get(d.id)
        if e is None:
            if d.id in ctx.never:
                what = "from %s (%s)" % (ctx.never[d.id].txn,
                                         "rolled back" if ctx.txns[
                                             ctx.never[d.id].txn].fate ==
                                         "aborted" else "savepoint rolled "
                                         "back")
                lines = ctx.txn_excerpt(ctx.never[d.id].txn)
            elif d.id in ctx.bad:
                what, lines = "a bad (non-transactional) message", []
            elif d.id in ctx.bad_rows:
                what = "a bad row (its headers are not a JSON object)"
                lines = ctx.txn_excerpt(ctx.bad_rows[d.id].txn, around=0)
            else:
                what, lines = "never written by the workload", []
            reported["phantom"] += 1
            if reported["phantom"] <= 3:
                rep.add("phantom", "event %s published at %d/%d: %s"
                        % (d.id, d.partition, d.offset, what), lines)
            continue
        want = murmur2_partition(e.key, partitions)
        if d.rec["key"] != e.key or d.partition != want or d.seq != e.seq:
            reported["record"] += 1
            if reported["record"] <= 3:
                rep.add("record", "event %r published as key %r, partition "
                        "%d (want %d), seq %s" % (e, d.rec["key"],
                                                  d.partition, want, d.seq))
    for kind, n in reported.items():
        if n > 3:
            rep.add(kind, "... %d such records in all" % n)


def _check_loss(rep, ctx, delivered, refused):
    """Every committed event published (or refused alone)."""
    got = {d.id for d in delivered} | refused
    lost = [e for e in ctx.committed.values() if e.id not in got]
    rep.stats["lost"] = len(lost)
    by_txn = collections.OrderedDict()
    for e in sorted(lost, key=lambda e: ctx.txns[e.txn].commit_no):
        by_txn.setdefault(e.txn, []).append(e)
    for name, events in list(by_txn.items())[:3]:
        t = ctx.txns[name]
        rep.add("loss", "%d of %d events of %s (committed #%d at t=%.2f, "
                "WAL after it %s) never published" % (
                    len(events), len(t.events), name, t.commit_no, t.t_end,
                    int_to_lsn(t.lsn_after)),
                ["lost: %s" % events[:6]] + ctx.txn_excerpt(name)
                + ctx.around(t.t_start - 0.5, t.t_end + 0.5))
    if len(by_txn) > 3:
        rep.add("loss", "... %d transactions lose events in all: %s"
                % (len(by_txn), ", ".join(
                    "%s (%d/%d)" % (n, len(ev), len(ctx.txns[n].events))
                    for n, ev in by_txn.items())))


def _first_deliveries(delivered):
    """{key: [Delivered]} of the first delivery of each event, in
    partition offset order."""
    seen, out = set(), collections.defaultdict(list)
    for d in sorted(delivered, key=lambda d: (d.partition, d.offset)):
        if d.key is not None and d.id not in seen:
            seen.add(d.id)
            out[d.key].append(d)
    return out


def _check_order(rep, ctx, delivered, refused):
    """Per key, first deliveries in seq (commit) order."""
    firsts = _first_deliveries(delivered)
    expected = _expected_by_key(ctx, refused)
    bad_keys = 0
    for key in sorted(expected):
        want = expected[key]
        got = [d for d in firsts.get(key, []) if d.id in ctx.committed]
        i = next((i for i in range(1, len(got))
                  if got[i].seq < got[i - 1].seq), None)
        if i is None:
            continue
        bad_keys += 1
        if bad_keys <= 3:
            rep.add("order", "key %s: seq %d first delivered at %d/%d after "
                    "seq %d" % (key, got[i].seq, got[i].partition,
                                got[i].offset, got[i - 1].seq),
                    _order_excerpt(ctx, key, want, got, i, delivered))
    rep.stats["reordered_keys"] = bad_keys


def _check_resumes(rep, ctx, delivered, refused):
    """Per key, in partition order, every record is either the key's next
    event after the record before it, or an earlier one that the key's
    next events then follow: a copy is published again only as part of
    the key's stream read again from some point (a crash, a recreated
    producer, a re-read: each sends the transactions after a position
    again, in commit order, up to the key's last event). A copy alone,
    followed by an event past it or by nothing before the key's last
    event, was published again by something else: an UPDATE that moved
    its row to another partition (sql/README.md: a moved row is not a new
    event)."""
    expected = _expected_by_key(ctx, refused)
    index = {key: {e.id: i for i, e in enumerate(events)}
             for key, events in expected.items()}
    last, alone = {}, []
    for d in sorted(delivered, key=lambda d: (d.partition, d.offset)):
        i = index.get(d.key, {}).get(d.id)
        if i is None:
            continue
        prev = last.get(d.key)
        last[d.key] = (i, d)
        if prev is not None and i > prev[0] + 1:
            alone.append((prev[1], d))
    for key, (i, d) in last.items():
        if i != len(expected[key]) - 1:
            alone.append((d, None))
    for copy, then in alone[:3]:
        rep.add("order", "key %s: seq %d published again at %d/%d alone "
                "(followed by %s, not by the key's next event)" % (
                    copy.key, copy.seq, copy.partition, copy.offset,
                    "seq %d at %d/%d" % (then.seq, then.partition,
                                         then.offset)
                    if then is not None else "nothing"),
                _resume_excerpt(ctx, copy.key, copy, delivered))
    rep.stats["copies_alone"] = len(alone)


def _expected_by_key(ctx, refused):
    """{key: [committed event]} in commit (seq) order, without those the
    broker refused alone (dead-lettered)."""
    out = collections.defaultdict(list)
    for e in ctx.committed.values():
        if e.id not in refused:
            out[e.key].append(e)
    for events in out.values():
        events.sort(key=lambda e: e.seq)
    return out


def _resume_excerpt(ctx, key, copy, delivered):
    """The records of key in copy's partition around it, with the
    transactions that wrote them, and the workload's notes (moves) near
    it."""
    lines = ["records of %s in partition %d (offset seq txn first?):"
             % (key, copy.partition)]
    seen = set()
    for d in sorted(delivered, key=lambda d: d.offset):
        if d.partition != copy.partition or d.key != key:
            continue
        first = d.id not in seen
        seen.add(d.id)
        if abs(d.offset - copy.offset) <= 40:
            e = ctx.committed.get(d.id)
            lines.append("  %d seq %s %s %s" % (
                d.offset, d.seq, e.txn if e else "?",
                "first" if first else "again"))
    if copy.id in ctx.committed:   # what wrote the copy (a savepoint?)
        lines += ctx.txn_excerpt(ctx.committed[copy.id].txn, around=0)
    lines += ["note t=%.2f: %s" % n for n in ctx.history.notes
              if n[1].startswith("move ")][:10]
    return lines


def _order_excerpt(ctx, key, want, got, i, delivered):
    """The commit order and the partition's records of key around the
    first inversion at got[i], and the transactions involved."""
    def near(seq):
        return any(abs(seq - d.seq) <= CONTEXT for d in (got[i - 1], got[i]))
    lines = ["commit order of %s (seq txn#commit):" % key]
    lines += ["  %d %s#%d" % (e.seq, e.txn, ctx.txns[e.txn].commit_no)
              for e in want if near(e.seq)]
    lines.append("records of %s in partition %d (offset seq txn first?):"
                 % (key, got[i].partition))
    first_off = {d.id: d.offset for d in got}
    for d in sorted(delivered, key=lambda d: d.offset):
        if d.key == key and d.seq is not None and near(d.seq):
            e = ctx.committed.get(d.id)
            lines.append("  %d seq %d %s %s" % (
                d.offset, d.seq, e.txn if e else "?",
                "first" if first_off.get(d.id) == d.offset else "again"))
    names = []
    for d in (got[i - 1], got[i]):
        name = ctx.committed[d.id].txn
        if name not in names:
            names.append(name)
    for name in names:
        lines += ctx.txn_excerpt(name, around=0)
    t0 = min(ctx.txns[n].t_start for n in names)
    t1 = max(ctx.txns[n].t_end for n in names)
    return lines + ctx.around(t0 - 2, t1 + 2)


def _check_duplicates(rep, ctx, delivered):
    """Counts duplicates; a finding when nothing README names explains
    them."""
    counts = collections.Counter(d.id for d in delivered)
    dups = {i: n for i, n in counts.items() if n > 1}
    rep.stats["duplicated_events"] = len(dups)
    rep.stats["extra_copies"] = sum(n - 1 for n in dups.values())
    # What may publish again, for the soak's duplicates per cause: a
    # process that lost its memory of what it handed over (a crash or an
    # exit), records expired and sent again, a producer recreated inside a
    # process, a slot read again for new partitions.
    for k in CRASHES + ("expiry",):
        rep.stats[k] = ctx.faults.count(k)
    rep.stats["crashes"] = sum(ctx.faults.count(k) for k in CRASHES)
    rep.stats["promotions"] = 1 if ctx.promoted else 0
    rep.stats["recreations"] = ctx.log.count(RECREATED)
    rep.stats["recoveries"] = ctx.log.count(RECOVERING)
    rep.stats["retained_away"] = sum(int(m.group(1))
                                     for m in RETENTION.finditer(ctx.log))
    rep.notes += ["outboxd: %s" % m.group(0) for m in RECOVERED.finditer(
        ctx.log)]
    rep.stats["rereads"] = ctx.log.count(NEW_PARTITIONS)
    if not dups:
        return
    # No broker fault is a reason: the test broker answers a retry of a
    # batch it wrote (its response lost when a broker went down, seed
    # 100096) DUPLICATE_SEQUENCE_NUMBER without writing it again, as Kafka
    # does; it answers a request it did not write with an error
    # (NOT_LEADER_FOR_PARTITION from a broker that no longer leads, an
    # injected retriable code, OUT_OF_ORDER_SEQUENCE_NUMBER for every batch
    # behind one of those), and a slow broker only delays. Nothing is
    # written twice for one producer either way.
    reasons = [k for k in CRASHES + ("pg_immediate",) if ctx.faults.count(k)]
    if ctx.promoted:
        reasons.append("promotion")
    if RECREATED in ctx.log:
        reasons.append("producer recreated")
    if NEW_PARTITIONS in ctx.log:
        reasons.append("slot re-read for new partitions")
    if RECOVERING in ctx.log:
        reasons.append("slot recovered from the outbox table")
    if reasons:
        rep.notes.append("%d events duplicated (%d extra copies), allowed "
                         "after %s" % (len(dups), rep.stats["extra_copies"],
                                       ", ".join(reasons)))
        return
    sample = sorted(dups, key=lambda i: ctx.committed[i].txn
                    if i in ctx.committed else "")[:5]
    rep.add("duplicate", "%d events published more than once with no "
            "crash, Postgres crash, recreated producer or partition re-read"
            % len(dups),
            ["%s x%d (%s)" % (i, dups[i], ctx.committed[i].txn
                              if i in ctx.committed else "?")
             for i in sample] + ctx.faults.lines())


def _check_fork(rep, ctx, delivered, refused):
    """The events published (or dead-lettered: refused alone, or bad) from
    the old timeline past the switch point are those outboxd reported as
    handed to Kafka past it."""
    sp = re.search(r"left timeline \d+ at ([0-9A-F]+/[0-9A-F]+)", ctx.log)
    sp = lsn_to_int(sp.group(1)) if sp else None
    published = {d.id for d in delivered if d.id in ctx.forked} | \
        (refused & set(ctx.forked))
    # bad messages dead-lettered from the old timeline past the switch
    # point (emitted before its primary was killed)
    ends = [float(m.group(1)) for m in (KILLED.search(e[3]) for e in
                                        ctx.faults.entries
                                        if e[2] == "promote") if m]
    bad = {b.id for b in ctx.history.bad if sp is not None and b.lsn
           and b.id in ctx.dead_bad and lsn_to_int(b.lsn) > sp
           and any(b.t <= t for t in ends)}
    said = [(m.group(1) is not None, int(m.group(2)))
            for m in BEYOND_FORK.finditer(ctx.log)]
    total = sum(n for _, n in said)
    inexact = any(least for least, _ in said)
    rep.stats["forked_events"] = len(ctx.forked)
    rep.stats["beyond_fork_published"] = len(published)
    if not ctx.forked and not said:
        return
    rep.notes.append("%d events of %d transactions the new primary lacks, "
                     "%d of them published, and %d bad messages past the "
                     "switch point dead-lettered; outboxd said %s%d"
                     % (len(ctx.forked), len({e.txn for e in
                                              ctx.forked.values()}),
                        len(published), len(bad),
                        "at least " if inexact else "", total))
    n = len(published) + len(bad)
    # outboxd counts handings: an event handed again after the slot was
    # read again (a recreated producer, new partitions) counts twice
    reread = re.search(r"re-reading the slot from|new partitions of", ctx.log)
    if n == total or (n < total and (inexact or reread)) or \
            (inexact and n > total):
        if n != total:
            rep.notes.append("outboxd counted %s%d handings past the switch "
                             "point for %d events (some handed again after "
                             "the slot was read again)"
                             % ("at least " if inexact else "", total, n))
        return
    names = sorted({ctx.forked[i].txn for i in published})
    rep.add("fork", "%d published events (and %d dead-lettered bad "
            "messages) are not in the new primary's history, but outboxd "
            "said %s%d events were handed to Kafka past the switch point"
            % (len(published), len(bad), "at least " if inexact else "",
               total),
            ["forked transactions published: %s" % ", ".join(names[:12]),
             "outboxd said: %s" % said]
            + ["fault %7.2f..%7.2f %s %s" % e[:4] for e in ctx.faults.entries
               if e[2] == "promote"])


def _check_daemon(rep, ctx, drained):
    """The slot confirmed to the end; no exit nobody asked for."""
    end, confirmed, final_rc = drained
    if confirmed is None or confirmed < end:
        rep.add("slot", "slot confirmed to %s, WAL end %s after draining"
                % (int_to_lsn(confirmed or 0), int_to_lsn(end)))
    if final_rc != 0:
        rep.add("exit", "outboxd exited %s on the final SIGTERM" % final_rc)
    for e in ctx.faults.entries:
        # -15: the signal came before outboxd installed its handler
        if e[2] == "sigterm" and e[3] not in ("rc=0", "rc=-15"):
            rep.add("exit", "SIGTERM at t=%.2f: %s" % (e[0], e[3]))
        if e[2] in SLOT_FAULTS and "SIGTERM rc=" in e[3] and not \
                re.search(r"SIGTERM rc=(0|-15);", e[3]):
            rep.add("exit", "SIGTERM of %s at t=%.2f: %s"
                    % (e[2], e[0], e[3]))
        if e[2] == "deploy" and not e[3].startswith("rc=0") and not (
                e[3].startswith("rc=1") and any(w in e[3] for w in SLOT_LOST)
                and _slot_was_lost(ctx, e[0])):
            rep.add("deploy", "`slot create --if-not-exists` before a "
                    "start at t=%.2f: %s" % (e[0], e[3]),
                    ctx.around(e[0] - 3, e[0]))
        if (e[2] == "pg_fast" and e[3]) or \
                (e[2] == "expiry" and "failed" in e[3]):
            rep.add("shutdown", "Postgres' fast shutdown at t=%.2f did not "
                    "end: %s" % (e[0], e[3]), ctx.around(e[0] - 3, e[1]))
        if e[2] != "exit":
            continue
        if "rc=1" in e[3] and ctx.record_errors and \
                DLQ_PUBLISH_FAILED in ctx.log:
            rep.notes.append("exit 1 at t=%.2f: dead-letter publish failed "
                             "under injected record errors (README)" % e[0])
            continue
        rep.add("exit", "outboxd exited by itself at t=%.2f: %s"
                % (e[0], e[3]), ctx.around(e[0] - 3, e[0]))


def _slot_was_lost(ctx, t):
    """Whether the slot may have been lost at run time t: a slot fault
    was striking, or outboxd recovered a slot (the small
    max_slot_wal_keep_size of slot_invalidate runs may invalidate it at
    any checkpoint while outboxd lags: a fast restart, a detach)."""
    return RECOVERING in ctx.log or any(
        e[2] in SLOT_FAULTS and e[0] <= t <= e[1]
        for e in ctx.faults.entries)


INBOX_KINDS = ("inbox_kill9", "inbox_sigterm", "inbox_conn",
               "inbox_outage_kill9", "promote", "expiry", "inbox-exit",
               "broker_down", "outage_kill9", "pg_fast", "pg_immediate",
               "leader_move", "broker_rtt",
               "slot_invalidate")   # (with every broker down, some runs)


def _inbox_faults(ctx):
    """The fault log's lines of the faults that hit the inbox."""
    return ["fault %7.2f..%7.2f %s %s" % e[:4] for e in ctx.faults.entries
            if e[2] in INBOX_KINDS]


def _inbox_log(inbox, partition, n=6):
    """The inbox log's last n lines about partition (assignments,
    resumes, mismatches) and its restarts."""
    tag = "[%d]" % partition
    lines = [ln for ln in inbox.log.splitlines()
             if ln.startswith("=== start") or tag in ln
             or "resumed" in ln or "could not" in ln]
    return ["inbox log: " + ln[:160] for ln in lines[-n:]]


def _records_around(delivered, inbox, partition, offset, n=2):
    """The partition's records around offset, each with whether the inbox
    holds a row naming it."""
    named = {(r[1], r[2]) for r in inbox.rows.values()}
    out = []
    for d in sorted(delivered, key=lambda d: d.offset):
        if d.partition == partition and abs(d.offset - offset) <= n:
            out.append("  %d/%d %s seq %s%s" % (
                partition, d.offset, d.id, d.seq,
                " (row)" if (partition, d.offset) in named else ""))
    return out


def _check_inbox(rep, ctx, delivered, inbox):
    """The inbox stored every event of the topic exactly once, at its
    first record, and its positions at the topic's end."""
    first = {}
    for d in sorted(delivered, key=lambda d: (d.partition, d.offset)):
        first.setdefault(d.id, d)
    rows = inbox.rows
    rep.stats["inbox_rows"] = len(rows)
    rep.stats["inbox_caught_up"] = ("%.1f s" % inbox.caught_up
                                    if inbox.caught_up is not None
                                    else "never")
    # loss: committed, in the topic, no row
    # (the events a promotion left behind are in the topic too)
    kept = dict(ctx.forked, **ctx.committed)
    lost = sorted((first[i] for i in kept
                   if i in first and i not in rows),
                  key=lambda d: (d.partition, d.offset))
    rep.stats["inbox_lost"] = len(lost)
    for d in lost[:3]:
        e = kept[d.id]
        rep.add("inbox-loss", "event %r (%s [%d] offset %d) is not in the "
                "inbox table; stored position of [%d]: %s" % (
                    e, inbox.topic, d.partition, d.offset, d.partition,
                    inbox.stored.get((inbox.topic, d.partition))),
                _records_around(delivered, inbox, d.partition, d.offset)
                + ctx.txn_excerpt(e.txn, around=0)
                + _inbox_log(inbox, d.partition) + _inbox_faults(ctx))
    if len(lost) > 3:
        rep.add("inbox-loss", "... %d events of the topic not in the inbox "
                "in all, in partitions %s" % (
                    len(lost), sorted({d.partition for d in lost})))
    # phantoms: not committed, or not in the topic
    phantoms = [i for i in rows if i not in kept or i not in first]
    for i in phantoms[:3]:
        if i not in first:
            what = "an id the event topic does not hold"
        elif i in ctx.never:
            what = "from %s (rolled back; also published: see phantom)" \
                % ctx.never[i].txn
        elif i in ctx.bad:
            what = "a bad (non-transactional) message"
        else:
            what = "never written by the workload"
        r = rows[i]
        rep.add("inbox-phantom", "row %s (%s [%d] offset %d): %s"
                % (i, r[0], r[1], r[2], what),
                ctx.txn_excerpt(ctx.never[i].txn)
                if i in ctx.never else [])
    if len(phantoms) > 3:
        rep.add("inbox-phantom", "... %d such rows in all" % len(phantoms))
    # each row names its id's first record, with its key and payload
    wrong = []
    for i, (topic, part, off, key, k, seq) in rows.items():
        d = first.get(i)
        if d is None:
            continue
        if topic != inbox.topic or part != d.partition or off != d.offset \
                or key != d.rec["key"] or k != d.key or seq != d.seq:
            wrong.append((i, (topic, part, off, key, k, seq), d))
    for i, row, d in wrong[:3]:
        rep.add("inbox-row", "row %s is %s; its first record is %s [%d] "
                "offset %d, key %r, seq %s" % (i, row, inbox.topic,
                                               d.partition, d.offset,
                                               d.rec["key"], d.seq),
                _records_around(delivered, inbox, d.partition, d.offset)
                + _inbox_log(inbox, d.partition) + _inbox_faults(ctx))
    if len(wrong) > 3:
        rep.add("inbox-row", "... %d such rows in all" % len(wrong))
    # positions at the topic's end
    bad_pos = []
    for p, hw in sorted(inbox.hw.items()):
        got = inbox.stored.get((inbox.topic, p))
        if got != hw and not (hw == 0 and got is None):
            bad_pos.append("[%d] stored %s, high watermark %d" % (p, got, hw))
    others = sorted(k for k in inbox.stored if k[0] != inbox.topic)
    if others:
        bad_pos.append("positions stored for other topics: %s" % others)
    if bad_pos or inbox.caught_up is None:
        rep.add("inbox-position", "stored positions %s the event topic's "
                "high watermarks%s" % (
                    "differ from" if bad_pos else "reached",
                    "" if inbox.caught_up is not None else
                    " (not within the wait after the publisher stopped)"),
                bad_pos + [ln for p in sorted({int(b[1:].split("]")[0])
                                               for b in bad_pos
                                               if b.startswith("[")})[:2]
                           for ln in _inbox_log(inbox, p, 4)]
                + _inbox_faults(ctx))
    # the inbox's own dead letters
    for r in inbox.dead[:3]:
        rep.add("inbox-dead-letter", "the inbox dead-lettered %s [%s] "
                "offset %s: %s" % (
                    (header(r, "source-topic") or b"?").decode(),
                    (header(r, "source-partition") or b"?").decode(),
                    (header(r, "source-offset") or b"?").decode(),
                    (header(r, "error") or b"").decode("utf-8",
                                                       "replace")[:120]))
    rep.stats["inbox_dead_letters"] = len(inbox.dead)
    # exits
    if inbox.final_rc != 0:
        rep.add("inbox-exit", "outboxd inbox exited %s on the final SIGTERM"
                % inbox.final_rc, inbox.log.strip().splitlines()[-3:])
    for e in ctx.faults.entries:
        if e[2] == "inbox_sigterm" and e[3] not in ("rc=0", "rc=-15"):
            rep.add("inbox-exit", "SIGTERM of the inbox at t=%.2f: %s"
                    % (e[0], e[3]))
        if e[2] == "inbox-exit":
            rep.add("inbox-exit", "outboxd inbox exited by itself at "
                    "t=%.2f: %s" % (e[0], e[3]), _inbox_faults(ctx))
