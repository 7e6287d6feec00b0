"""`python -m kforge` runs the CLI, for environments without the console script."""
from kforge.cli import app

app(prog_name="kforge")
