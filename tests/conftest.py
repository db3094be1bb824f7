import os
import tempfile

# Keep the pattern-matrix cache of a test run out of the user's cache directory. Set before any
# test imports wordle, so every test in the session shares one freshly built cache.
os.environ.setdefault("WORDLE_GRPO_CACHE_DIR", tempfile.mkdtemp(prefix="wordle-grpo-test-cache-"))
