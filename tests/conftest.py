"""Suite-wide settings: one torch thread (the CI box has 2 shared cores) and quiet gymnasium;
and the seed offset (``--seed-offset N`` or ``ENGINE_RL_TEST_SEED_OFFSET=N``; the option wins;
default 0), which shifts every seed the tests give to runs (``support.seeds``)."""

import os

import pytest
import torch

from support.seeds import ENV, parse_offset

torch.set_num_threads(1)


def pytest_addoption(parser):
    parser.addoption(
        "--seed-offset", default=None, metavar="N",
        help=f"add N (>= 0) to every seed the tests give to runs (default: ${ENV}, else 0)",
    )


def pytest_configure(config):
    value, where = config.getoption("--seed-offset"), "--seed-offset"
    if value is None:
        value, where = os.environ.get(ENV) or "0", ENV
    try:
        offset = parse_offset(value, where=where)
    except ValueError as err:
        raise pytest.UsageError(str(err)) from None
    os.environ[ENV] = str(offset)  # support.seeds reads it here and in the processes the tests start


def pytest_report_header(config):
    return f"seed offset: {os.environ[ENV]} (--seed-offset, ${ENV})"
