#!/usr/bin/env python3
"""Convert goddp flight-recorder dumps (JSON) to the pickles torch's analyzer reads.

    python3 scripts/fr-to-pickle.py SRC_DIR DST_DIR

ddp-train --flight-dir writes SRC_DIR/nccl_trace_rank_N as JSON in the
layout of torch's flight recorder; torch's tools/flight_recorder
(loader.py) unpickles each file, as torch's own dumps are pickles by
default. This writes DST_DIR/nccl_trace_rank_N as a pickle of the same
dict, so that `python3 fr_trace.py -p nccl_trace_rank_ DST_DIR` reads it.
"""
import json
import os
import pickle
import sys


def main(src, dst):
    os.makedirs(dst, exist_ok=True)
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            dump = json.load(f)
        with open(os.path.join(dst, name), "wb") as f:
            pickle.dump(dump, f)
        print(f"{path} -> {os.path.join(dst, name)}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
