"""Building the packed output: pack contents, reproducible tars, energon metadata."""
