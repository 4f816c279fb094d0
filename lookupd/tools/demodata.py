"""`lookupd demo-data`: the sample log dir (lookupd.tools.demo), or with --tiered or --tls the demo built on it,
which serves it. Apart from demo.py, which the two demos build on: the sample's writer knows no demo."""

from __future__ import annotations

from .demo import write_sample


def run(args) -> int:
    if args.tiered:
        from ..log.remote.extra import require

        require()  # the demo uploads with the tiered extra's packages: one line naming it without them
        from .tiereddemo import run as tiered
        return tiered(args)
    if args.tls:
        from .tlsdemo import run as tls
        return tls(args)
    write_sample(args.dir, args.records, args.seed)
    return 0
