"""Results: every seed's headline experiment as a named recipe, run against LoRA, plain and full fine-tuning at the
same budget, several seeds each, recorded as CSV rows and a generated report (`interlayer results`)."""

from .core import COLUMNS, SCALES, Recipe, RunResult, read_csvs, run_recipes

__all__ = ["COLUMNS", "SCALES", "Recipe", "RunResult", "read_csvs", "run_recipes", "recipes"]


def recipes() -> dict:
    """Every recipe by name, in the order they run."""
    from . import registry

    return {recipe.name: recipe for recipe in registry.RECIPES}
