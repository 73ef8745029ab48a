"""The recipes `interlayer results` knows, in the order they run."""

from . import classification, lm, translation

RECIPES = [*lm.RECIPES, *classification.RECIPES, translation.RECIPE]
