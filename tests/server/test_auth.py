"""Who may connect (deploy/SECURITY.md, "Who may connect"): scps-server with
TLS, mutual TLS and bearer tokens, checked with stock grpcio clients
(grpc.ssl_channel_credentials, `authorization` metadata and
access_token_call_credentials): every method against no token, an unknown
token, a training token and an admin token; plaintext to a TLS port; client
certificates; token and TLS files that must stop the start; and the rule for
listen addresses other machines can reach. Certificates are made at run
time (tests/make_test_pki.sh)."""
import os
import subprocess
import time

from scps_srvtest import SERVICE, UNLIMITED, Cluster, call_status, f32, main, make_pki, write_secret

TABLES = [
    {"name": "t", "vocabulary_size": 64, "embedding_dim": 8, "combiner": "sum",
     "optimizer": {"type": "sgd", "learning_rate": 0.5},
     "initializer": {"type": "uniform", "scale": 0.1}},
]
FEATURES = [{"name": "f", "table": "t", "valency": 1}]
BATCH = 8

ADMIN = "admin-0123456789abcdefXYZ"
TRAINING = "training-0123456789abcdef"
UNKNOWN = "unknown-0123456789abcdefg"
TOKENS = "# roles and tokens\n\nadmin %s\ntraining\t%s   \n" % (ADMIN, TRAINING)

# A call that never gets a connection (a failed TLS handshake): gRPC says
# UNAVAILABLE, or DEADLINE_EXCEEDED when the deadline comes first.
NO_CONNECTION = ("UNAVAILABLE", "DEADLINE_EXCEEDED")

METHODS = ("GetConfig", "Lookup", "ApplyGradients", "Stats", "Health", "Checkpoint", "TopK")
TRAINING_METHODS = ("GetConfig", "Lookup", "ApplyGradients", "Stats", "Health", "TopK")


def read(path):
    with open(path, "rb") as f:
        return f.read()


def tls(env, pki, client_cert=None, token=None):
    """Stock channel credentials: TLS verified against the test CA, with a
    client certificate (pki name) and a token's call credentials."""
    g = env.grpc
    kw = {"root_certificates": read(pki["ca"])}
    if client_cert:
        kw["private_key"] = read(pki[client_cert + "_key"])
        kw["certificate_chain"] = read(pki[client_cert])
    creds = g.ssl_channel_credentials(**kw)
    if token:
        creds = g.composite_channel_credentials(creds, g.access_token_call_credentials(token))
    return creds


def raw_call(channel, method, request, metadata):
    f = channel.unary_unary(SERVICE + method, request_serializer=lambda m: m.SerializeToString(),
                            response_deserializer=lambda b: b)
    return call_status(f, request, metadata=metadata, timeout=30)


def requests(env, cluster, step):
    """A valid request of every method (ApplyGradients and Checkpoint at step)."""
    pb = env.pb
    batch = {"f": [[(i * 7 % 64, 1.0)] for i in range(BATCH)]}
    entries = cluster.entries(batch)
    apply = pb.ApplyGradientsRequest(config_fingerprint=cluster.fingerprint, process_index=0, step=step)
    for st in sorted(entries):
        info = cluster.stacks[st]
        grads = [0.25] * (info.total_sample_count * info.dim)
        apply.stacks.append(pb.StackGradients(partitions=cluster.partitions(entries, 0, st), gradients=f32(grads)))
    return {"GetConfig": pb.GetConfigRequest(), "Lookup": cluster.lookup_request(entries, 0),
            "ApplyGradients": apply, "Stats": pb.StatsRequest(), "Health": pb.HealthRequest(),
            "Checkpoint": pb.CheckpointRequest(config_fingerprint=cluster.fingerprint, process_index=0, step=step),
            "TopK": pb.TopKRequest(config_fingerprint=cluster.fingerprint, process_index=0, table="t", num_queries=1,
                                   queries=f32([0.5] * 8), k=3, recall_target=1.0)}


def test_roles(env):
    """Every method x {no token, unknown token, training, admin} over TLS: OK,
    UNAUTHENTICATED or PERMISSION_DENIED as the role table says, and a
    refused push changes no row."""
    pki = make_pki(env)
    cfg = env.write_config("roles", BATCH, TABLES, FEATURES)
    tokens = write_secret(env, "tokens", TOKENS)
    ck = os.path.join(env.tmp, "ck-roles")
    srv = env.server(cfg, extra=["--tls-cert", pki["server"], "--tls-key", pki["server_key"], "--token-file", tokens,
                                 "--checkpoint-dir", ck], credentials=tls(env, pki, token=ADMIN)).wait_ready()
    cluster = Cluster(env, [srv])  # over TLS with the admin token as call credentials
    before = cluster.read_rows("t", list(range(64)))
    ch = env.grpc.secure_channel(srv.addr, tls(env, pki), options=UNLIMITED)
    step = 0
    for who, token in (("no token", None), ("an unknown token", UNKNOWN), ("training", TRAINING), ("admin", ADMIN)):
        md = [("authorization", "Bearer " + token)] if token else []
        reqs = requests(env, cluster, step)
        for m in METHODS:
            if who in ("no token", "an unknown token"):
                want = "UNAUTHENTICATED"
            elif who == "training" and m not in TRAINING_METHODS:
                want = "PERMISSION_DENIED"
            else:
                want = "OK"
            code, details, _ = raw_call(ch, m, reqs[m], md)
            env.check(code == want, "%s with %s: %s (%s), expected %s" % (m, who, code, details, want))
            if code == "UNAUTHENTICATED":
                env.check("bearer token" in details and UNKNOWN not in details,
                          "%s with %s: the message says what is missing and not the token: %s" % (m, who, details))
            if code == "PERMISSION_DENIED":
                env.check("admin" in details and "training" in details,
                          "%s with %s: the message names both roles: %s" % (m, who, details))
        if who in ("no token", "an unknown token"):
            after = cluster.read_rows("t", list(range(64)))
            env.check((after == before).all(), "ApplyGradients with %s changed rows" % who)
        else:
            step += 1
    env.check(os.path.isdir(os.path.join(ck, "step-%012d" % 1)), "the admin's Checkpoint of step 1 was saved")
    env.check(not os.path.exists(os.path.join(ck, "step-%012d" % 0)), "the training Checkpoint saved nothing")
    # scps-admin rows (ReadRows, admin-only) over TLS with a token file.
    for who, token, want in (("admin", ADMIN, 0), ("training", TRAINING, 1)):
        tf = write_secret(env, "rows-%s.token" % who, token + "\n")
        r = subprocess.run([env.args.admin, "rows", "--servers", srv.addr, "--table", "t", "--ids", "0-3", "--tls-ca",
                            pki["ca"], "--token-file", tf], capture_output=True, text=True, timeout=60)
        env.check(r.returncode == want and ("id 3: row" in r.stdout if want == 0 else "PERMISSION_DENIED" in r.stderr),
                  "scps-admin rows with the %s token over TLS: exit %d %s%s" % (who, r.returncode, r.stdout[-300:],
                                                                               r.stderr[-300:]))
    # The scheme is case-insensitive (RFC 6750), the token is not.
    code, _, _ = raw_call(ch, "Health", env.pb.HealthRequest(), [("authorization", "bearer " + TRAINING)])
    env.check(code == "OK", "'bearer' in lower case: %s" % code)
    code, _, _ = raw_call(ch, "Health", env.pb.HealthRequest(), [("authorization", "Bearer " + TRAINING.upper())])
    env.check(code == "UNAUTHENTICATED", "a token in another case: %s" % code)
    code, _, _ = raw_call(ch, "Health", env.pb.HealthRequest(), [("authorization", "Basic " + TRAINING)])
    env.check(code == "UNAUTHENTICATED", "another scheme: %s" % code)
    ch.close()
    # Plaintext to the TLS port never gets an answer.
    plain = env.grpc.insecure_channel(srv.addr, options=UNLIMITED)
    f = plain.unary_unary(SERVICE + "Health", request_serializer=lambda m: m.SerializeToString())
    code, _, _ = call_status(f, env.pb.HealthRequest(), metadata=[("authorization", "Bearer " + ADMIN)], timeout=20)
    env.check(code in NO_CONNECTION, "plaintext to a TLS port: %s, expected no connection" % code)
    plain.close()
    # A client that does not trust the server's CA does not connect.
    other = env.grpc.secure_channel(srv.addr, env.grpc.ssl_channel_credentials(read(pki["other_ca"])))
    f = other.unary_unary(SERVICE + "Health", request_serializer=lambda m: m.SerializeToString())
    code, _, _ = call_status(f, env.pb.HealthRequest(), metadata=[("authorization", "Bearer " + ADMIN)], timeout=20)
    env.check(code in NO_CONNECTION, "roots of another CA: %s, expected no connection" % code)
    other.close()


def test_checkpoint_due_by_role(env):
    """checkpoint_due goes only to callers that may answer it with a
    Checkpoint. Tokens without TLS on loopback."""
    cfg = env.write_config("due", BATCH, TABLES, FEATURES)
    tokens = write_secret(env, "tokens-due", TOKENS)
    ck = os.path.join(env.tmp, "ck-due")
    srv = env.server(cfg, extra=["--token-file", tokens, "--checkpoint-dir", ck, "--checkpoint-every", "1"],
                     credentials=env.grpc.composite_channel_credentials(
                         env.grpc.local_channel_credentials(),
                         env.grpc.access_token_call_credentials(ADMIN))).wait_ready()
    cluster = Cluster(env, [srv])
    ch = env.grpc.insecure_channel(srv.addr, options=UNLIMITED)
    f = ch.unary_unary(SERVICE + "ApplyGradients", request_serializer=lambda m: m.SerializeToString(),
                       response_deserializer=env.pb.ApplyGradientsResponse.FromString)
    step, seen = 0, False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not seen:
        due = []
        for token in (ADMIN, TRAINING, ADMIN):
            resp = f(requests(env, cluster, step)["ApplyGradients"],
                     metadata=[("authorization", "Bearer " + token)], timeout=30)
            due.append(resp.checkpoint_due)
            step += 1
        # With the admin's pushes on both sides due, the training push came
        # while the server was asking for a checkpoint.
        seen = due[0] and due[2]
        if seen:
            env.check(not due[1], "a training push was answered checkpoint_due")
        time.sleep(0.1)
    env.check(seen, "no admin push was answered checkpoint_due within 60 s")
    ch.close()


def test_mutual_tls(env):
    """--tls-client-ca: without a client certificate, or with one of another
    CA, no call gets through; with one of the CA every call does (no token
    file: every caller is admin)."""
    pki = make_pki(env)
    cfg = env.write_config("mtls", BATCH, TABLES, FEATURES)
    srv = env.server(cfg, extra=["--tls-cert", pki["server"], "--tls-key", pki["server_key"],
                                 "--tls-client-ca", pki["ca"]]).wait_ready()
    for who, cert, want in (("no client certificate", None, NO_CONNECTION),
                            ("a certificate of another CA", "stranger", NO_CONNECTION),
                            ("a client certificate", "client", ("OK",))):
        ch = env.grpc.secure_channel(srv.addr, tls(env, pki, client_cert=cert), options=UNLIMITED)
        for m, req in (("Health", env.pb.HealthRequest()), ("GetConfig", env.pb.GetConfigRequest())):
            code, details, _ = raw_call(ch, m, req, [])
            env.check(code in want, "mutual TLS, %s: %s %s (%s), expected %s" % (who, m, code, details, want))
        ch.close()


def start_fails(env, cfg, extra, status, *wants, listen="127.0.0.1:0"):
    """Starts a server that must refuse to start: its exit status and stderr
    are checked; one that serves instead is stopped at once."""
    srv = env.server(cfg, extra=extra, listen=listen)
    deadline = time.monotonic() + 60
    while srv.running() and not os.path.exists(srv.port_file) and time.monotonic() < deadline:
        time.sleep(0.02)
    if srv.running():
        srv.kill()
    rc, _, err = srv.run_to_exit(30)
    env.check(rc == status, "%s: exit status %s, expected %d; stderr:\n%s" % (" ".join(extra), rc, status, err))
    for w in wants:
        env.check(w in err, "%s: stderr lacks %r:\n%s" % (" ".join(extra), w, err))
    return err


def test_bad_files(env):
    """Token and TLS files that must stop the start (exit 1), naming the file
    (and the line); flags that go together (exit 2)."""
    pki = make_pki(env)
    cfg = env.write_config("files", BATCH, TABLES, FEATURES)
    bad_tokens = [
        ("admin short-token\n", "line 1", "at least 16"),
        ("# ok\nroot %s\n" % ADMIN, "line 2", "role 'root'"),
        ("admin\n", "line 1", "two fields"),
        ("admin %s extra\n" % ADMIN, "line 1", "two fields"),
        ("admin %s\ntraining %s\n" % (ADMIN, ADMIN), "line 2", "same token as line 1"),
        ("admin %s\x01bc\n" % ADMIN, "line 1", "not printable"),
        ("# nothing but comments\n\n", "no token", "admin TOKEN"),
    ]
    for i, (text, *wants) in enumerate(bad_tokens):
        path = write_secret(env, "bad-tokens-%d" % i, text)
        start_fails(env, cfg, ["--token-file", path], 1, "--token-file '%s'" % path, *wants)
    missing = os.path.join(env.tmp, "no-such-file")
    start_fails(env, cfg, ["--token-file", missing], 1, "--token-file '%s'" % missing, "No such file")
    s, k = pki["server"], pki["server_key"]
    start_fails(env, cfg, ["--tls-cert", missing, "--tls-key", k], 1, "--tls-cert '%s'" % missing)
    start_fails(env, cfg, ["--tls-cert", s, "--tls-key", missing], 1, "--tls-key '%s'" % missing)
    start_fails(env, cfg, ["--tls-cert", s, "--tls-key", pki["client_key"]], 1,
                "--tls-key '%s' is not the private key of --tls-cert '%s'" % (pki["client_key"], s))
    start_fails(env, cfg, ["--tls-cert", k, "--tls-key", k], 1, "--tls-cert '%s': no PEM certificate" % k)
    start_fails(env, cfg, ["--tls-cert", s, "--tls-key", s], 1, "--tls-key '%s': not an unencrypted PEM private key" % s)
    start_fails(env, cfg, ["--tls-cert", s, "--tls-key", k, "--tls-client-ca", k], 1,
                "--tls-client-ca '%s': no PEM certificate" % k)
    start_fails(env, cfg, ["--tls-cert", s], 2, "--tls-cert and --tls-key go together")
    start_fails(env, cfg, ["--tls-client-ca", pki["ca"]], 2, "--tls-client-ca needs --tls-cert")
    # A token file others may read still serves, with a warning.
    loose = write_secret(env, "loose-tokens", TOKENS, mode=0o644)
    srv = env.server(cfg, extra=["--token-file", loose]).wait_ready()
    env.check("readable by group or others (mode 0644)" in srv.stderr(), "no warning about a token file of mode 0644:\n"
              + srv.stderr())


def test_listen_rule(env):
    """A listen address other machines can reach needs TLS and tokens or client
    certificates, or --insecure (which warns); loopback needs nothing."""
    pki = make_pki(env)
    cfg = env.write_config("listen", BATCH, TABLES, FEATURES)
    tokens = write_secret(env, "tokens-listen", TOKENS)
    tls_flags = ["--tls-cert", pki["server"], "--tls-key", pki["server_key"]]
    for extra, why in (([], "neither TLS nor tokens"), (["--token-file", tokens], "no TLS"),
                       (tls_flags, "TLS but no tokens")):
        start_fails(env, cfg, extra, 2, "--listen 0.0.0.0:0 is not a loopback address", why, "--insecure",
                    listen="0.0.0.0:0")
    start_fails(env, cfg, [], 2, "is not a loopback address", listen="[::]:0")
    srv = env.server(cfg, extra=["--insecure"], listen="0.0.0.0:0").wait_ready()
    env.check("WARNING: --insecure" in srv.stderr(), "--insecure without a warning:\n" + srv.stderr())
    code, _, _ = call_status(srv.stub().Health, env.pb.HealthRequest(), timeout=30)
    env.check(code == "OK", "--insecure on 0.0.0.0: Health %s" % code)
    for extra in (tls_flags + ["--token-file", tokens], tls_flags + ["--tls-client-ca", pki["ca"]]):
        srv = env.server(cfg, extra=extra, listen="0.0.0.0:0").wait_ready()
        env.check("WARNING" not in srv.stderr(), "%s on 0.0.0.0 warned:\n%s" % (extra, srv.stderr()))
    for listen in ("localhost:0", "127.0.0.2:0"):
        srv = env.server(cfg, listen=listen).wait_ready()
        env.check("WARNING" not in srv.stderr(), "%s warned:\n%s" % (listen, srv.stderr()))
    env.stop_all()
    r = subprocess.run([env.args.server, "--help"], capture_output=True, text=True, timeout=30)
    env.check("default 127.0.0.1:50051" in r.stdout, "--help does not give the loopback default")


if __name__ == "__main__":
    main("test_auth", [test_roles, test_checkpoint_due_by_role, test_mutual_tls, test_bad_files, test_listen_rule])
