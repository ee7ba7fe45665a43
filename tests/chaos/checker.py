"""The chaos checker: judges what reached Kafka against the workload's
history, the fault log and the daemon's log, by README "Delivery
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
- order: per key, first deliveries follow commit order (seq order). The
  README's one exception, a whole batch failed by the broker, is
  tolerated (counted, not a finding) when the run injected a produce error
  and the daemon logged that it recreated its producer;
- dead letters: a non-transactional outbox message must be dead-lettered
  (unless a Postgres crash may have taken it before it reached disk); a
  good event may be dead-lettered only as refused alone by the broker, and
  only as many as the injected record-class errors (INVALID_RECORD,
  MSG_SIZE_TOO_LARGE) allow; any other dead letter is a finding;
- duplicates: counted; allowed only after what README names (a process
  crash, an exit, a Postgres crash, a recreated producer, a re-read for a
  new wal2json partition); otherwise a finding;
- the slot is confirmed up to the WAL end once the run is drained; every
  exit of outboxd nobody asked for is a finding, except exit 1 on a failed
  dead-letter publish when record errors were injected (README); a fast
  shutdown of Postgres that does not end in 60 s (pg_ctl's wait) is a
  finding (README: a walsender outboxd reads must not hold it up)."""

import collections
import json

from harness import header, int_to_lsn, murmur2_partition

RECREATED = "recreating the kafka producer"
NEW_PARTITIONS = "new partitions of"
NOT_TRANSACTIONAL = "logical message is not transactional"
REFUSED = ("broker refused the record", "producer refused the record")
RECORD_CODES = ("INVALID_RECORD", "MSG_SIZE_TOO_LARGE")
DLQ_PUBLISH_FAILED = "could not publish dead-letter record"
CONTEXT = 4


class Finding:
    """kind (loss, phantom, order, dead-letter, duplicate, slot, exit,
    shutdown, record), summary, and lines: the excerpt of the history that shows
    it."""

    def __init__(self, kind, summary, lines=()):
        self.kind = kind
        self.summary = summary
        self.lines = list(lines)

    def render(self):
        return "\n".join(["FINDING %s: %s" % (self.kind, self.summary)]
                         + ["    " + ln for ln in self.lines])


class Report:
    """findings, stats (name -> number) and notes (lines that are not
    findings: tolerated reorders, duplicates and why they were allowed)."""

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


def check(history, records, dead, faults, daemon_log, partitions, drained):
    """Judges a drained run. records: the event topic's records, dead:
    the dead-letter topic's (harness.Consumer dicts); faults: the
    FaultLog; daemon_log: outboxd's whole log; partitions: the event
    topic's partition count; drained: (end LSN, confirmed LSN, final
    exit code). Returns a Report."""
    rep = Report()
    ctx = _Context(history, faults, daemon_log)
    delivered = [Delivered(r) for r in records]
    refused = _check_dead_letters(rep, ctx, dead)
    _check_records(rep, ctx, delivered, partitions)
    _check_loss(rep, ctx, delivered, refused)
    _check_order(rep, ctx, delivered, refused)
    _check_duplicates(rep, ctx, delivered)
    _check_daemon(rep, ctx, drained)
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
        self.never = history.never_events()
        self.bad = {b.id: b for b in history.bad}
        self.txns = history.txns
        self.order = history.committed()
        self.record_errors = faults.produce_errors(RECORD_CODES)
        self.too_large_errors = faults.produce_errors(("MSG_SIZE_TOO_LARGE",))
        kinds = set(faults.kinds())
        self.batch_failed = bool(kinds & {"batch_error", "record_error"}) \
            and RECREATED in daemon_log
        self.pg_crashed = "pg_immediate" in kinds

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
        elif error.startswith(REFUSED) and rid in ctx.committed:
            refused.add(rid)
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
    rep.stats["refused_alone"] = len(refused)
    return refused


def _check_records(rep, ctx, delivered, partitions):
    """Phantoms (aborted, rolled back, unknown, bad) and key/partition."""
    reported = collections.Counter()
    for d in delivered:
        e = ctx.committed.get(d.id)
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
    expected = collections.defaultdict(list)
    for e in ctx.committed.values():
        if e.id not in refused:
            expected[e.key].append(e)
    bad_keys = 0
    for key in sorted(expected):
        want = sorted(expected[key], key=lambda e: e.seq)
        got = [d for d in firsts.get(key, []) if d.id in ctx.committed]
        i = next((i for i in range(1, len(got))
                  if got[i].seq < got[i - 1].seq), None)
        if i is None:
            continue
        bad_keys += 1
        if ctx.batch_failed:
            rep.notes.append("key %s: first deliveries out of commit order "
                             "at offset %d (tolerated: a batch failed)"
                             % (key, got[i].offset))
            continue
        if bad_keys <= 3:
            rep.add("order", "key %s: seq %d first delivered at %d/%d after "
                    "seq %d" % (key, got[i].seq, got[i].partition,
                                got[i].offset, got[i - 1].seq),
                    _order_excerpt(ctx, key, want, got, i, delivered))
    rep.stats["reordered_keys"] = bad_keys


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
    if not dups:
        return
    reasons = [k for k in ("kill9", "kill9_after_commit", "outage_kill9",
                           "pg_immediate", "exit")
               if ctx.faults.count(k)]
    if RECREATED in ctx.log:
        reasons.append("producer recreated")
    if NEW_PARTITIONS in ctx.log:
        reasons.append("slot re-read for new partitions")
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
        if e[2] == "pg_fast" and e[3]:
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
