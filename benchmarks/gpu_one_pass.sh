#!/usr/bin/env bash
# One-pass DialogXL on one GPU, everything in one call:
#   speed   the training ratio against transformers' BertModel on the same packed conversations (one process, batches
#           of 16 conversations) and the encoder ratio (erc_one_pass_speed.py, --device cuda);
#   runs    the one-pass experiment plan (run.py --plan one-pass): DialogXL's MELD and EmoryNLP rows, the
#           memory-bias rows and memory_grad, 3 seeds, WORKERS runs at a time on the card, every run cut at DEADLINE
#           seconds from the start and resumable (run the script again: finished runs are kept, cut ones continue).
# Usage: benchmarks/gpu_one_pass.sh [speed|runs|all]    The results files go to benchmarks/results.
set -u
part=${1:-all}
runs=${RUNS:-runs/erc}
if [[ $part == speed || $part == all ]]; then
    python3 benchmarks/erc_one_pass_speed.py training --device cuda --batch-size 16 --batches 24 --repeats 3 --threads 8 \
        || echo "speed (training) failed"
    python3 benchmarks/erc_one_pass_speed.py encoder --device cuda --batch-size 16 --batches 16 --repeats 3 --threads 8 \
        || echo "speed (encoder) failed"
fi
if [[ $part == runs || $part == all ]]; then
    python3 benchmarks/run.py --plan one-pass --workers "${WORKERS:-6}" --runs-dir "$runs" \
        --deadline "${DEADLINE:-420}" --seed-major || echo "runs failed"
fi
