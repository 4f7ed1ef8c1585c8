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


def test_handler_example_runs(capsys):
    """The "Writing your own handler" example: the EMA maths alone, then the handler in a run."""
    text = README.read_text()
    code = re.search(r"## Writing your own handler\n.*?```python\n(.*?)```", text, re.S).group(1)
    losses: list[float] = []

    def spy(trainer):  # every optim step's loss, read where the handler reads it
        from engine_rl import RLEvents

        trainer.add_event_handler(
            RLEvents.OPTIM_STEP_DONE, lambda engine: losses.append(engine.state.losses["loss"].item())
        )

    assert code.count("trainer.run(") == 1
    namespace: dict = {"spy": spy}
    exec(compile(code.replace("trainer.run(", "spy(trainer)\ntrainer.run("), str(README), "exec"), namespace)

    ema = namespace["EMA"](0.5)
    assert [ema.update(x) for x in (4.0, 2.0, 6.0)] == [4.0, 3.0, 4.5]

    trainer, handler = namespace["trainer"], namespace["loss_ema"]
    assert trainer.state.optim_steps == 8 and len(losses) == 8
    assert handler.ema.count == 4  # every=2: steps 2, 4, 6, 8
    expected = losses[1]
    for x in losses[3::2]:
        expected = 0.5 * expected + 0.5 * x
    assert trainer.state.metrics["loss_ema"] == expected
    assert capsys.readouterr().out.split() == ["8", "4", str(expected)]


def test_readme_stays_short():
    assert len(README.read_text().splitlines()) <= 250
