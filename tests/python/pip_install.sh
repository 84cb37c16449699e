#!/usr/bin/env bash
# The package as a user installs it (client/python/README.md): libscps
# installed to PREFIX (the scps_installed fixture, tests/install), a venv of
# Debian's /usr/bin/python3 with --system-site-packages (Debian marks its
# interpreter externally managed; the venv still sees Debian's numpy and
# torch), `pip install` of a copy of client/python with no package index,
# then, from elsewhere, an import, help(scps.Client) and a lookup and push
# against two scps-server processes started from PREFIX.
#   pip_install.sh PREFIX LIBDIR
set -euo pipefail
prefix=$1 libdir=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../deploy/cluster.sh"
tmp=$SCPS_CLUSTER_DIR
# A copy: pip builds in the source folder, which must stay clean.
cp -r "$here/../../client/python" "$tmp/src"
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv"
PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig "$tmp/venv/bin/pip" install --no-index --quiet "$tmp/src" \
  || { echo "FAILED: pip install"; exit 1; }

cat >"$tmp/config.json" <<'JSON'
{"name": "pip", "batch_size": 4, "ids": {"distribution": "uniform", "seed": 1},
 "tables": [{"name": "t", "vocabulary_size": 16, "embedding_dim": 4, "combiner": "sum",
   "optimizer": {"type": "sgd", "learning_rate": 0.5}, "initializer": {"type": "constant", "value": 0.25}}],
 "features": [{"name": "f", "table": "t", "valency": 2}]}
JSON
scps_cluster_start "$prefix/bin/scps-server" "$tmp/config.json" 2 1 16M
cd "$tmp"
# No LD_LIBRARY_PATH: the extension finds libscps by the rpath setup.py set.
env -u LD_LIBRARY_PATH -u PYTHONPATH "$tmp/venv/bin/python" - "$SCPS_CLUSTER_SERVERS" "$tmp/venv" <<'PY'
import pydoc, sys
import numpy as np
import torch  # Debian's python3-torch, seen from the venv
import scps
assert scps.__file__.startswith(sys.argv[2]), scps.__file__
doc = pydoc.render_doc(scps.Client, renderer=pydoc.plaintext)
assert "lookup(self, batch" in doc and "wire_format" in doc, doc[:2000]
with scps.Client(sys.argv[1]) as c:
    ids = np.array([[0, 1], [1, 2], [2, 3], [3, 3]], np.int64)
    acts = c.lookup({"f": ids})["f"]
    assert acts.shape == (4, 4) and (acts == 0.5).all(), acts
    p = c.prepare({"f": torch.from_numpy(ids)})
    c.push(p, {"f": np.ones((4, 4), np.float32)}, 0)
    # Row 3 appears twice in sample 3 and once in sample 2: 0.25 - 0.5 * 3.
    assert (c.read_rows("t", [3]) == -1.25).all()
    assert c.health()[0]["status"] == "STATUS_SERVING"  # the prefix's scps-admin
print("pip_install: ok, scps %s from %s" % (scps.__version__, scps.__file__))
PY
