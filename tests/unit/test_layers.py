"""shared/ keeps its roles apart: the domain imports neither the adapters nor the application, the adapters
do not import the application, and nothing in shared imports a service or kforge's entry points."""
import ast
from pathlib import Path

import pytest

import shared

SHARED = Path(shared.__file__).parent
FORBIDDEN = {"domain": ("shared.adapters", "shared.application", "services", "kforge"),
             "adapters": ("shared.application", "services", "kforge"),
             "application": ("services", "kforge")}
MODULES = [(role, path) for role in FORBIDDEN for path in sorted((SHARED / role).rglob("*.py"))]


def imported(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


@pytest.mark.parametrize("role, path", MODULES, ids=lambda x: x if isinstance(x, str) else x.relative_to(SHARED).as_posix())
def test_imports_run_one_way(role, path):
    wrong = sorted(name for name in imported(path) if name.startswith(FORBIDDEN[role]))
    assert not wrong, f"{path.relative_to(SHARED)} ({role}) imports {wrong}"


def test_every_module_of_shared_has_its_role():
    loose = [p.name for p in SHARED.glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"modules outside domain/adapters/application: {loose}"


REPORTS = sorted((SHARED / "domain" / "reports").glob("*.py"))
FILE_MODULES = ("os", "pathlib", "shutil", "tempfile")


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: p.name)
def test_reports_are_pure_folds_that_touch_no_file(path):
    """shared.application.report_queries and kforge.job_files read the store and write files around them."""
    assert not [name for name in imported(path) if name.startswith(FILE_MODULES)]
    assert "open(" not in path.read_text() and ".write_text(" not in path.read_text()
