"""Fenced code blocks of the project's markdown files, for the tests that run them (`test_readme.py`,
`test_docs.py`).

A python block that cannot run offline or in one process says so on its first line with the marker
`# not-run: REASON`; the tests skip it and report the reason, and run every other block."""

import re

NOT_RUN = "# not-run:"


def code_blocks(text: str, languages=("python", "bash")) -> list[tuple[str, int, str]]:
    """(language, line number, code) of every fenced block in one of `languages`, in order."""
    pattern = rf"^```({'|'.join(map(re.escape, languages))})\n(.*?)^```"
    return [
        (m.group(1), text.count("\n", 0, m.start()) + 1, m.group(2)) for m in re.finditer(pattern, text, re.S | re.M)
    ]


def not_run_reason(code: str) -> str | None:
    """The reason given by a block's `# not-run: REASON` first line, or None."""
    first = code.lstrip().splitlines()[0] if code.strip() else ""
    return first[len(NOT_RUN) :].strip() or "marked not-run" if first.startswith(NOT_RUN) else None
