#!/usr/bin/env bash
# Response generation on one GPU, in one job: the plans of benchmarks/plans/generation.py through the benchmark runner,
# WORKERS runs at a time sharing the card (the word generators are small: one alone leaves the card mostly idle), every
# run cut at DEADLINE seconds from the start (checkpointed; run the script again and cut runs continue, finished ones are
# kept), then the results files (benchmarks/results/generation-*.json, cut runs marked partial) and the run records
# (run.json, result.json, the logs; no checkpoints) archived into ARCHIVE, so a job cut short still leaves what finished.
#   PLANS    default "generation": the recipes' sizes, main rows over SEEDS, PHAED's ablations and c_max sweep on seed 1;
#            "generation-smollm2": SmolLM2-135M-Instruct fine-tuned, plain and with PHAED's speaker tokens and
#            turn-relative attention (bf16 mixed precision advised: ACCELERATE_MIXED_PRECISION=bf16).
#   SEEDS    default 1,2,3. Seed-major: every main row's first seed starts before any second one, the one-seed rows
#            (ablations, c_max) last, so a call cut short still has every main row. The runs' train.log files (in the
#            archive) give each model's batches a second on the card: size the next calls from them.
#   EXPERIMENTS  only these experiment ids (comma-separated; benchmarks/run.py --experiments), e.g. the two rows of one
#            claim: generation-dailydialog-transformer,generation-dailydialog-transformer-dra.
# Sizing, measured on an H200 (WORKERS=6, the six main rows' first seeds, float32, DEADLINE=495): an epoch with its
# evaluation took about 75 s of the call (the Transformer, GPT-2-style), 80 s (+DRA), 90-100 s (DialogBERT, +DRA) and
# 120 s (PHAED); the runs reached epochs 4 (PHAED) to 6 of the recipes' 10. A Transformer run with the card nearly to
# itself trained 37 batches a second (32 s an epoch of 1,189 batches). So a 10-minute call finishes the ten epochs of
# two or three runs (WORKERS=2 or 3, EXPERIMENTS), not of six; a cut run cannot go on in a later call (a fresh machine,
# and its checkpoint, 93 MB with the optimiser, does not come back), but its finished epochs are scored (partial).
# Give the call's time limit a minute beyond DEADLINE: the runs' last evaluation, the collection and the archive.
# DRA's models read spaCy parses: where the parser is not installed, bring the parse cache of the data along
# (TURNFORMER_CACHE/parses, filled by any run of transformer-dra on the same conversations; it is read without spaCy).
# The data: TURNFORMER_DATA (DailyDialog alone is needed). The code: PYTHONPATH=src where turnformer is not installed, and
# TURNFORMER_COMMIT=<commit> where the copy has no git, so that the results files name the commit that trained them.
# Usage: benchmarks/gpu_generation.sh    then the results files are in benchmarks/results/ and the archive.
set -u
export RUNS=${RUNS:-runs/generation} ARCHIVE=${ARCHIVE:-runs/generation.tar.gz}
read -r -a plans <<< "${PLANS:-generation}"
mkdir -p "$RUNS"
python3 benchmarks/run.py $(printf -- '--plan %s ' "${plans[@]}") --seeds "${SEEDS:-1,2,3}" --workers "${WORKERS:-12}" \
    --seed-major --deadline "${DEADLINE:-480}" --runs-dir "$RUNS" ${EXPERIMENTS:+--experiments "$EXPERIMENTS"} 2>&1 \
    | tee -a "$RUNS/runner.log"
tar -czf "$ARCHIVE" --exclude=last --exclude=best --exclude="*.tmp" --exclude="*.old" "$RUNS" \
    $(ls benchmarks/results/generation-*.json 2>/dev/null)
echo "archived into $ARCHIVE"
