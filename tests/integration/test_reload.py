"""Integration tests of SIGHUP (deploy/README.md, "Reloading the
configuration"): both daemons read their configuration file again, apply
log.level and log.format at once, name every other setting that changed
as needing a restart, keep running on a file that no longer loads, and
go on publishing (or storing) throughout."""

import json
import os
import re
import signal

import harness
from harness import header, wait_until
from test_inbox import Feed, inbox_env  # noqa: F401 (a fixture)


def rewrite(d, **changes):
    """Writes d's configuration file again with changes applied
    ({"section.key": value}; None removes the key)."""
    for name, value in changes.items():
        section, key = name.split(".", 1)
        if value is None:
            d.config.get(section, {}).pop(key, None)
        else:
            d.config.setdefault(section, {})[key] = value
    harness.write_ini(d.config_path, d.config)


def sighup(d):
    """Sends SIGHUP; returns the log's size before it, for wait_log()."""
    since = d.log_size()
    os.kill(d.pid, signal.SIGHUP)
    return since


def debug_lines(text):
    return [line for line in text.splitlines() if " debug: " in line]


def reload_to_debug(d, key, value):
    """d logged no debug line so far; its file then says log.level debug
    and key = value. After SIGHUP: the new level is announced and key named
    as needing a restart. Returns the log's size before the SIGHUP."""
    assert debug_lines(d.log_text()) == [], d.log_tail()
    rewrite(d, **{"log.level": "debug", key: value})
    since = sighup(d)
    d.wait_log(r"configuration reloaded: log\.level debug \(was info\)",
               since=since)
    d.wait_log(r"warning: %s changed in the configuration: it takes effect "
               r"only when outboxd restarts" % re.escape(key), since=since)
    return since


def insert_event(pg, agg, n):
    pg.sql("INSERT INTO public.outbox (aggregate_type, aggregate_id, "
           "event_type, payload) VALUES (%s, 'k', 'reloaded', %s)",
           (agg, json.dumps({"n": n})))


def test_sighup_reloads_the_publisher(pg, broker, consumer, outboxd_factory,
                                      test_id):
    """Started at log.level info; the file then says debug and another
    postgres.status_interval_ms: after SIGHUP debug lines appear, one line
    names status_interval_ms as needing a restart, and an event inserted
    after is published. A file that no longer loads is named and the
    running configuration kept (still debug, still publishing)."""
    agg = "reload_%s" % test_id
    topic = "outbox.event.%s" % agg
    d = outboxd_factory({"log": {"level": "info"}})
    d.wait_log(r"streaming from slot")
    insert_event(pg, agg, 1)
    assert len(consumer.collect(topic, min_count=1, timeout=30)) == 1
    since = reload_to_debug(d, "postgres.status_interval_ms", 700)
    insert_event(pg, agg, 2)
    got = consumer.collect(topic, min_count=2, timeout=30)
    assert sorted(json.loads(r["value"])["n"] for r in got) == [1, 2], got
    wait_until(lambda: debug_lines(d.log_text()[since:]), 10, 0.2,
               "debug lines after the reload")
    # Only the two settings that changed are named.
    named = re.findall(r"warning: (\S+) changed in the configuration",
                       d.log_text()[since:])
    assert named == ["postgres.status_interval_ms"], d.log_tail()

    rewrite(d, **{"log.level": "loud"})
    since = sighup(d)
    d.wait_log(r'error: invalid value "loud" for log\.level', since=since)
    d.wait_log(r"error: could not reload the configuration from \S+ "
               r"\(see above\): the running one is kept", since=since)
    insert_event(pg, agg, 3)
    got = consumer.collect(topic, min_count=3, timeout=30)
    assert sorted(json.loads(r["value"])["n"] for r in got) == [1, 2, 3], got
    wait_until(lambda: debug_lines(d.log_text()[since:]), 10, 0.2,
               "debug lines after the refused reload (level kept)")
    assert all(header(r, "type") == b"reloaded" for r in got)
    assert d.running(), d.log_tail()
    assert d.stop() == 0, d.log_tail()


def test_sighup_reloads_the_inbox(inbox_env, broker):
    """outboxd inbox: log.level info, then debug after SIGHUP, with
    inbox.batch_max named as needing a restart; a file that no longer
    loads leaves it running; records keep being stored throughout."""
    env = inbox_env()
    d = env.start(log_level="info")
    feed = Feed(broker, env.topic)
    ids = feed.events(10)
    feed.flush()
    wait_until(lambda: env.rows() == 10, 60, 0.2, "10 rows stored")
    since = reload_to_debug(d, "inbox.batch_max", 50)
    ids += feed.events(10)
    feed.flush()
    wait_until(lambda: env.rows() == 20, 60, 0.2, "20 rows stored")
    wait_until(lambda: debug_lines(d.log_text()[since:]), 10, 0.2,
               "debug lines after the reload")

    rewrite(d, **{"inbox.batch_max": "many"})
    since = sighup(d)
    d.wait_log(r'error: invalid value "many" for inbox\.batch_max',
               since=since)
    d.wait_log(r"could not reload the configuration", since=since)
    ids += feed.events(10)
    feed.flush()
    wait_until(lambda: env.rows() == 30, 60, 0.2, "30 rows stored")
    wait_until(lambda: debug_lines(d.log_text()[since:]), 10, 0.2,
               "debug lines after the refused reload (level kept)")
    assert set(r[0] for r in env.sql("SELECT id FROM public.inbox")) == \
        set(ids)
    assert d.stop() == 0, d.log_tail()
