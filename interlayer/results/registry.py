"""The recipes `interlayer results` knows, in the order they run."""

RECIPES = []
