"""The recipes `interlayer results` knows, in the order they run."""

from . import classification, lm

RECIPES = [*lm.RECIPES, *classification.RECIPES]
