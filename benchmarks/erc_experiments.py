"""The benchmark runner under its first name, which docs and results files cite: `run.py` with the same arguments
(``python benchmarks/run.py --help`` lists the plans)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import main  # noqa: E402

if __name__ == "__main__":
    main()
