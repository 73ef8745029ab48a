"""The transformers version the zoo's model files need, checked before any of them imports from transformers.

Every configuration, modeling and helper file of this folder imports this module first, and `save_pretrained` ships
it with them (a relative import from the same folder). Remote code loaded under transformers 4 then stops here with
an error naming both versions, not at the first import that transformers 4 lacks (`transformers.conversion_mapping`,
`transformers.initialization`, a v5 config class...).
"""

import transformers

MIN_TRANSFORMERS = 5
# the releases the test suite passed with (setup.cfg allows up to the last; constraints.txt pins the one CI runs)
TESTED_TRANSFORMERS = ("5.23", "5.24")


def check_transformers_version(version: str) -> None:
    """Raise an ImportError naming `version` and the required one if `version` is older than transformers 5."""
    if int(version.split(".")[0]) < MIN_TRANSFORMERS:
        raise ImportError(
            f"interlayer models need transformers>={MIN_TRANSFORMERS} (strict dataclass configs, the v5 attention and "
            f"cache interfaces); this environment has transformers {version}. "
            f"Upgrade with `pip install 'transformers>={MIN_TRANSFORMERS},<6'`."
        )


check_transformers_version(transformers.__version__)
