"""`sprawl-orch copies [list|drop]`: the persistent copies kept in the state directory.

A thin layer over copy_store. `list` shows every slot (the working directory it copies, the
bytes its last sync copied, when it was last released, whether a command holds it now);
`drop` deletes idle ones: named (`KEY/SLOT` as listed, or a key for all its slots), those of
the `-C` working directory (`--here`), or `--all`. A held copy is never dropped: it is named as
still in use and the exit status is 1. `drop --here` works under an invalid config too
(saying so, and which state directory it took).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import click

from sprawl_orch.cli.common import config_options, find_config, refuse
from sprawl_orch.config import CONFIG_NAME, Config, parse_config, read_config_text, read_toml
from sprawl_orch.config.state import state_dir
from sprawl_orch.copy.bounds import human
from sprawl_orch.copy.store import CopyInfo, CopyStore
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.terminal import safe


def _store(workdir: Path, config_path: Path | None) -> CopyStore:
    config = find_config(workdir, config_path)
    root = state_dir(config, os.environ) / "copies"
    return CopyStore(root, config.sandbox.copy_.budget_bytes)


def _store_despite(workdir: Path, config_path: Path | None, err: SprawlError) -> CopyStore:
    """For `drop --here` under an invalid config (issue 27: it refused exactly when a person
    most wants to clean up): the config's `[state]` table alone if that holds, else every
    default, says which it took on stderr. Safe to go on: --here picks copies by their
    working directory alone, whatever config made them."""
    path = config_path or workdir / CONFIG_NAME
    try:
        data = read_toml(read_config_text(path), path)
        state = data.get("state", {})
        config = parse_config({"state": state} if isinstance(state, dict) else {}, path)
        took = f"its [state] table ({path})" if state else "the default state directory"
    except SprawlError:
        config, took = Config(), "the default state directory"
    store = CopyStore(state_dir(config, os.environ) / "copies", 0)
    said = f"{err.code.value}: {err.subject}: {err.detail}"
    click.echo(f"sprawl-orch: the config is invalid ({safe(said)})", err=True)
    click.echo(
        f"sprawl-orch: dropping every copy of {safe(os.path.realpath(workdir))}, whatever config "
        f"made it, from {safe(str(store.root))} ({took})",
        err=True,
    )
    return store


def _as_dict(info: CopyInfo) -> dict[str, object]:
    return {
        "name": info.name,
        "path": str(info.slot / "tree"),
        "workdir": info.workdir,
        "bytes": info.bytes,
        "released": info.released or None,
        "busy": info.busy,
    }


@click.group("copies")
def copies_command() -> None:
    """The persistent copies kept between calls (one per working directory and config)."""


@copies_command.command("list")
@config_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object per copy, per line.")
def list_command(workdir: Path, config_path: Path | None, as_json: bool) -> None:
    """List every kept copy, its size and whether a command holds it."""
    try:
        store = _store(workdir, config_path)
        infos = store.info()
    except SprawlError as err:
        refuse(err, as_json)
    if as_json:
        for info in infos:
            click.echo(json.dumps(_as_dict(info)))
        return
    if not infos:
        click.echo(f"no copies kept in {store.root}")
        return
    total = sum(i.bytes for i in infos)
    click.echo(
        f"{len(infos)} copies in {store.root}, {human(total)} of a "
        f"{human(store.budget_bytes)} budget ([sandbox.copy] budget_bytes)"
    )
    for info in infos:
        when = (
            time.strftime("%Y-%m-%d %H:%M", time.localtime(info.released))
            if info.released
            else "never released"
        )
        state = "in use" if info.busy else f"idle since {when}"
        click.echo(f"{info.name:<24} {human(info.bytes):>8}  {state:<28} {info.workdir}")


@copies_command.command("drop")
@config_options
@click.argument("names", nargs=-1)
@click.option("--here", is_flag=True, help="The copies of the -C working directory.")
@click.option("--all", "drop_all", is_flag=True, help="Every idle copy.")
@click.option("--json", "as_json", is_flag=True, help="Print what was dropped as JSON.")
def drop_command(
    workdir: Path,
    config_path: Path | None,
    names: tuple[str, ...],
    here: bool,
    drop_all: bool,
    as_json: bool,
) -> None:
    """Delete idle copies: NAMES as `copies list` shows them (KEY/SLOT, or KEY), --here or
    --all. The next call makes a fresh copy."""
    if not (names or here or drop_all):
        raise click.UsageError("name the copies to drop, or give --here or --all")
    try:
        try:
            store = _store(workdir, config_path)
        except SprawlError as err:
            if not (here and err.code == ErrorCode.CONFIG_INVALID) or names or drop_all:
                raise
            store = _store_despite(workdir, config_path, err)
        infos = store.info()
    except SprawlError as err:
        refuse(err, as_json)
    real = os.path.realpath(workdir)
    chosen = [
        i
        for i in infos
        if drop_all or (here and i.workdir == real) or i.name in names or i.key in names
    ]
    unknown = [n for n in names if not any(n in (i.name, i.key) for i in infos)]
    if unknown:
        raise click.BadParameter(
            f"no such copy: {', '.join(unknown)} (see: sprawl-orch copies list)", param_hint="NAMES"
        )
    dropped: list[CopyInfo] = []
    held: list[CopyInfo] = []
    for info in chosen:
        (dropped if not info.busy and store.drop(info.slot) else held).append(info)
    if as_json:
        click.echo(
            json.dumps({"dropped": [i.name for i in dropped], "in_use": [i.name for i in held]})
        )
    else:
        for info in dropped:
            click.echo(f"dropped {info.name} ({human(info.bytes)}, {info.workdir})")
        for info in held:
            click.echo(f"sprawl-orch: {info.name} is in use by a running command; kept", err=True)
    sys.exit(1 if held else 0)
