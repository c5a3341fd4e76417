import os

import pytest
import tiers

# Keep torch from fighting the event loop and other tests for the machine's two cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")


@pytest.hookimpl(tryfirst=True)  # before -m selects by the tiers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test gets its tier (fast, ui, e2e, browser, slow: tests/tiers.py). Tests marked `slow`
    (learning runs and sweeps of minutes, or the same proof as a default test at a higher
    price) are opt-in: a plain run skips them, saying how to opt in; with any -m expression
    the expression decides."""
    tiers.classify(items)
    if config.getoption("markexpr"):
        return
    opt_in = pytest.mark.skip(reason="slow: opt in with -m slow")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(opt_in)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[tiers.PROCESS_GUARD] = tiers.ProcessGuard()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    """A fast-tier test (its fixtures included) that starts a process fails, naming it."""
    guard = item.config.stash[tiers.PROCESS_GUARD]
    with guard.watch(item):
        result = yield
    guard.check()
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    guard = item.config.stash[tiers.PROCESS_GUARD]
    with guard.watch(item):
        result = yield
    guard.check()
    return result


# The real-format fixture (tests/real_format.py): Qwen3's tokenizer and a tiny random Qwen3,
# built offline once per test session.
@pytest.fixture(autouse=True)
def signal_handlers_kept():
    """Each test leaves the process's signal handlers as it found them: a command run in
    this process (its headless run quiets signals once it stopped, for a process that is
    about to end) must not change what the next test finds."""
    from tinker_tui.app.interrupts import handlers_kept

    with handlers_kept():
        yield


@pytest.fixture(scope="session")
def qwen3_tokenizer_folder(tmp_path_factory: pytest.TempPathFactory):
    from real_format import write_qwen3_tokenizer

    return write_qwen3_tokenizer(tmp_path_factory.mktemp("qwen3-tokenizer"))


@pytest.fixture(scope="session")
def qwen3_folder(tmp_path_factory: pytest.TempPathFactory):
    from real_format import write_tiny_qwen3

    return write_tiny_qwen3(tmp_path_factory.mktemp("qwen3-tiny"))
