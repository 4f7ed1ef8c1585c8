"""The README's code example runs as written (with a smaller frame budget)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_composing_example_runs(capsys):
    text = README.read_text()
    code = re.search(r"## Composing a trainer\n\n```python\n(.*?)```", text, re.S).group(1)
    assert "total_frames=50_000" in code
    namespace: dict = {}
    exec(compile(code.replace("total_frames=50_000", "total_frames=2_048"), str(README), "exec"), namespace)
    trainer = namespace["trainer"]
    assert trainer.state.frames == 2_048
    assert trainer.state.optim_steps == 128 * 5  # batches 4..8 of 256 frames learn (learning_starts=1000)
    assert float(capsys.readouterr().out.strip()) == trainer.state.metrics["eval_return_mean"]


def test_readme_names_the_two_commands():
    text = README.read_text()
    assert "bash .ci/install && engine-rl train dqn-cartpole --seed 0" in text
    assert "bash .ci/run" in text
