"""The model fixtures' generators (models.fixtures) and the model tools, run from the
repository root as `python3 -m models.<...>`."""
