"""Issue 8 item 10: the commands in the README and docs name files inside the repository."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
        *sorted((REPO / "voxflow" / "models").glob("*/README.md"))]  # each family's own page


def test_item10_docs_never_send_users_outside_the_repository():
    for doc in DOCS:
        assert "../shared" not in doc.read_text(), doc.name


def test_item10_text_files_named_with_dash_f_exist():
    seen = 0
    for doc in DOCS:
        for path in re.findall(r"(?:^|\s)-f\s+([\w./-]+\.txt)\b", doc.read_text()):
            seen += 1
            assert (REPO / path).is_file(), f"{doc.name}: {path}"
    assert seen >= 2  # README and the Kokoro family's README run `speak -f benchmarks/data/...`
