import importlib.util
import os

import pytest

# Keep torch from fighting the event loop and other tests for the machine's two cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")


# The type check (test_types.py) takes a minute or two from a cold cache: start it as soon as
# the tests are collected, so it runs on the second core while the others run.
def pytest_collection_finish(session: pytest.Session) -> None:
    if (any(item.path.name == "test_types.py" for item in session.items)
            and importlib.util.find_spec("mypy") is not None):
        import typecheck

        session.config.stash[typecheck.RUNNING] = typecheck.start()


def pytest_unconfigure(config: pytest.Config) -> None:
    import typecheck

    mypy = config.stash.get(typecheck.RUNNING, None)
    if mypy is not None and mypy.poll() is None:  # the run stopped before the type check
        mypy.kill()
        mypy.communicate()
