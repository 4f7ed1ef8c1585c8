"""Suite-wide settings: one torch thread (the CI box has 2 shared cores) and quiet gymnasium.

The ``build_with_threads`` fixture builds a recipe while torch runs a given number of threads
(recipes read it to pick their worker-thread defaults), then restores the thread count.
"""

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture
def build_with_threads():
    from engine_rl.recipes import get_recipe
    from engine_rl.recipes.runner import make_config

    def build(name, overrides, threads):
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return get_recipe(name).build(make_config(name, overrides))
        finally:
            torch.set_num_threads(before)

    return build
