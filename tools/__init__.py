


def add_version(parser) -> None:
    """Gives a command-line tool's parser ``--version`` (Delite's version)."""
    from lite import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s (delite) {__version__}")
