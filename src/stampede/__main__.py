"""`python -m stampede`: the same command line as the `stampede` script."""

from ._console import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
