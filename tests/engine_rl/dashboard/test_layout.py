import math

from engine_rl.dashboard.layout import XLABEL, count_points, plot_rows, window_opts, window_title


def test_train_record_rows_skip_counters_and_non_numbers():
    record = {"kind": "train", "frames": 512, "optim_steps": 64, "iteration": 2, "time": 1.5, "loss": 0.25,
              "loss_actor": -1.0, "grad_norm": 3.0, "fps": 800.0, "utd": 0.125, "replay_size": 512,
              "train_return_mean": 20.0, "train_return_std": 4.0, "train_length_mean": 20.0, "note": "x",
              "flag": True, "lr/group 0": 1e-3}
    rows = plot_rows(record)
    assert rows[0] == ("train_return", 512.0, [16.0, 24.0, 20.0])
    assert [win for win, _, _ in rows[1:]] == ["loss", "loss_actor", "grad_norm", "fps", "utd", "replay_size",
                                               "train_length_mean", "lr_group_0"]
    assert all(x == 512.0 and len(ys) == 1 for _, x, ys in rows[1:])


def test_eval_band_defaults_and_non_finite_values():
    assert plot_rows({"frames": 10, "eval_return_mean": 5.0}) == [("eval_return", 10.0, [5.0, 5.0, 5.0, 5.0, 5.0])]
    assert plot_rows({"frames": 10, "eval_return_mean": math.nan, "loss": math.inf, "fps": 1.0}) == [
        ("fps", 10.0, [1.0])]
    assert plot_rows({"loss": 1.0}) == []  # no x
    assert plot_rows({"frames": 4, "eval_frames": 4, "eval_length_mean": 9.0}) == [("eval_length_mean", 4.0, [9.0])]


def test_window_opts_titles_and_fresh_dicts():
    a = window_opts("train_return")
    assert a["xlabel"] == XLABEL == "frames" and a["legend"] == ["mean - std", "mean ± std", "mean"]
    assert a["traceopts"]["plotly"]["mean ± std"]["fill"] == "tonexty"
    a["traceopts"]["plotly"]["mean ± std"]["fill"] = "none"
    assert window_opts("train_return")["traceopts"]["plotly"]["mean ± std"]["fill"] == "tonexty"
    assert window_title("fps") == "frames per second" and window_title("kl") == "kl"
    assert window_opts("kl") == {"title": "kl", "xlabel": "frames", "ylabel": "kl", "legend": ["kl"],
                                 "showlegend": False}


def test_count_points_over_train_and_eval_lines():
    lines = [{"kind": "train", "frames": 8 * i, "loss": 1.0 / i} for i in range(1, 6)]
    lines += [{"kind": "eval", "frames": 16, "eval_return_mean": 3.0, "eval_frames": 16}]
    assert count_points(lines) == {"loss": 5, "eval_return": 1}
