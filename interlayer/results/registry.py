"""The recipes `interlayer results` knows, in the order they run."""

from . import classification, lm, sentinel_sweep, translation

RECIPES = [*lm.RECIPES, *classification.RECIPES, translation.RECIPE, *sentinel_sweep.RECIPES]
