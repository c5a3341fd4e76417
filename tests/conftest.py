import os

# Keep torch from fighting the event loop and other tests for the machine's two cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")
