"""scps-server's log lines: RFC 3339 UTC timestamps with milliseconds and a
level before every text line ('2026-11-26T20:15:03.123Z INFO scps-server:
...'), and --log-format json (or SCPS_LOG_FORMAT=json): one JSON object per
line, {"ts", "level", "msg", "process", fields...}, with strings escaped
(a checkpoint directory holding quotes, a backslash and UTF-8 comes back
whole). Real servers start, take a push, drain on SIGTERM and save the
step held at exit."""
import datetime
import json
import os
import re

import numpy as np

from scps_srvtest import Cluster, main

TABLES = [{"name": "t", "vocabulary_size": 1000, "embedding_dim": 8, "combiner": "sum",
           "optimizer": {"type": "sgd", "learning_rate": 0.5}, "initializer": {"type": "zeros"}}]
FEATURES = [{"name": "f", "table": "t", "valency": 1}]

TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
TEXT = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (DEBUG|INFO|WARN|ERROR) scps-server: (.*)$")
LEVELS = ("debug", "info", "warn", "error")


def config(env):
    return env.write_config("logs", 8, TABLES, FEATURES)


def check_ts(env, ts, what):
    """ts: the RFC 3339 shape, parsed by datetime, in UTC, within 10 minutes of now."""
    if not env.check(isinstance(ts, str) and TS.match(ts), "%s: timestamp %r" % (what, ts)):
        return None
    t = datetime.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    now = datetime.datetime.now(datetime.timezone.utc)
    env.check(t.utcoffset() == datetime.timedelta(0) and abs((now - t).total_seconds()) < 600,
              "%s: timestamp %s, now %s" % (what, ts, now.isoformat()))
    return t


def json_lines(env, text, what):
    """Every line of text as a JSON object with ts, level and msg (checked);
    the objects."""
    out = []
    lines = text.splitlines()
    env.check(text.endswith("\n") and lines, "%s: lines, each ending in a newline: %r" % (what, text[-200:]))
    last = None
    for k, line in enumerate(lines):
        try:
            obj = json.loads(line)
        except ValueError as e:
            env.check(False, "%s: line %d is not JSON (%s): %r" % (what, k, e, line))
            continue
        if not env.check(isinstance(obj, dict) and isinstance(obj.get("msg"), str) and obj.get("level") in LEVELS,
                         "%s: line %d lacks msg or a level: %r" % (what, k, line)):
            continue
        env.check(list(obj)[:3] == ["ts", "level", "msg"], "%s: line %d's first keys %s" % (what, k, list(obj)[:3]))
        t = check_ts(env, obj.get("ts"), "%s line %d" % (what, k))
        env.check(t is None or last is None or t >= last, "%s: line %d goes back in time" % (what, k))
        last = t or last
        out.append(obj)
    return out


def one(env, objs, pattern, what):
    """The first object whose msg matches pattern (a failed check if none)."""
    for o in objs:
        if re.search(pattern, o["msg"]):
            return o
    env.check(False, "%s: no line matching %r in %s" % (what, pattern, [o["msg"] for o in objs]))
    return None


def test_json(env):
    """--log-format json: start, a push, SIGTERM, the drain and the save at
    exit, each a JSON object with the process and the line's fields."""
    cfg = config(env)
    ck = os.path.join(env.tmp, "ck \"quoted\" back\\slash caf\u00e9")
    srv = env.server(cfg, extra=["--log-format", "json", "--checkpoint-dir", ck, "--drain-quiet-ms", "100"])
    srv.wait_ready()
    cl = Cluster(env, [srv])
    cl.apply({"f": [[(i, 1.0)] for i in range(8)]}, {"f": np.ones((8, 8), dtype=np.float32)}, step=1)
    env.check(srv.stop() == 0, "exit 0 after SIGTERM")
    objs = json_lines(env, srv.stderr(), "--log-format json")
    env.check(all(o.get("process") == 0 for o in objs), "every line names process 0: %s" % objs)
    start = one(env, objs, r"^no complete checkpoint under ", "the start")
    if start:
        env.check(start["msg"].startswith("no complete checkpoint under %s (" % ck),
                  "the directory comes back whole: %r, expected %r" % (start["msg"], ck))
    serving = one(env, objs, r"^process 0 of 1 serving on port \d+", "serving")
    if serving:
        env.check(serving.get("port") == srv.port and serving.get("num_processes") == 1 and
                  serving["level"] == "info", "the start line's fields: %s" % serving)
    one(env, objs, r"^SIGTERM: finishing calls in flight$", "the signal")
    saved = one(env, objs, r"^saved step 1 to .* before exiting", "the save at exit")
    if saved:
        env.check(saved.get("step") == 1 and saved.get("path", "").startswith(ck + "/step-"),
                  "the save's fields: %s" % saved)
    one(env, objs, r"^process 0 stopped [0-9.]+ s after the signal$", "the end")


def test_json_from_environment(env):
    """SCPS_LOG_FORMAT=json; a warning's and an error's level; a bad flag's
    line in JSON too (the usage text after it stays plain)."""
    cfg = config(env)
    srv = env.server(cfg, index=1, num_processes=2, listen="0.0.0.0:0", extra=["--insecure"], start=False)
    srv.environ = dict(os.environ, SCPS_LOG_FORMAT="json")
    srv.start()
    srv.wait_ready()
    env.check(srv.stop() == 0, "exit 0 after SIGTERM")
    objs = json_lines(env, srv.stderr(), "SCPS_LOG_FORMAT=json")
    env.check(all(o.get("process") == 1 for o in objs), "every line names process 1: %s" % objs)
    warn = one(env, objs, r"^WARNING: --insecure", "the --insecure warning")
    env.check(warn is None or warn["level"] == "warn", "the warning's level: %s" % warn)
    for extra in (["--num-processes", "x"], ["--bogus"]):
        s = env.server(cfg, extra=["--log-format", "json"] + extra)
        rc, out, err = s.run_to_exit()
        first = err.splitlines()[0] if err else ""
        objs = json_lines(env, first + "\n", " ".join(extra))
        env.check(rc == 2 and objs and objs[0]["level"] == "error" and extra[0] in objs[0]["msg"],
                  "%s: exit %s, first line %r" % (" ".join(extra), rc, first))


def test_text(env):
    """The default: a timestamp, a level and 'scps-server: ' before each
    message, whose text is unchanged."""
    cfg = config(env)
    srv = env.server(cfg).wait_ready()
    env.check(srv.stop() == 0, "exit 0 after SIGTERM")
    text = srv.stderr()
    msgs = []
    for k, line in enumerate(text.splitlines()):
        m = TEXT.match(line)
        if env.check(m, "line %d lacks the prefix: %r" % (k, line)):
            check_ts(env, m.group(1), "line %d" % k)
            msgs.append((m.group(2), m.group(3)))
    want = "process 0 of 1 serving on port %d " % srv.port
    env.check(any(lvl == "INFO" and msg.startswith(want) for lvl, msg in msgs), "%r in %s" % (want, msgs))
    env.check(("INFO", "SIGTERM: finishing calls in flight") in msgs, "the signal's line in %s" % msgs)
    s = env.server(cfg, extra=["--sc-per-process", "0"])
    rc, out, err = s.run_to_exit()
    m = TEXT.match(err.splitlines()[0] if err else "")
    env.check(rc == 2 and m and m.group(2) == "ERROR" and m.group(3).startswith("--sc-per-process '0'"),
              "a bad flag: exit %s, %r" % (rc, err[:300]))


if __name__ == "__main__":
    main("test_log_format", [test_json, test_json_from_environment, test_text])
