"""The notebooks in ``notebooks/``: each runs top to bottom in a real Jupyter kernel at a small
budget, is committed without outputs, and uses only the public API.

Budgets reach a notebook through environment variables read in its first code cell
(``ENGINE_RL_NB_FRAMES``, ``ENGINE_RL_NB_SEED``, ``ENGINE_RL_NB_OUT``, ``ENGINE_RL_NB_PROGRESS``);
the kernel inherits them from this process.
"""

from __future__ import annotations

import ast
import importlib
import json
import time
from pathlib import Path

import pytest

from support.seeds import seed_arg

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
EXPECTED = ["01_quickstart_dqn.ipynb", "02_custom_handlers.ipynb", "03_ppo_checkpoints_dashboard.ipynb"]

#: frames each notebook trains for here (their defaults take minutes)
TEST_FRAMES = {"01_quickstart_dqn": 2048, "02_custom_handlers": 2048, "03_ppo_checkpoints_dashboard": 4096,
               "04_distributed": 2048}
DEFAULT_TEST_FRAMES = 2048
#: the longest a notebook may take here, kernel start included (a hang fails instead of stalling CI)
NOTEBOOK_TIMEOUT_S = 240
#: packages whose names must be public: in the module's ``__all__`` when it has one
OUR_PACKAGES = ("engine_rl", "handlers")

WIDGET = "application/vnd.jupyter.widget-view+json"


def _read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _code_cells(nb: dict) -> list[str]:
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells]


def _ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


def test_the_notebooks_exist():
    assert [p.name for p in NOTEBOOKS][: len(EXPECTED)] == EXPECTED


# -- committed form ------------------------------------------------------------------------------
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_committed_without_outputs(path):
    nb = _read(path)
    dirty = [
        i for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count") is not None)
    ]
    assert not dirty, (
        f"{path.name}: code cells {dirty} hold outputs or execution counts; clear them before committing "
        "(Jupyter: Edit > Clear All Outputs, or `jupyter nbconvert --clear-output --inplace`)"
    )
    assert "widgets" not in nb.get("metadata", {}), f"{path.name}: saved widget state in the metadata; clear it"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_budgets_come_from_the_environment(path):
    first = _code_cells(_read(path))[0]
    assert "ENGINE_RL_NB_FRAMES" in first, f"{path.name}: its first code cell must read ENGINE_RL_NB_FRAMES"


def private_names(source: str) -> list[str]:
    """Private names a piece of code reaches for: ``x._y``, ``getattr(x, "_y")``, ``from m import _y``,
    ``import m._y``, and names of this project's modules missing from their ``__all__``.

    Examples:
        >>> private_names("import a._b\\nfrom c import _d\\nx._e\\ngetattr(x, '_f')\\nx.__class__")
        ['import a._b', 'from c import _d', '._e', "getattr(..., '_f')"]
        >>> private_names("from handlers import ReplaySampler")
        []
        >>> private_names("from engine_rl.engine import math")
        ['from engine_rl.engine import math (not in its __all__)']
    """
    found = []

    def private(name: str) -> bool:
        return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and private(node.attr):
            found.append(f".{node.attr}")
        elif isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if any(private(p) for p in a.name.split("."))]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            for alias in node.names:
                if private(alias.name) or any(private(p) for p in module.split(".")):
                    found.append(f"from {module} import {alias.name}")
                elif module.split(".")[0] in OUR_PACKAGES:
                    public = getattr(importlib.import_module(module), "__all__", None)
                    if public is not None and alias.name not in public:
                        found.append(f"from {module} import {alias.name} (not in its __all__)")
        elif (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr")
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str) and private(node.args[1].value)
        ):
            found.append(f"{node.func.id}(..., {node.args[1].value!r})")
    return found


def python_source(cell: str) -> str:
    """A code cell as plain Python: a ``%%writefile`` cell's body; other IPython magic and shell
    lines (``%...``, ``!...``) blanked.

    Examples:
        >>> python_source("%%writefile {OUT}/w.py\\nimport os")
        '\\nimport os'
        >>> python_source("%timeit f()\\nx = 1")
        '\\nx = 1'
    """
    lines = cell.split("\n")
    if lines and lines[0].startswith("%%writefile"):
        lines[0] = ""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in lines)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_uses_only_the_public_api(path):
    for i, source in enumerate(_code_cells(_read(path))):
        names = private_names(python_source(source))
        assert not names, f"{path.name}: code cell {i} uses private names: {names}"


# -- execution ----------------------------------------------------------------------------------
def execute(nb, cwd: Path) -> None:
    """Run every cell of ``nb`` in a fresh ``python3`` kernel working in ``cwd`` (outputs land in ``nb``)."""
    import nbclient

    client = nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=NOTEBOOK_TIMEOUT_S, startup_timeout=120,
        resources={"metadata": {"path": str(cwd)}},
    )
    client.execute()  # raises CellExecutionError naming the cell and its traceback


def test_a_cell_error_fails_the_run(tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="the [notebooks] extra is not installed (.ci/install installs it)")
    nbclient = pytest.importorskip("nbclient", reason="the [notebooks] extra is not installed (.ci/install installs it)")
    pytest.importorskip("ipykernel", reason="the [notebooks] extra is not installed (.ci/install installs it)")
    v4 = nbformat.v4
    nb = v4.new_notebook(cells=[v4.new_code_cell("x = 1"), v4.new_code_cell("raise ValueError('broken cell')"),
                                v4.new_code_cell("y = 2")])
    with pytest.raises(nbclient.exceptions.CellExecutionError, match="broken cell"):
        execute(nb, tmp_path)
    assert nb.cells[2].get("execution_count") is None  # it stopped at the failing cell


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_runs_top_to_bottom(path, tmp_path, monkeypatch):
    """Execute every cell in a fresh ``python3`` kernel; any cell error fails with its traceback."""
    nbformat = pytest.importorskip("nbformat", reason="the [notebooks] extra is not installed (.ci/install installs it)")
    pytest.importorskip("nbclient", reason="the [notebooks] extra is not installed (.ci/install installs it)")
    pytest.importorskip("ipykernel", reason="the [notebooks] extra is not installed (.ci/install installs it)")

    monkeypatch.setenv("ENGINE_RL_NB_FRAMES", str(TEST_FRAMES.get(path.stem, DEFAULT_TEST_FRAMES)))
    monkeypatch.setenv("ENGINE_RL_NB_SEED", seed_arg(0))  # 0 plus the suite's seed offset
    monkeypatch.setenv("ENGINE_RL_NB_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("ENGINE_RL_NB_PROGRESS", "1")  # cheap, and shows the bars render
    nb = nbformat.read(path, as_version=4)
    start = time.monotonic()
    execute(nb, tmp_path)
    wall = time.monotonic() - start
    assert wall < NOTEBOOK_TIMEOUT_S

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    if any("FramesProgressBar" in src for src in _code_cells(_read(path))):
        # tqdm.auto: an ipywidgets bar when ipywidgets is installed, else text on stderr
        bars = [o for o in outputs if WIDGET in o.get("data", {})
                or (o.output_type == "stream" and "frame" in o.get("text", ""))]
        assert bars, f"{path.name}: no progress bar was rendered"
