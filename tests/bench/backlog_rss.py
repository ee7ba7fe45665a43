"""Peak RSS and rate of a 150,000-row backlog (README, "Benchmark"). Run
from the repository root after building: python3 tests/bench/backlog_rss.py.
Starts a throwaway Postgres and the mock broker, fills public.outbox with
150,000 rows (~360-byte JSON payloads), lets outboxd publish them as its
backlog (backlog_where = true) and prints the rate and the peak RSS."""
import os, sys, time, subprocess, tempfile
sys.path.insert(0, "tests/integration")
import harness
tmp = tempfile.mkdtemp()
pg = harness.PgCluster(tmp + "/pg"); pg.start()
pg.run_file("sql/outbox.sql")
b = harness.MockBroker("build/tests/ob-mockbroker", brokers=3, logfile=tmp + "/b.log")
b.create_topic("outbox.event.rss", partitions=32)
pg.sql("INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload, headers) "
       "SELECT 'rss', 'k' || (g % 1000), 'e', jsonb_build_object('n', g, 'pad', repeat('x', 300)), '{\"t\": \"v\"}' FROM generate_series(1, 150000) g")
cfg = {"postgres": {"conninfo": pg.conninfo(), "slot": "rss", "create_slot": True},
       "outbox": {"backlog_where": "true", "dlq_topic": "rss.dlq"},
       "kafka": {"bootstrap.servers": b.bootstraps}, "http": {"listen": ""}, "log": {"level": "info"}}
d = harness.Outboxd("build/outboxd", cfg, tmp + "/o")
peak = 0
t0 = time.time()
while "backlog published" not in d.log_text() and time.time() - t0 < 120:
    with open("/proc/%d/status" % d.pid) as f:
        for l in f:
            if l.startswith("VmHWM"): peak = int(l.split()[1])
    time.sleep(0.05)
with open("/proc/%d/status" % d.pid) as f:
    for l in f:
        if l.startswith("VmHWM"): peak = int(l.split()[1])
print([l for l in d.log_text().splitlines() if "backlog" in l][-3:])
print("peak RSS MB %.1f" % (peak / 1024))
d.stop(); b.stop(); pg.destroy()
