"""The learning modules' structure: imports run one way (no cycle, not even one hidden in a
function), and no function is longer than 80 lines."""

import ast
from pathlib import Path

import engine_rl.algos

ALGOS = Path(engine_rl.algos.__file__).parent


def _modules():
    return {path.stem: ast.parse(path.read_text(encoding="utf-8")) for path in sorted(ALGOS.glob("*.py"))}


def _algos_imports(tree):
    """The engine_rl.algos modules a module imports, wherever the import statement stands."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("engine_rl.algos."):
            names.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            names.update(a.name.split(".")[2] for a in node.names if a.name.startswith("engine_rl.algos."))
    return names


def test_algos_imports_have_no_cycle():
    graph = {name: _algos_imports(tree) for name, tree in _modules().items() if name != "__init__"}
    done, path = set(), []

    def visit(name):
        if name in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(name):] + [name]))
        if name in done:
            return
        path.append(name)
        for dep in sorted(graph.get(name, ())):
            visit(dep)
        path.pop()
        done.add(name)

    for name in graph:
        visit(name)
    assert graph["policy_factory"] >= {"policies", "multi_discrete"}
    assert "policy_factory" not in graph["policies"] | graph["multi_discrete"]


def test_no_function_over_80_lines():
    long = [
        f"{name}.py:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for name, tree in _modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > 80
    ]
    assert long == []
