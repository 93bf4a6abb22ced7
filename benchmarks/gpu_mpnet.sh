#!/usr/bin/env bash
# Emotion recognition and response selection on all-mpnet-base-v2, on one GPU, in one job: one process a run, WORKERS runs at a time sharing
# the card (a run trains batches of 4 conversations, far from filling it alone), bf16 mixed precision, every run cut
# at DEADLINE seconds from the start (checkpointed, resumable: run the script again and cut runs continue, finished
# ones are kept). After every run the run records (run.json, result.json, the log; no checkpoints) are archived into
# ARCHIVE, so a job cut short still leaves what finished.
# Plans (several may be named; their runs share the card, WORKERS at a time, in the order named):
#   lr-sweep         DialogXL with the memory bias on MELD and EmoryNLP at learning rates 1e-5, 2e-5, 4e-5 (seed 1; the
#                    classifier keeps the recipe's head_lr), and the concatenated-context baseline at 2e-5 on both.
#   seeds            the rate the sweep chose (LR, default 2e-5) with SEEDS (default 2 3): DialogXL with the memory bias
#                    and the concatenated context on MELD and EmoryNLP.
#   paper-attention  DialogXL as in the paper (no memory bias) on MELD and EmoryNLP, LR, seeds PAPER_SEEDS (default 1 2 3).
#   memory-grad      DialogXL with the memory bias and gradients into earlier utterances of a chunk, LR, seeds 1-3.
#   baselines        the concatenated context on MELD, seeds 2 and 3; segment recurrence on MELD and EmoryNLP, seed 1.
#   dailydialog      DailyDialog (1.46M tokens a training epoch on this backbone, 10.5 times MELD's), LR: DialogXL with the
#                    memory bias, seeds 1-3, DD_EPOCHS (default 2) epochs each: one call's worth. The memory-grad and
#                    paper-attention job (10 runs sharing an H200, bf16) trained about 21K tokens/s in all, one run alone
#                    7.2K in bf16 (`speed`): the recipe's 3 epochs of 3 seeds (13M tokens) are more than a 10-minute call.
#   dailydialog-rest the rest of DailyDialog's table, DD_EPOCHS each: segment recurrence and the concatenated context,
#                    seed 1; DialogXL with the paper's attention and with memory_grad, seeds 1-3; the concatenated
#                    context, seeds 2-3 (several calls: at the rate above, with the concatenated context's rows
#                    about 5 times as many tokens, about an hour of the card in all).
#   selection        the plain encoder and MDFN on MuTual, SELECTION_LR (default 2e-5), seeds 1-3.
#   selection-plus   the same on MuTual-plus.
#   selection-ablations  MDFN's five ablations (Tables 7-9) on MuTual, seed 1.
#   submission       after the selection plan in the same job: MuTual test's submission file from the MDFN seed best on
#                    the held-out training items (SUBMISSION, default $RUNS/mutual-test-submission.txt); it reads that
#                    run's checkpoint, so it runs in the job that trains it.
#   speed            before any run, alone on the card: one-pass DialogXL on all-mpnet-base-v2 against transformers'
#                    MPNetModel on the same tokens, packed (benchmarks/erc_one_pass_speed.py training and encoder,
#                    results erc-one-pass-speed-mpnet-cuda.json and erc-encoder-vs-transformers-mpnet-cuda.json in RUNS).
#   acts-frozen      dialogue acts over all-mpnet-base-v2's frozen sentence vectors on SwDA (ACT_DATASETS, default swda):
#                    LC Attention, LSTM+Attention, LSTM+BLSTM and the utterance alone, seeds 1-3, each recipe's own
#                    learning rate, float32. The first run computes and caches the vectors, the others read them: run
#                    it with WORKERS=1 for its first run (`acts-vectors`), then as wide. Beside 10 training runs on an
#                    H200, SwDA's 192K training utterances took 164 s to encode and a 10-epoch run 353 s (an epoch
#                    5 s once the card was free): run acts-vectors before the other plans, not beside them.
#   acts-vectors     the first run of acts-frozen alone.
# EXTRA: more `turnformer train` options for every run (a quick check: EXTRA="--limit-dialogues 2 --set train.epochs=1").
# LIST=1: print the runs the plans name (experiment task model dataset lr seed [precision [setting...]]), start none.
# On an 80 GB H100, 8 runs at a time take about 5 minutes (4 epochs each, MELD or EmoryNLP); the concatenated context on
# MELD (up to 512 tokens of history an utterance) needs the most memory: two of them beside six other runs ran out of it.
# On a 141 GB H200, `baselines selection` (10 runs: 4 ERC, 6 MuTual) peaked at 91 GB; MuTual's 3 epochs need about
# 12 minutes for MDFN and 9 for the plain encoder with 10 runs sharing the card: give selection a job of its own.
# Usage: benchmarks/gpu_mpnet.sh PLAN [PLAN...]    then: python benchmarks/collect_erc.py ... on the run folders.
set -u
plans=("${@:-lr-sweep}")
lr=${LR:-2e-5} slr=${SELECTION_LR:-2e-5}
export RUNS=${RUNS:-runs/mpnet} ARCHIVE=${ARCHIVE:-runs/mpnet.tar.gz}
export DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-480} ))
export ACCELERATE_MIXED_PRECISION=${ACCELERATE_MIXED_PRECISION:-bf16} TURNFORMER_THREADS=${TURNFORMER_THREADS:-2}

runs() {  # one line a run: experiment task model dataset lr seed [precision]; lr "recipe": the recipe's own
    for plan in "${plans[@]}"; do case $plan in
    lr-sweep)
        for dataset in meld emorynlp; do
            for rate in 1e-5 2e-5 4e-5; do echo "erc-$dataset-dialogxl-memory-bias-mpnet-lr$rate erc dialogxl-memory-bias $dataset $rate 1"; done
            echo "erc-$dataset-concat-context-mpnet-lr2e-5 erc concat-context $dataset 2e-5 1"
        done ;;
    seeds)
        for dataset in meld emorynlp; do for seed in ${SEEDS:-2 3}; do for model in dialogxl-memory-bias concat-context; do
            echo "erc-$dataset-$model-mpnet-lr$lr erc $model $dataset $lr $seed"; done; done; done ;;
    paper-attention|memory-grad)
        model=dialogxl seeds=${PAPER_SEEDS:-1 2 3}; [[ $plan == memory-grad ]] && model=dialogxl-memory-grad seeds="1 2 3"
        for seed in $seeds; do for dataset in meld emorynlp; do echo "erc-$dataset-$model-mpnet-lr$lr erc $model $dataset $lr $seed"; done; done ;;
    baselines)
        for seed in 2 3; do echo "erc-meld-concat-context-mpnet-lr$lr erc concat-context meld $lr $seed"; done
        for dataset in meld emorynlp; do echo "erc-$dataset-segment-recurrence-mpnet-lr$lr erc segment-recurrence $dataset $lr 1"; done ;;
    dailydialog|dailydialog-rest)
        epochs="$ACCELERATE_MIXED_PRECISION train.epochs=${DD_EPOCHS:-2}"
        if [[ $plan == dailydialog ]]; then
            for seed in 1 2 3; do
                echo "erc-dailydialog-dialogxl-memory-bias-mpnet-lr$lr erc dialogxl-memory-bias dailydialog $lr $seed $epochs"; done
            continue
        fi
        concat="erc-dailydialog-concat-context-mpnet-lr$lr erc concat-context dailydialog $lr"
        echo "erc-dailydialog-segment-recurrence-mpnet-lr$lr erc segment-recurrence dailydialog $lr 1 $epochs"
        echo "$concat 1 $epochs"
        for model in dialogxl dialogxl-memory-grad; do for seed in 1 2 3; do
            echo "erc-dailydialog-$model-mpnet-lr$lr erc $model dailydialog $lr $seed $epochs"; done; done
        for seed in 2 3; do echo "$concat $seed $epochs"; done ;;
    selection|selection-plus)
        dataset=mutual; [[ $plan == selection-plus ]] && dataset=mutual-plus
        for seed in 1 2 3; do for model in plain-encoder mdfn; do
            echo "response-selection-$dataset-$model-mpnet-lr$slr response-selection $model $dataset $slr $seed"; done; done ;;
    selection-ablations)
        for model in mdfn-ua-only mdfn-sa-only mdfn-maxpool mdfn-meanpool mdfn-linear-fusion; do
            echo "response-selection-mutual-$model-mpnet-lr$slr response-selection $model mutual $slr 1"; done ;;
    submission|speed) ;;  # after the runs / before them, below
    acts-frozen|acts-vectors)
        for dataset in ${ACT_DATASETS:-swda}; do for seed in 1 2 3; do
            for model in lc-attention-frozen-mpnet lstm-attention-frozen-mpnet lstm-blstm-frozen-mpnet frozen-mpnet-utterance; do
                echo "dialogue-act-$dataset-$model dialogue-act $model $dataset recipe $seed no"
                if [[ $plan == acts-vectors ]]; then break 3; fi
            done; done; done ;;
    *) echo "unknown plan $plan" >&2; exit 2 ;;
    esac; done
}

one() {
    local experiment=$1 task=$2 model=$3 dataset=$4 lr=$5 seed=$6 precision=${7:-$ACCELERATE_MIXED_PRECISION}
    local out=$RUNS/$experiment/seed$seed resume=() settings=(--set backbone=all-mpnet-base-v2 --set train.lr="$lr")
    [[ $lr == recipe ]] && settings=()
    for setting in "${@:8}"; do settings+=(--set "$setting"); done  # the run's own settings, after the rate
    if [[ -f $out/result.json ]] && grep -q '"stopped_early": false' "$out/result.json"; then return; fi
    local left=$(( DEADLINE_AT - $(date +%s) ))
    if (( left < 60 )); then echo "$experiment seed $seed: not started, ${left}s left"; return; fi
    [[ -d $out/last ]] && resume=(--resume)
    mkdir -p "$out"
    ACCELERATE_MIXED_PRECISION=$precision python3 -m turnformer.cli train --task "$task" --model "$model" --dataset "$dataset" \
        --seed "$seed" --out "$out" "${resume[@]}" "${settings[@]}" --time-budget "$left" ${EXTRA:-} \
        >> "$RUNS/$experiment/seed$seed.log" 2>&1
    echo "$experiment seed $seed: exit $? at $(date +%T)"
    # runs still training change their files while they are read: the archive still holds what each had then
    flock "$RUNS/.archive.lock" sh -c 'tar -czf "$1.part" --warning=no-file-changed --exclude=last --exclude=best --exclude="*.tmp" --exclude="*.old" -C "$2" .;
        mv "$1.part" "$1"' _ "$ARCHIVE" "$RUNS"
}
if [[ -n ${LIST:-} ]]; then runs; exit; fi
export -f one
mkdir -p "$RUNS"
if [[ " ${plans[*]} " == *" speed "* ]]; then
    for part in training encoder; do
        python3 benchmarks/erc_one_pass_speed.py $part --backbone all-mpnet-base-v2 --device cuda --skip-recurrent \
            --results-dir "$RUNS" >> "$RUNS/speed.log" 2>&1; echo "speed $part: exit $?"
    done
fi
runs | xargs -P "${WORKERS:-8}" -L 1 bash -c 'one "$@"' _
if [[ " ${plans[*]} " == *" submission "* ]]; then
    # the MDFN seed best on the held-out training items (not on dev, the reported set), among those with a checkpoint
    best=$(python3 - "$RUNS/response-selection-mutual-mdfn-mpnet-lr$slr" <<'PY'
import json, sys
from pathlib import Path
runs = [(json.loads((r / "result.json").read_text()).get("validation_at_best"), str(r)) for r in Path(sys.argv[1]).glob("seed*")
        if (r / "result.json").is_file() and (r / "best").is_dir()]
runs = [run for run in runs if run[0] is not None]
print(max(runs)[1] if runs else "")
PY
)
    if [[ -n $best ]]; then
        python3 -m turnformer.cli predict --checkpoint "$best" --input mutual:test --out "$RUNS/mutual-test-ranking.jsonl" \
            --submission "${SUBMISSION:-$RUNS/mutual-test-submission.txt}" && echo "submission from $best"
    else
        echo "submission: no finished MDFN run in $RUNS"
    fi
fi
