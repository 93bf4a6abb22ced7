"""Benchmark loaders, the generic JSONL format, statistics and downloads.

>>> from turnformer.data import load_split
>>> ds = load_split("dailydialog", "train")          # doctest: +SKIP
>>> len(ds), ds.num_utterances, ds.report.counts      # doctest: +SKIP
(11118, 87170, Counter({'merged_split_utterance': 1}))

Data is looked up in ``--data-dir`` / ``data_dir=``, else ``$TURNFORMER_DATA``, else
``~/.cache/turnformer/data`` (see `turnformer.data.locate`).
"""

from turnformer.data.jsonl import DialogueList, read_jsonl, write_jsonl
from turnformer.data.locate import resolve_data_dir
from turnformer.data.registry import (
    DATASETS,
    DatasetInfo,
    available_datasets,
    dataset_dir,
    get_info,
    load_split,
    names_benchmark,
    normalize_split,
    parse_split_spec,
)
from turnformer.data.report import DataNotFoundError, DatasetSplit, DownloadError, LoadReport
from turnformer.data.stats import dataset_stats, split_stats

__all__ = [
    "DATASETS",
    "DataNotFoundError",
    "DatasetInfo",
    "DatasetSplit",
    "DialogueList",
    "DownloadError",
    "LoadReport",
    "available_datasets",
    "dataset_dir",
    "dataset_stats",
    "get_info",
    "load_split",
    "names_benchmark",
    "normalize_split",
    "parse_split_spec",
    "read_jsonl",
    "resolve_data_dir",
    "split_stats",
    "write_jsonl",
]
