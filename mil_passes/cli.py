"""The ``mil-passes`` command."""

from __future__ import annotations

import argparse
import sys

from ._version import __version__


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    print(run_demo(args.out, layers=args.layers, channels=args.channels))
    return 0


def _list(args: argparse.Namespace) -> int:
    from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

    from .pipeline import PASS_NAMES

    for name in PASS_NAMES:
        doc = (type(PASS_REGISTRY[name]).__doc__ or "").strip().splitlines()
        print(f"{name:42s} {doc[0] if doc else ''}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mil-passes", description=__doc__)
    parser.add_argument("--version", action="version", version=f"mil-passes {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="fix the built-in streaming-cache example and show what changed")
    demo.add_argument("--out", default="demo_out", help="folder for the packages (default: demo_out)")
    demo.add_argument("--layers", type=int, default=24)
    demo.add_argument("--channels", type=int, default=1024)
    demo.set_defaults(run=_demo)
    listing = commands.add_parser("list", help="the passes, in pipeline order")
    listing.set_defaults(run=_list)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
