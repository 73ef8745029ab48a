"""The recipes `interlayer results` knows, in the order they run."""

from . import sentinel_sweep

RECIPES = []
RECIPES += sentinel_sweep.RECIPES  # issue 21 item 3: sentinel head pruning, share of heads against perplexity and speed
