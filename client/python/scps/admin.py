"""Operator calls (stats, health, per-server configuration) through
``scps-admin ... --json``: libscps's public API has no Stats or Health
call, and scps-admin already renders every field of those answers under
its scps.proto name, so the package asks it rather than carrying a second
gRPC client. Found as $SCPS_ADMIN, else beside the libscps this package
was built against, else on PATH."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from typing import Any, Dict, List, Sequence

from .errors import Error, invalid

try:
    from ._paths import ADMIN as _BUILT_ADMIN
except ImportError:  # built without a recorded prefix
    _BUILT_ADMIN = None


def admin_program() -> str:
    for p in (os.environ.get("SCPS_ADMIN"), _BUILT_ADMIN, shutil.which("scps-admin")):
        if p and os.access(p, os.X_OK):
            return p
    raise invalid("scps-admin not found: set SCPS_ADMIN, or put the installed prefix's bin/ on PATH")


def ask(command: str, servers: Sequence[str], security: Dict[str, Any], deadline_ms: int) -> List[Dict[str, Any]]:
    """scps-admin COMMAND --json's answer: one dict per server (its
    "server" address; "error" for one that did not answer)."""
    argv = [admin_program(), command, "--servers", ",".join(servers), "--json", "--deadline-ms", str(int(deadline_ms))]
    for key, flag in (("tls_ca_file", "--tls-ca"), ("tls_cert_file", "--tls-cert"), ("tls_key_file", "--tls-key"),
                      ("tls_server_name", "--tls-server-name")):
        if security.get(key):
            argv += [flag, security[key]]
    if security.get("tls"):
        argv.append("--tls")
    with tempfile.TemporaryDirectory(prefix="scps-admin-") as tmp:
        if security.get("token"):
            # A file, as scps-admin takes it, so the token does not show in ps.
            path = os.path.join(tmp, "token")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(security["token"])
            argv += ["--token-file", path]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=deadline_ms / 1000.0 * len(servers) + 30)
    try:
        answer = json.loads(r.stdout)
    except ValueError:
        raise Error(-8, "SCPS_EIO", "input/output error",
                    "scps-admin %s exited with %d: %s" % (command, r.returncode, r.stderr.strip()[-2000:]))
    return answer
