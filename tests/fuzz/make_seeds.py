#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/).

Stream headers are written exactly as slsReceiver 9.x sends them (its key order, "}\\n" at the
end; the same text as glint's format_sls_header and `glint sim`). Configurations are the shipped
example and the shapes the tests use. Run from anywhere; rewrites the generated seeds only (the
.clust seeds are kept: s5_21x19_seed22 is tests/core/data's file, glint_find_s{3,7}_24x20 were
written by `glint synth -o s.h5 --dark 1000 --frames 6 --rows 24 --cols 20 --photons 4 --seed 3`
and `glint find -i s.h5 --dark 1000 --clust F --backend cpu [--cluster-size 7]`; each seed's
first byte picks the cluster size).
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def header(jsonversion=5, bitmode=16, detshape=(1, 1), shape=(400, 400), frame=1, row=0,
           column=0, data=1, complete=1, fname="/data/run_d0_f0_1", det_type=5, add=None,
           rx_roi=(-1, -1, -1, -1), progress=None, size=None, flip_rows=0, quad=0):
    px = shape[0] * shape[1]
    if size is None:
        size = (px + 1) // 2 if bitmode == 4 else (3 * px + 1) // 2 if bitmode == 12 \
            else px * bitmode // 8
    if progress is None:
        progress = 100.0 * frame / 1000
    s = ('{"jsonversion":%d,"bitmode":%d,"fileIndex":0,"detshape":[%d,%d],"shape":[%d,%d],'
         '"size":%d,"acqIndex":%d,"frameIndex":%d,"progress":%.2f,"fname":%s,"data":%d,'
         '"completeImage":%d,"frameNumber":%d,"expLength":0,"packetNumber":%d,"detSpec1":0,'
         '"timestamp":%d,"modId":%d,"row":%d,"column":%d,"detSpec2":0,"detSpec3":0,'
         '"detSpec4":0,"detType":%d,"version":2,"flipRows":%d,"quad":%d') % (
        jsonversion, bitmode, detshape[0], detshape[1], shape[0], shape[1], size, frame,
        frame - 1, progress, json.dumps(fname), data, complete, frame,
        40 if det_type == 5 else 64, frame * 10000, row * detshape[0] + column, row, column,
        det_type, flip_rows, quad)
    if add:
        s += ',"addJsonHeader":' + json.dumps(add, separators=(",", ":"), sort_keys=True)
    if jsonversion >= 5:
        s += ',"rx_roi":[%d,%d,%d,%d]' % tuple(rx_roi)
    return s + "}\n"


def end(jsonversion=5):
    return header(jsonversion, bitmode=0, detshape=(0, 0), shape=(0, 0), frame=0, data=0,
                  complete=0, fname="", det_type=0, progress=0.0, size=0).replace(
        '"acqIndex":0,"frameIndex":-1', '"acqIndex":0,"frameIndex":0').replace(
        '"packetNumber":64', '"packetNumber":0').replace('"version":2', '"version":0')


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def sls_header():
    put("sls_header", "moench_v5", header())
    put("sls_header", "moench_v4", header(jsonversion=4))
    put("sls_header", "moench_v5_pedestal",
        header(add={"frameMode": "pedestal", "detectorMode": "counting"}))
    put("sls_header", "jungfrau_v5_two_ports",
        header(detshape=(1, 2), shape=(1024, 256), row=1, det_type=3, frame=77))
    put("sls_header", "eiger_v5_32bit", header(bitmode=32, detshape=(2, 2), shape=(256, 256),
                                               column=1, det_type=1, rx_roi=(0, 255, 0, 255)))
    put("sls_header", "moench_v5_4bit_incomplete", header(bitmode=4, complete=0))
    put("sls_header", "eiger_v5_12bit_quad_flipped",
        header(bitmode=12, detshape=(1, 2), shape=(256, 256), row=1, det_type=1, flip_rows=1,
               quad=1))
    put("sls_header", "end_v5", end(5))
    put("sls_header", "end_v4", end(4))


def assembler_message(h, payload):
    hb = h.encode()
    return b"\x00" + struct.pack("<H", len(hb)) + hb + struct.pack("<H", len(payload)) + payload


def frame_assembler():
    # Geometry: 2 ports side by side (byte 1), 4x4 pixels per port (3 + 16*3), queue, reorder.
    def geometry(queue, reorder, timeout_zero=False):
        return bytes([1, 3 + 16 * 3, queue, reorder | (0x80 if timeout_zero else 0)])

    def part(frame, column, bitmode=16, complete=1):
        size = {4: 8, 8: 16, 16: 32, 32: 64}[bitmode]
        payload = bytes((frame * 7 + column * 3 + i) % 256 for i in range(size))
        h = header(bitmode=bitmode, detshape=(2, 1), shape=(4, 4), frame=frame, column=column,
                   complete=complete)
        return assembler_message(h, payload)

    POP, RELEASE, FLUSH, DROPPED = b"\x01", b"\x02", b"\x03", b"\x04" + bytes(8)
    s = geometry(4, 2)
    for fn in range(1, 6):
        s += part(fn, 0) + part(fn, 1) + POP + RELEASE
    put("frame_assembler", "in_order", s)
    s = geometry(4, 2)
    s += part(2, 1) + part(1, 0) + part(3, 0) + part(2, 0) + part(1, 1) + part(3, 1)
    s += POP + POP + POP + RELEASE + RELEASE + RELEASE
    put("frame_assembler", "reordered", s)
    s = geometry(4, 1) + part(1, 0) + part(2, 0) + part(3, 0) + part(3, 1) + POP + POP + FLUSH
    s += POP + POP + RELEASE + RELEASE + RELEASE
    put("frame_assembler", "missing_parts", s)
    s = geometry(2, 8) + b"".join(part(fn, 0) for fn in range(1, 7)) + DROPPED + FLUSH
    s += POP + POP + RELEASE + RELEASE + part(7, 0) + part(7, 1) + POP
    put("frame_assembler", "pool_exhausted", s)
    s = geometry(4, 2, timeout_zero=True)
    for fn, bm in enumerate((4, 8, 32), start=1):
        s += part(fn, 0, bm) + part(fn, 1, bm, complete=0) + POP + RELEASE
    put("frame_assembler", "bitmodes", s)
    s = geometry(3, 2) + part(1, 0) + part(1, 0) + part(1, 1) + POP + part(1, 1) + RELEASE
    s += assembler_message(end(5), b"") + FLUSH
    put("frame_assembler", "repeated_and_late", s)


def config():
    with open(os.path.join(ROOT, "config", "glintd.example.yaml")) as f:
        example = f.read()
    put("config", "example", example)
    rig = ('detector: {rows: 40, cols: 40}\n'
           'ingest: {endpoints: ["tcp://127.0.0.1:30001"], queue_frames: 64}\n'
           'pedestal: {dark_frames: 20, window: 20}\n'
           'finder: {backend: cpu, threads: 2}\n'
           'output: {directory: "/tmp/glint-runs", run_name: test}\n'
           'run: {auto_start: false}\n'
           'control: {endpoint: "tcp://127.0.0.1:5555"}\n')
    put("config", "test_rig", rig)
    put("config", "jungfrau_two_ports",
        "detector:\n  type: jungfrau\n  rows: 512\n  cols: 1024\n  ports: [1, 2]\n"
        "ingest:\n  endpoints: [tcp://10.0.0.1:30001, tcp://10.0.0.1:30002]\n"
        "finder:\n  cluster_size: 5\n  n_sigma: 4.5\n")
    put("config", "reconstruction",
        rig + "reconstruction: {enabled: true, frames_per_slice: 10, slices: 4, "
              "forward: 'gaussian:1,1,0.5', backend: cpu, solve_partial: true}\n")
    put("config", "example_with_json_overrides",
        example + "\0" + '{"run": {"max_frames": 1000}, "finder": {"n_sigma": 4.0}}')
    put("config", "rig_with_yaml_overrides",
        rig + "\0" + "output:\n  run_name: calib\n  overwrite: true\npedestal: {dark_frames: 0}\n")


def control_request():
    for name, req in [
        ("status", '{"command": "status"}'), ("stats", '{"command": "stats"}'),
        ("config", '{"command": "config"}'), ("pedestal", '{"command": "pedestal"}'),
        ("start", '{"command": "start"}'),
        ("start_overrides", '{"command": "start", "overrides": {"run": {"max_frames": 20}, '
                            '"pedestal": {"dark_frames": 2}, "output": {"run_name": "calib"}}}'),
        ("stop", '{"command": "stop"}'), ("abort", '{"command": "abort"}'),
        ("shutdown", '{"command": "shutdown", "abort": true}'),
        ("bare_name", "stats"), ("json_string", '"status"'),
    ]:
        put("control_request", name, req)


def run_file():
    def arr(fmt, values, wide=False):
        return struct.pack("<H" if wide else "<B", len(values)) + b"".join(
            struct.pack("<" + fmt, v) for v in values)

    cfg = b"detector: {rows: 4, cols: 4}\nfinder: {backend: cpu}\n"
    frames = [(10, 100000, 0, 2, 0), (11, 110000, 2, 0, 0), (12, 120000, 2, 1, 0)]
    data = list(range(27))
    ped = [float(100 + i) for i in range(16)]

    def describe(flags, end_sum):
        s = bytes([flags, 2]) + struct.pack("<II", 4, 4) + struct.pack("<i", 3)
        s += struct.pack("<d", 5.0) + struct.pack("<I", 10) + struct.pack("<H", len(cfg)) + cfg
        s += arr("Q", [f[0] for f in frames]) + arr("Q", [f[1] for f in frames])
        s += arr("Q", [f[2] for f in frames]) + arr("I", [f[3] for f in frames])
        s += arr("B", [f[4] for f in frames])
        s += arr("H", [1, 2, 3]) + arr("H", [1, 1, 2]) + arr("i", data, wide=True)
        s += arr("d", ped) + arr("d", [3.0] * 16) + arr("d", ped) + arr("d", [3.0] * 16)
        s += arr("d", end_sum) + arr("d", [p * p * 10 + 90 for p in ped])
        return s + arr("I", [10] * 16)

    put("run_file", "complete_run", describe(0x3F, [p * 10 for p in ped]))
    # A run that never closed: no end_time, the end pedestal still NaN.
    put("run_file", "crashed_run", describe(0x3D, [float("nan")] * 16))

if __name__ == "__main__":
    sls_header()
    frame_assembler()
    config()
    control_request()
    run_file()
