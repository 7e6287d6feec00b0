"""shared.domain.reports holds pure folds over events: no module in it reads the store, sends on the bus or
touches the filesystem (shared.application.report_queries and kforge.job_files do that around them)."""
import ast
from pathlib import Path

import pytest

import shared.domain.reports

IO_MODULES = ("os", "pathlib", "shutil", "tempfile", "shared.adapters", "shared.application")
MODULES = sorted(Path(shared.domain.reports.__file__).parent.glob("*.py"))


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_report_modules_do_no_io(path):
    assert not [name for name in _imports(path) if name.startswith(IO_MODULES)]
    assert "open(" not in path.read_text() and ".write_text(" not in path.read_text()
