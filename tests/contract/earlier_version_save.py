"""Run by tests/contract/test_earlier_checkpoints.py under another version of interlayer (`PYTHONPATH=<its
checkout>:<its tests>`): converts the stock checkpoint of every conformance case of that version into every zoo class of
the case's config (each Auto class that takes the case's active options), with those options, and saves it into
`<out>/<class name>` with the batch it was run on and its outputs (`reference.pt`).

    python earlier_version_save.py OUT_DIR TESTS_DIR
"""

import importlib
import inspect
import pathlib
import sys

import torch

from interlayer.testing import ConformanceSuite
from interlayer.zoo import ZOO

# Python put this script's folder first on the path: this version's conformance files, which would shadow the earlier
# version's (TESTS_DIR) and import fixtures the earlier version does not have
HERE = pathlib.Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if pathlib.Path(p or ".").resolve() != HERE]


def cases(tests_dir: pathlib.Path):
    """Every conformance case of the test files in `tests_dir` (flat, or in its group folders), one per model class."""
    seen = {}
    for path in sorted(tests_dir.rglob("test_*conformance*.py")):
        if str(path.parent) not in sys.path:
            sys.path.insert(0, str(path.parent))
        module = importlib.import_module(path.stem)
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, ConformanceSuite) and value is not ConformanceSuite:
                case = value().make_case()
                seen.setdefault(case.model_class, case)
    return list(seen.values())


def main(out_dir: str, tests_dir: str) -> None:
    out, tests = pathlib.Path(out_dir), pathlib.Path(tests_dir)
    for case in cases(tests):
        stock_folder = out / "stock" / case.model_class.__name__
        torch.manual_seed(0)
        case.build_stock(str(stock_folder))
        batch = case.make_batch()
        for entry in ZOO:
            if entry.config_class is not case.model_class.config_class or (out / entry.model_class.__name__).exists():
                continue
            torch.manual_seed(0)
            try:
                model = entry.model_class.from_pretrained(str(stock_folder), **case.active_options).eval()
            except ValueError as error:  # an option of the case's task class that another task refuses
                print(f"{entry.model_class.__name__}: not saved: {error}")
                continue
            folder = out / entry.model_class.__name__
            model.save_pretrained(str(folder))
            with torch.no_grad():
                output = model(**batch)[0]
            torch.save({"batch": batch, "output": output, "class": entry.model_class.__name__}, folder / "reference.pt")


if __name__ == "__main__":
    main(*sys.argv[1:])
