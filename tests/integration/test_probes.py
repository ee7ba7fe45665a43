"""Integration tests of the probes under stalls and floods (deploy/README.md,
"Metrics and health"): /readyz says `stalled` when events wait and nothing
is acknowledged or confirmed for http.stall_after_ms (the broker holding
its acknowledgements, a paused walsender, an inbox table locked), and goes
back to `ready` by itself; outboxd_lag_seconds is 0 when caught up and
keeps rising while a stall lasts, however idle the source; the slot's
retained WAL and wal_status are exported; the port keeps answering probes
while idle connections from many addresses flood it; `outboxd check`
warns about unbounded WAL retention."""

import os
import re
import resource
import signal
import socket
import time

import harness
from harness import free_port, wait_until
from test_inbox import Feed, inbox_env  # noqa: F401 (a fixture)
from test_ops import (HALF_REQUEST, HEAD_WAIT_LIMIT, INBOX_FAMILIES, PER_CLIENT_LIMIT, Flood,
                      check_lines, commit_events, http_get, http_overrides, scrape,
                      wait_http)

STALL_MS = 1500
RULES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                     "deploy", "prometheus-rules.yml")


def lag(port):
    return scrape(port).value("outboxd_lag_seconds")


def ready_state(port):
    """The state outboxd_ready says is current (exactly one is 1)."""
    series = scrape(port).series("outboxd_ready")
    on = [dict(lab)["state"] for lab, v in series.items() if v == 1]
    assert len(on) == 1, series
    return on[0]


def assert_lag_rises(port, at_least):
    """Two scrapes a second apart: the lag is at least at_least and grew
    by about the time between them (it does not freeze while events
    wait)."""
    first = lag(port)
    time.sleep(1.0)
    second = lag(port)
    assert first >= at_least, (first, second)
    assert second - first >= 0.8, (first, second)


def test_stalled_while_the_broker_holds_acknowledgements(
        pg, broker, consumer, outboxd_factory, test_id):
    """Idle and caught up: ready, lag 0, for longer than stall_after_ms.
    With the broker answering produce requests 25 s late (under
    librdkafka's request.timeout.ms of 30 s, which would retry them),
    events wait in flight: /readyz 503 stalled after stall_after_ms, the
    lag rising; once the acknowledgements come, ready again and the lag
    back to 0. The checks while they wait take a second or two, the
    stall is waited for up to 15 s: a slow machine has 10 s to spare."""
    port = free_port()
    agg = "stall_%s" % test_id
    d = outboxd_factory(http_overrides(port, http={"stall_after_ms": STALL_MS}))
    wait_http(port, "/readyz", 200, "ready", daemon=d)
    commit_events(pg, "postgres", agg, 3)
    consumer.collect("outbox.event.%s" % agg, min_count=3, timeout=30,
                     settle=0.2)
    wait_until(lambda: lag(port) == 0, 10, 0.2, "lag 0 once caught up")
    # Idle for twice stall_after_ms: nothing waits, so nothing stalls.
    deadline = time.monotonic() + 2 * STALL_MS / 1000.0
    while time.monotonic() < deadline:
        assert http_get(port, "/readyz") == (200, "ready\n")
        assert lag(port) == 0
        time.sleep(0.2)

    broker.cmd("rtt all 25000")
    commit_events(pg, "postgres", agg, 3)
    body = wait_http(port, "/readyz", 503, "stalled", timeout=15, daemon=d)
    assert body == "stalled\n"
    assert ready_state(port) == "stalled"
    assert scrape(port).value("outboxd_inflight_events") > 0
    assert_lag_rises(port, STALL_MS / 1000.0)
    assert http_get(port, "/healthz")[0] == 200  # the loop turns

    broker.cmd("rtt all 0")
    # The requests sent meanwhile are still answered 25 s late.
    wait_http(port, "/readyz", 200, "ready", timeout=60, daemon=d)
    wait_until(lambda: lag(port) == 0, 10, 0.2, "lag 0 once acknowledged")
    assert ready_state(port) == "ready"
    got = consumer.collect("outbox.event.%s" % agg, min_count=6, timeout=30,
                           settle=0.2)
    assert len(got) >= 6
    # The rules example alerts only on families outboxd exports: the
    # publisher's (this daemon), or the inbox's (outboxd inbox).
    with open(RULES) as f:
        named = set(re.findall(r"\b(outboxd_[a-z_]+)", f.read()))
    assert {"outboxd_ready", "outboxd_lag_seconds"} <= named
    m = scrape(port)
    inbox = named & set(INBOX_FAMILIES)
    assert named - inbox <= set(m.types), named - inbox - set(m.types)
    assert d.stop() == 0, d.log_tail()


def walsender_pid(pg, slot):
    return wait_until(lambda: pg.slot(slot)["active_pid"], 15, 0.1,
                      "walsender of %s" % slot)


def test_stalled_while_the_walsender_is_paused(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """The walsender stopped (SIGSTOP) while outbox rows are committed:
    outboxd receives nothing, but the server says rows were written past
    what the stream read, so /readyz says stalled after stall_after_ms and
    the lag rises; SIGCONT and the events flow, ready again, lag 0. The
    slot's retained WAL and wal_status are exported all along."""
    port = free_port()
    agg = "paused_%s" % test_id
    d = outboxd_factory(http_overrides(port, http={"stall_after_ms": STALL_MS}))
    wait_http(port, "/readyz", 200, "ready", daemon=d)
    m = wait_until(lambda: (lambda m: m if m.value(
        "outboxd_slot_wal_status", status="reserved") == 1 else None)(
            scrape(port)), 10, 0.2, "wal_status reserved")
    assert m.value("outboxd_slot_retained_wal_bytes") > 0
    assert m.value("outboxd_lag_seconds") == 0

    pid = walsender_pid(pg, slot_name)
    os.kill(pid, signal.SIGSTOP)
    try:
        commit_events(pg, "postgres", agg, 4)
        wait_http(port, "/readyz", 503, "stalled",
                  timeout=STALL_MS / 1000.0 + 8, daemon=d)
        assert scrape(port).value("outboxd_inflight_events") == 0
        assert_lag_rises(port, 0.5)
    finally:
        os.kill(pid, signal.SIGCONT)
    got = consumer.collect("outbox.event.%s" % agg, min_count=4, timeout=30,
                           settle=0.2)
    assert len(got) == 4
    wait_http(port, "/readyz", 200, "ready", timeout=15, daemon=d)
    wait_until(lambda: lag(port) == 0, 10, 0.2, "lag 0 once caught up")
    assert d.stop() == 0, d.log_tail()


# ---------------------------------------------------------------------------
# the inbox


def test_inbox_stalled_while_its_table_is_locked(inbox_env, broker):
    """Records wait in Kafka while the inbox table is locked: /readyz says
    stalled after stall_after_ms and the partitions' lag shows them;
    unlocked, they are stored, ready again, every partition's lag 0."""
    env = inbox_env()
    feed = Feed(broker, env.topic)
    ids = feed.events(20)
    feed.flush()
    port = free_port()
    d = env.start(http_listen="127.0.0.1:%d" % port,
                  http_stall_after_ms=STALL_MS)
    env.wait_consumed()
    wait_http(port, "/readyz", 200, "ready", daemon=d)

    conn = env.pg.connect(env.db)
    conn.autocommit = False
    try:
        with conn.cursor() as cur:
            cur.execute("LOCK TABLE public.inbox IN ACCESS EXCLUSIVE MODE")
        ids += feed.events(20)
        feed.flush()
        wait_http(port, "/readyz", 503, "stalled",
                  timeout=STALL_MS / 1000.0 + 8, daemon=d)
        lags = scrape(port).series("outboxd_inbox_partition_lag_records")
        assert sum(lags.values()) > 0, lags
        # The rules example's inbox families are the inbox's.
        with open(RULES) as f:
            named = set(re.findall(r"\b(outboxd_inbox_[a-z_]+)", f.read()))
        assert named and named <= set(scrape(port).types), named
        assert all(dict(lab)["topic"] == env.topic for lab in lags), lags
    finally:
        conn.rollback()
        conn.close()
    env.wait_consumed()
    wait_http(port, "/readyz", 200, "ready", timeout=15, daemon=d)
    wait_until(lambda: sum(scrape(port).series(
        "outboxd_inbox_partition_lag_records").values()) == 0, 10, 0.2,
        "every partition's lag 0")
    assert env.rows() == len(ids)
    assert d.stop() == 0


# ---------------------------------------------------------------------------
# the port under a flood from many addresses

SOURCES = 200
PER_SOURCE = 5
PROBE_SOURCE = "127.0.0.250"


class SpreadFlood(Flood):
    """Idle half-requests from SOURCES loopback addresses (127.0.1.x and
    127.0.2.x), PER_SOURCE from each: under the per-address limit, so only
    the server's table limit stands in their way."""

    def add_spread(self):
        for i in range(SOURCES * PER_SOURCE):
            src = "127.0.%d.%d" % (1 + (i % SOURCES) // 100, 1 + i % 100)
            self.opened += 1
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((src, 0))
                s.settimeout(1.0)
                s.connect(("127.0.0.1", self.port))
                s.sendall(HALF_REQUEST)
                s.setblocking(False)
                self.conns.append(s)
            except OSError:
                s.close()


def probe_from(port, path, source=PROBE_SOURCE, timeout=2.0):
    """(status line, seconds) of GET path sent from source."""
    t0 = time.monotonic()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((source, 0))
        s.settimeout(timeout)
        s.connect(("127.0.0.1", port))
        s.sendall(("GET %s HTTP/1.1\r\nHost: outboxd\r\nConnection: close"
                   "\r\n\r\n" % path).encode())
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        return data.split(b"\r\n", 1)[0].decode(), time.monotonic() - t0
    except OSError as e:
        return "no answer: %s" % e, time.monotonic() - t0
    finally:
        s.close()


def test_probes_answer_under_idle_flood_from_many_addresses(
        pg, broker, outboxd_factory):
    """1,000 idle half-requests from 200 addresses (5 each, under the
    per-address limit of 8), twice over: a probe from yet another address
    is answered all along, since the connections that waited longest for a
    request head are closed to make room: the server holds at most
    HEAD_WAIT_LIMIT of them, fewer than its table of 128, even while they
    are kept busy (so the idle timeout closes none of them). Without that
    limit the flood fills the table and the probe gets no answer. The
    probes' latency is printed, not asserted (tests/bench measures
    speed)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * SOURCES * PER_SOURCE + 256
    if hard != resource.RLIM_INFINITY and hard < need:
        raise harness.HarnessError("the flood needs %d open files; the hard "
                                   "limit is %d" % (need, hard))
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    assert PER_SOURCE < PER_CLIENT_LIMIT
    port = free_port()
    d = outboxd_factory(http_overrides(port))
    wait_http(port, "/readyz", 200, "ready", daemon=d)
    flood = SpreadFlood(port)
    slowest = 0.0
    try:
        for round_ in range(2):
            flood.add_spread()
            for path in ("/healthz", "/readyz", "/healthz"):
                status, took = probe_from(port, path, timeout=10.0)
                slowest = max(slowest, took)
                assert status == "HTTP/1.1 200 OK", (
                    "%s from %s answered %r after %.2fs (round %d, %d "
                    "flood connections opened, %d held)"
                    % (path, PROBE_SOURCE, status, took, round_,
                       flood.opened, flood.prune()))
            wait_until(lambda: flood.prune(keep_busy=True) <= HEAD_WAIT_LIMIT,
                       60, 0.5, "at most %d flood connections held"
                       % HEAD_WAIT_LIMIT)
        print("slowest probe during the flood: %.3f s" % slowest)
    finally:
        flood.close()
    assert probe_from(port, "/readyz")[0] == "HTTP/1.1 200 OK"
    assert d.stop() == 0, d.log_tail()


# ---------------------------------------------------------------------------
# outboxd check


def test_check_warns_about_wal_retention(pg, own_cluster, outboxd_factory,
                                         slot_name):
    """max_slot_wal_keep_size = -1 (the default): `check` passes with a
    warning naming the full disk it risks and what a limit costs. With a
    limit: an ok line naming the invalidation."""
    d = outboxd_factory(start=False)
    rc, out, err = d.run_cmd(["check"])
    results = {name: (ok, detail) for name, ok, detail in
               check_lines(out)[0]}
    assert rc == 0, (out, err)
    line = [x for x in out.splitlines() if x.startswith("wal retention")]
    assert len(line) == 1 and " warn " in line[0], out
    assert "fills the server's disk" in line[0], out
    assert "invalidated" in line[0], out
    assert results["wal retention"][0]

    cluster = own_cluster(max_slot_wal_keep_size="'64MB'")
    d2 = outboxd_factory({"postgres": {"conninfo": cluster.conninfo()}},
                         start=False)
    rc, out, err = d2.run_cmd(["check"])
    line = [x for x in out.splitlines() if x.startswith("wal retention")]
    assert rc == 0, (out, err)
    assert len(line) == 1 and " ok " in line[0] and "64MB" in line[0], out
