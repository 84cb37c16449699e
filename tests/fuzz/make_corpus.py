#!/usr/bin/python3
"""Writes the fuzz targets' seed corpus (tests/fuzz/corpus/<target>/):
valid and near-valid messages built with stubs generated from
proto/scps.proto, and the repository's configuration files. Run it again
after a wire change and commit what changes:

    /usr/bin/python3 tests/fuzz/make_corpus.py
"""
import glob
import hashlib
import importlib
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def stubs():
    out = tempfile.mkdtemp(prefix="scps-corpus-")
    proto = os.path.join(ROOT, "proto", "scps.proto")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", os.path.dirname(proto),
                    "--python_out", out, proto], check=True)
    sys.path.insert(0, out)
    return importlib.import_module("scps_pb2")


def u32(xs):
    return struct.pack("<%dI" % len(xs), *xs)


def f32(xs):
    return struct.pack("<%df" % len(xs), *xs)


def partitions(pb, stack, S=4, per_sc=3, u16=False, gains=None, exceptions=False):
    rows, samples, offs = [], [], [0]
    for k in range(S):
        rows += [k * 2 + j for j in range(per_sc)]
        samples += [j for j in range(per_sc)]
        offs.append(len(rows))
    p = pb.StackPartitions(stack=stack, sc_offsets=offs, rows=u32(rows))
    if u16:
        p.samples_u16 = struct.pack("<%dH" % len(samples), *samples)
    else:
        p.samples = u32(samples)
    if gains:
        p.gains = f32([0.5] * len(rows))
    if exceptions:
        p.gain_exceptions = struct.pack("<IfIf", 0, 0.25, 2, 2.0)
    return p


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    pb = stubs()
    fp = hashlib.sha256(b"scps").digest()
    # fuzz_request: byte 0 = kind (bit 0: ApplyGradients) | slice count - 1 << 1.
    look = pb.LookupRequest(config_fingerprint=fp, process_index=1,
                            stacks=[partitions(pb, "a"), partitions(pb, "b", u16=True)],
                            distinct_rows=[False, True])
    write("request", "lookup", bytes([0]) + look.SerializeToString())
    write("request", "lookup_split", bytes([3 << 1]) + look.SerializeToString())
    look_g = pb.LookupRequest(config_fingerprint=fp, stacks=[partitions(pb, "a", gains=True),
                                                             partitions(pb, "c", exceptions=True)],
                              activation_format=1)
    write("request", "lookup_gains", bytes([1 << 1]) + look_g.SerializeToString())
    grads = f32([0.25 * i for i in range(16 * 4)])
    apply_s = pb.ApplyGradientsRequest(config_fingerprint=fp, process_index=0, step=7, learning_rate=0.01,
                                       stacks=[pb.StackGradients(partitions=partitions(pb, "a"), gradients=grads)])
    write("request", "apply_sample", bytes([1]) + apply_s.SerializeToString())
    write("request", "apply_sample_split", bytes([1 | 7 << 1]) + apply_s.SerializeToString())
    apply_r = pb.ApplyGradientsRequest(config_fingerprint=fp, step=2**40, gradient_format=1,
                                       stacks=[pb.StackGradients(
                                           partitions=pb.StackPartitions(stack="b", sc_offsets=[0, 1, 2, 2, 3],
                                                                         rows=u32([1, 5, 9])),
                                           row_gradients=b"\x80\x3f" * 24)])
    write("request", "apply_rows", bytes([1 | 2 << 1]) + apply_r.SerializeToString())
    # eXmY: e4m3 gradients with row scales (a row of 8 values: 8 code bytes,
    # then its scale; one scale 127, past float32), e3m0 with a bias asked
    # for a Lookup's activations.
    apply_x = pb.ApplyGradientsRequest(config_fingerprint=fp, step=3, gradient_format=2,
                                       gradient_exmy=pb.ExmyFormat(exponent_bits=4, mantissa_bits=3, row_scale=True),
                                       stacks=[pb.StackGradients(partitions=partitions(pb, "a"),
                                                                 gradients=bytes(range(9)) * 3 + bytes([127]))])
    write("request", "apply_exmy", bytes([1 | 1 << 1]) + apply_x.SerializeToString())
    look_x = pb.LookupRequest(config_fingerprint=fp, stacks=[partitions(pb, "a")], activation_format=2,
                              activation_exmy=pb.ExmyFormat(exponent_bits=3, mantissa_bits=0, bias=-2))
    write("request", "lookup_exmy", bytes([0]) + look_x.SerializeToString())
    # Unknown fields and a truncated message.
    write("request", "unknown_fields", bytes([0]) + look.SerializeToString() + bytes([0xf0, 0x01, 0x05, 0xfa, 0x01, 0x02, 1, 2]))
    write("request", "truncated", bytes([1]) + apply_s.SerializeToString()[:-7])

    # fuzz_lookup_reply: byte 0 = slice count - 1 | stacks asked for << 3.
    reply = pb.LookupResponse(stacks=[pb.StackActivations(stack="a", activations=f32([0.5 * i for i in range(24)])),
                                      pb.StackActivations(stack="b", rows=b"\x80\x3f" * 10)])
    write("lookup_reply", "two_stacks", bytes([2 << 3]) + reply.SerializeToString())
    write("lookup_reply", "two_stacks_split", bytes([5 | 2 << 3]) + reply.SerializeToString())
    write("lookup_reply", "wrong_count", bytes([1 | 3 << 3]) + reply.SerializeToString())
    write("lookup_reply", "unknown_fields", bytes([2 << 3]) + bytes([0x38, 0x96, 0x01, 0x4a, 0x01, 0x7a]) +
          reply.SerializeToString() + bytes([0x55, 1, 2, 3, 4]))
    write("lookup_reply", "truncated", bytes([2 | 2 << 3]) + reply.SerializeToString()[:-5])
    write("lookup_reply", "empty", bytes([0]))

    # fuzz_spec: GetConfigRequest with an expected ClusterSpec.
    opt = pb.OptimizerSpec(type=pb.OPTIMIZER_TYPE_ADAGRAD, learning_rate=0.05, initial_accumulator=0.1)
    spec = pb.ClusterSpec(
        topology=pb.Topology(num_processes=2, sc_per_process=2, sc_memory_bytes=1 << 30),
        tables=[pb.TableSpec(name="t", vocabulary_size=1000, embedding_dim=8, combiner=pb.COMBINER_SUM,
                             optimizer=pb.OptimizerSpec(type=pb.OPTIMIZER_TYPE_SGD),
                             initializer=pb.InitializerSpec(type=1, value=0.5)),
                pb.TableSpec(name="u", vocabulary_size=77, embedding_dim=5, combiner=pb.COMBINER_MEAN,
                             optimizer=opt, max_ids_per_partition=64, max_unique_ids_per_partition=32,
                             stack="s")],
        features=[pb.FeatureSpec(name="f", table="t", batch_size=16, valency=2),
                  pb.FeatureSpec(name="g", table="u", batch_size=16, valency=0, output_dim=8)])
    write("spec", "served", pb.GetConfigRequest(expected=spec).SerializeToString())
    spec.tables[0].embedding_dim = 16
    write("spec", "differs", pb.GetConfigRequest(expected=spec).SerializeToString())
    ftrl = pb.OptimizerSpec(type=pb.OPTIMIZER_TYPE_FTRL, learning_rate=0.1, learning_rate_power=-0.5, l1=0.01,
                            beta=0.1, multiply_linear_by_learning_rate=True)
    spec.tables[1].optimizer.CopyFrom(ftrl)
    write("spec", "ftrl", pb.GetConfigRequest(expected=spec).SerializeToString())
    write("spec", "empty", b"")

    # fuzz_workload: the repository's configurations and the shared workloads.
    confs = sorted(glob.glob(os.path.join(ROOT, "deploy", "workloads", "*.json")))
    confs += sorted(glob.glob(os.path.join(ROOT, "..", "shared", "workloads", "*.json")))
    for path in confs:
        with open(path, "rb") as f:
            data = f.read()
        if len(data) <= 64 << 10:
            write("workload", os.path.basename(path), data)


if __name__ == "__main__":
    main()
