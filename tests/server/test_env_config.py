"""scps-server configured through the environment: SCPS_FOO_BAR for every
--foo-bar. Real servers started with variables only, and with variables and
flags together (a flag wins over its variable, a variable over the default;
empty and unknown variables are ignored), bad values refused with exit 2
naming the variable and the value, and --process-index auto taking a
StatefulSet pod's ordinal from the host name (SCPS_HOSTNAME standing for it):
one definition, two processes of a cluster that answers Lookups."""
import os
import re
import socket

import numpy as np

from scps_srvtest import Cluster, main

TABLES = [{"name": "t", "vocabulary_size": 1000, "embedding_dim": 8, "combiner": "sum",
           "optimizer": {"type": "sgd", "learning_rate": 0.5}, "initializer": {"type": "zeros"}}]
FEATURES = [{"name": "f", "table": "t", "valency": 1}]


def config(env):
    return env.write_config("envcfg", 8, TABLES, FEATURES)


def environ(variables):
    """This process's environment without any SCPS_ variable, plus variables."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("SCPS_")}
    out.update(variables)
    return out


def bare(env, cfg, variables, argv=(), port_file=True):
    """A server started with argv alone (none of Server's own flags) and the
    given variables; SCPS_PORT_FILE names Server's port file unless set."""
    s = env.server(cfg, start=False)
    s.argv = [env.args.server] + list(argv)
    v = dict(variables)
    if port_file:
        v.setdefault("SCPS_PORT_FILE", s.port_file)
    s.environ = environ(v)
    s.start()
    return s


def get_config(env, srv):
    return srv.stub().GetConfig(env.pb.GetConfigRequest(), timeout=30)


def test_environment_only(env):
    """Every setting from variables; an empty variable is unset, an unknown
    one ignored."""
    cfg = config(env)
    ck = os.path.join(env.tmp, "ck-env")
    s = bare(env, cfg, {"SCPS_CONFIG": cfg, "SCPS_LISTEN": "127.0.0.1:0", "SCPS_PROCESS_INDEX": "1",
                        "SCPS_NUM_PROCESSES": "2", "SCPS_SC_PER_PROCESS": "3", "SCPS_SC_MEMORY": "1M",
                        "SCPS_MAX_MESSAGE_MB": "64", "SCPS_CHECKPOINT_DIR": ck, "SCPS_LIMIT_POLICY": "drop",
                        "SCPS_PIN_SPARSECORES": "off", "SCPS_RESTORE": "", "SCPS_NO_SUCH_OPTION": "1",
                        "SCPS_HOSTNAME": "no-ordinal-needed"}).wait_ready()
    c = get_config(env, s)
    topo = c.cluster.topology
    got = (c.process_index, topo.num_processes, topo.sc_per_process, c.max_message_bytes, c.checkpoint_dir,
           c.limit_policy)
    want = (1, 2, 3, 64 << 20, ck, env.pb.LIMIT_POLICY_DROP)
    env.check(got == want, "configured by variables only: (index, P, S, max message, checkpoint dir, policy) %s, "
              "expected %s" % (got, want))
    err = s.stderr()
    env.check("process 1 of 2 serving on port %d (3 SparseCores)" % s.port in err,
              "the start line says process 1 of 2, 3 SparseCores, none pinned: %r" % err)


def test_flags_win(env):
    """A flag wins over its variable (a bad variable under a flag is not
    read); variables without a flag still count; the rest keep defaults."""
    cfg = config(env)
    s = bare(env, cfg, {"SCPS_CONFIG": os.path.join(env.tmp, "not-this.json"), "SCPS_NUM_PROCESSES": "4",
                        "SCPS_PROCESS_INDEX": "3", "SCPS_SC_PER_PROCESS": "3", "SCPS_MAX_MESSAGE_MB": "many"},
             ["--config", cfg, "--listen", "127.0.0.1:0", "--num-processes", "2", "--process-index", "1",
              "--max-message-mb", "32"]).wait_ready()
    c = get_config(env, s)
    got = (c.process_index, c.cluster.topology.num_processes, c.cluster.topology.sc_per_process,
           c.max_message_bytes, c.checkpoint_dir, c.limit_policy)
    want = (1, 2, 3, 32 << 20, "", env.pb.LIMIT_POLICY_REFUSE)
    env.check(got == want, "flags over variables over defaults: (index, P, S, max message, checkpoint dir, policy) "
              "%s, expected %s" % (got, want))


def test_bad_values(env):
    """A bad variable stops the start as the flag would: exit 2, naming the
    variable and the value."""
    cfg = config(env)
    base = {"SCPS_CONFIG": cfg, "SCPS_LISTEN": "127.0.0.1:0"}
    cases = [
        ({"SCPS_NUM_PROCESSES": "abc"}, "SCPS_NUM_PROCESSES 'abc': expected an integer in [1, 1024]"),
        ({"SCPS_SC_PER_PROCESS": "65"}, "SCPS_SC_PER_PROCESS '65': expected an integer in [1, 64]"),
        ({"SCPS_SC_MEMORY": "lots"}, "SCPS_SC_MEMORY 'lots': expected bytes like 512M or 4G"),
        ({"SCPS_MEMORY_BUDGET": "1K"}, "SCPS_MEMORY_BUDGET '1K': expected bytes of at least 1M"),
        ({"SCPS_LISTEN": "nowhere"}, "SCPS_LISTEN 'nowhere': expected HOST:PORT"),
        ({"SCPS_PIN_SPARSECORES": "yes"}, "SCPS_PIN_SPARSECORES 'yes': expected on or off"),
        ({"SCPS_LIMIT_POLICY": "lenient"}, "SCPS_LIMIT_POLICY 'lenient': expected refuse or drop"),
        ({"SCPS_INSECURE": "maybe"}, "SCPS_INSECURE 'maybe': expected 1, 0, true or false"),
        ({"SCPS_LOG_FORMAT": "xml"}, "SCPS_LOG_FORMAT 'xml': expected text or json"),
        ({"SCPS_PROCESS_INDEX": "-1"}, "SCPS_PROCESS_INDEX '-1': expected an integer in [0, 1023] or auto"),
        ({"SCPS_PARTITION_LIMITS": "4096"}, "SCPS_PARTITION_LIMITS '4096': expected IDS,UNIQUE"),
        ({"SCPS_CHECKPOINT_SNAPSHOT_MAX": "some"}, "SCPS_CHECKPOINT_SNAPSHOT_MAX 'some': expected auto, 0 or bytes"),
        # A switch off is off: a non-loopback address is refused without it.
        ({"SCPS_LISTEN": "0.0.0.0:0", "SCPS_INSECURE": "0"}, "is not a loopback address"),
        ({"SCPS_CONFIG": ""}, "--config is required (or SCPS_CONFIG"),
    ]
    for extra, needle in cases:
        v = dict(base)
        v.update(extra)
        if not v["SCPS_CONFIG"]:
            del v["SCPS_CONFIG"]
        rc, out, err = bare(env, cfg, v).run_to_exit()
        env.check(rc == 2 and needle in err, "%s: exit %s, expected 2 with %r: %r" % (extra, rc, needle, err[:400]))
    # The switch on, from the environment.
    s = bare(env, cfg, dict(base, SCPS_LISTEN="0.0.0.0:0", SCPS_INSECURE="true")).wait_ready()
    env.check("WARNING: --insecure" in s.stderr(), "SCPS_INSECURE=true: the --insecure warning: %r" % s.stderr())


def test_process_index_auto(env):
    """auto: the trailing -N of the host name's first label; refused naming
    the host name when there is none or it is not below P."""
    cfg = config(env)
    base = {"SCPS_CONFIG": cfg, "SCPS_LISTEN": "127.0.0.1:0", "SCPS_NUM_PROCESSES": "3"}
    for variables, argv, want in [
            ({"SCPS_HOSTNAME": "scps-2", "SCPS_PROCESS_INDEX": "auto"}, [], 2),
            ({"SCPS_HOSTNAME": "scps-1.scps.default.svc.cluster.local"}, ["--process-index", "auto"], 1),
            # The flag wins: the host name is not read.
            ({"SCPS_HOSTNAME": "no-ordinal", "SCPS_PROCESS_INDEX": "auto"}, ["--process-index", "0"], 0)]:
        s = bare(env, cfg, dict(base, **variables), argv).wait_ready()
        got = get_config(env, s).process_index
        env.check(got == want, "%s %s: process index %d, expected %d" % (variables, argv, got, want))
        s.stop()
    for host, needles in [("scps", ["SCPS_PROCESS_INDEX 'auto'", "host name 'scps' does not end in -N"]),
                          ("scps-", ["host name 'scps-' does not end in -N"]),
                          ("scps-5", ["--process-index 5 (the ordinal of host name 'scps-5') must be below "
                                      "--num-processes 3"])]:
        rc, out, err = bare(env, cfg, dict(base, SCPS_HOSTNAME=host, SCPS_PROCESS_INDEX="auto")).run_to_exit()
        env.check(rc == 2 and all(n in err for n in needles), "host name %r: exit %s, expected 2 with %s: %r"
                  % (host, rc, needles, err[:400]))
    # Without SCPS_HOSTNAME: this machine's host name.
    host = socket.gethostname()
    m = re.search(r"-(\d+)$", host.split(".")[0])
    s = bare(env, cfg, dict(base, SCPS_NUM_PROCESSES="1024", SCPS_PROCESS_INDEX="auto"))
    if m and int(m.group(1)) < 1024:
        s.wait_ready()
        got = get_config(env, s).process_index
        env.check(got == int(m.group(1)), "host name %r: process index %d" % (host, got))
    else:
        rc, out, err = s.run_to_exit()
        env.check(rc == 2 and "host name '%s'" % host in err, "host name %r: exit %s: %r" % (host, rc, err[:400]))


def test_one_definition(env):
    """Two processes from the same variables but their host names: a cluster
    that answers a push and the Lookups after it across both."""
    cfg = config(env)
    shared = {"SCPS_CONFIG": cfg, "SCPS_LISTEN": "127.0.0.1:0", "SCPS_NUM_PROCESSES": "2",
              "SCPS_SC_PER_PROCESS": "2", "SCPS_PROCESS_INDEX": "auto"}
    srvs = [bare(env, cfg, dict(shared, SCPS_HOSTNAME="scps-%d" % p)) for p in range(2)]
    for s in srvs:
        s.wait_ready()
    cl = Cluster(env, srvs)
    env.check([c.process_index for c in cl.configs] == [0, 1], "process indexes %s from the host names"
              % [c.process_index for c in cl.configs])
    ids = list(range(8))
    batch = {"f": [[(i, 1.0)] for i in ids]}
    grads = np.tile(np.arange(8, dtype=np.float32), (8, 1))
    cl.apply(batch, {"f": grads}, step=1)
    rows = cl.read_rows("t", ids)
    env.check(np.array_equal(rows, -0.5 * grads), "every process applied its part of the push: %s" % rows[:2])


if __name__ == "__main__":
    main("test_env_config", [test_environment_only, test_flags_win, test_bad_values, test_process_index_auto,
                             test_one_definition])
