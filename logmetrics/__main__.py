"""``python -m logmetrics`` runs the command line."""

from logmetrics.cli.main import main

if __name__ == "__main__":
    main()
