"""Helpers the command-line tools share: common options, tables, and text safe for a terminal."""


def printable(text: object) -> str:
    """``text`` safe to show in a terminal or a picture: every character Python would not print (control
    characters such as ESC and newline, bidirectional overrides, ...) as its escape (``\\x1b``, ``\\n``,
    ``\\u202e``), the rest, other scripts included, as is. Names and reasons read from a model
    file go through it, so a hostile file cannot send the terminal control sequences."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def printable_lines(text: object) -> str:
    """``printable`` of each line of ``text``, kept on lines of their own (an error message's lines)."""
    return "\n".join(map(printable, str(text).split("\n")))


def add_version(parser) -> None:
    """Gives a command-line tool's parser ``--version`` (Delite's version)."""
    from lite import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s (delite) {__version__}")


def add_model(parser) -> None:
    """Gives a tool's parser its model, positional or ``--model`` (the tools take either)."""
    parser.add_argument("model", nargs="?", help=".lite, .onnx or zoo:NAME (positional, or --model)")
    parser.add_argument("--model", dest="model_option", metavar="MODEL", help="the same, as an option")


def chosen_model(parser, args, required: bool = True) -> None:
    """Sets ``args.model`` from the positional or ``--model`` (refused when both, or neither while required)."""
    if args.model and args.model_option:
        parser.error("give the model once: positional or --model")
    args.model = args.model or args.model_option
    if required and not args.model:
        parser.error("a model is required")


def add_placement(parser) -> None:
    """Gives a tool's parser the measured-placement options (``lite.Context``'s placement ones)."""
    parser.add_argument("--placement", choices=("priority", "measured"), default="priority",
                        help="priority: delegates take what they support in --delegate order; measured: every "
                             "partition a delegate claims is timed against native (and the other delegates) at "
                             "build and runs where it is fastest (default: %(default)s)")
    parser.add_argument("--placement-budget", type=float, default=60.0, metavar="SECONDS",
                        help="most seconds measured placement spends timing (default: %(default)s)")
    parser.add_argument("--placement-cache", default="default", metavar="DIR",
                        help="where measured times are cached: a folder, 'default' (~/.cache/delite/placement) "
                             "or 'off' (default: %(default)s)")


def placement_options(args) -> dict:
    """The ``lite.Context`` keyword arguments of ``add_placement``'s options."""
    return {"placement": args.placement, "placement_budget": args.placement_budget,
            "placement_cache": args.placement_cache}


def placement_table(rows) -> str:
    """Measured placement's candidates (``Model.placement_report()``) as an aligned text table."""
    def ms(seconds):
        return "-" if seconds is None else f"{seconds * 1e3:.3f}"

    header = ("delegate", "role", "nodes", "first .. last node", "delegate ms", "native ms", "decision")
    probes = [r for r in rows if r.role == "probe" and r.decision != "chosen"]
    rows = [r for r in rows if r not in probes]
    cells = [header] + [tuple(map(printable, (
        r.delegate, r.role, str(len(r.nodes)), f"{r.nodes[0]} .. {r.nodes[-1]}"[:48], ms(r.seconds),
        ms(r.native_seconds), r.decision + (f" ({r.reason})" if r.reason else "")
        + (" [cache]" if r.source == "cache" else "")))) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(6)]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(6)) + "  " + c[6] for c in cells]
    lines.insert(1, "-" * (sum(widths) + 12 + len(header[6])))
    if probes:
        faster = sum(r.seconds is not None and r.seconds < r.native_seconds for r in probes)
        lines.append(f"(and {len(probes)} one-op probes of losing partitions, not chosen: {faster} measured "
                     "faster than native, within the noise margin or beside a better choice; "
                     "Model.placement_report() lists them)")
    return "measured placement:\n" + "\n".join(lines)
