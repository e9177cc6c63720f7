"""`sprawl-orch image …`: build, pin, list, verify. A thin layer over images.*; long steps
show a rich spinner with the step name and elapsed time on stderr, results go to stdout.

Exit codes: 0 done; 1 `verify` found a pin that isn't usable; 2 refused (code, subject,
detail, recovery on stderr) or bad usage.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from sprawl_orch.config import CONFIG_NAME
from sprawl_orch.core.errors import SprawlError
from sprawl_orch.engines.engine import ENGINES
from sprawl_orch.images.engines import LABEL_DATE, LABEL_RECIPE, LABEL_SOURCE
from sprawl_orch.images.recipe import RECIPE_NAMES
from sprawl_orch.surface.options import config_options, find_config, refuse

F = TypeVar("F", bound=Callable[..., Any])


def _err_console() -> Console:
    return Console(stderr=True, highlight=False)


def refusals(func: F) -> F:
    """A SprawlError ends the subcommand as every subcommand ends one: exit 125, its four
    fields on stderr (cli/common.py), or as JSON on stdout with --json."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except SprawlError as err:
            refuse(err, bool(kwargs.get("as_json")))

    return wrapper  # type: ignore[return-value]


class RichSteps:
    """One spinner line per long step: name, the step's latest output line, elapsed time."""

    def __init__(self, console: Console) -> None:
        self.console = console

    @contextmanager
    def step(self, name: str) -> Iterator[Callable[[str], None]]:
        start = time.monotonic()
        columns = (
            SpinnerColumn(),
            TextColumn("[bold]{task.fields[step]}[/]"),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
        )
        try:
            if self.console.is_terminal:
                with Progress(*columns, console=self.console, transient=True) as progress:
                    task = progress.add_task("", step=name)
                    yield lambda line: progress.update(task, description=escape(line[-90:]))
            else:
                # A log or a pipe: no spinner redraws, a line when the step starts and ends.
                self.console.print(f"… {escape(name)}")
                yield lambda line: None
        except BaseException:
            self.console.print(f"✗ {escape(name)} ({time.monotonic() - start:.1f} s)")
            raise
        self.console.print(f"✓ {escape(name)} ({time.monotonic() - start:.1f} s)")


@click.group("image")
def image() -> None:
    """Prepare local images: build, pin, list, verify. Nothing is ever pulled."""


@image.command("build")
@click.argument("recipe", required=False, type=click.Choice(RECIPE_NAMES))
@click.option(
    "--dockerfile",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Build this Dockerfile; every FROM base must already be local.",
)
@click.option(
    "--recipe",
    "recipe_file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Your own recipe file (TOML, like images/recipes/debian.toml), kept anywhere.",
)
@click.option(
    "--include",
    "include",
    multiple=True,
    help="Debootstrap recipes: more packages, comma-separated (debootstrap --include); repeatable.",
)
@click.option(
    "--network",
    type=click.Choice(["none", "host"]),
    default="none",
    show_default=True,
    help="--dockerfile: the network of RUN steps. 'host' reaches the package mirror (the "
    "private dockerd has no bridge). Containers sprawl-orch runs are --network none anyway.",
)
@click.option(
    "--context",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    help="Build context for --dockerfile (default: the Dockerfile's directory).",
)
@click.option("--tag", help="Tag the result (default: the recipe's, e.g. sprawl/busybox:latest).")
@click.option("--suite", help="debian: the suite to debootstrap (default: the recipe's).")
@click.option(
    "--mirror",
    help="debian: the Debian mirror URL (default: the recipe's; the built-in recipes take "
    "the one this machine's apt uses for the suite).",
)
@click.option(
    "--engine",
    "engine_name",
    type=click.Choice([*ENGINES, "all"]),
    default=None,
    help="Engine(s) to import into. Default: every engine that answers; "
    "'all': both, and each must answer.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the IDs as JSON.")
@refusals
def build_command(
    recipe: str | None,
    dockerfile: Path | None,
    recipe_file: Path | None,
    include: tuple[str, ...],
    network: str,
    context: Path | None,
    tag: str | None,
    suite: str | None,
    mirror: str | None,
    engine_name: str | None,
    as_json: bool,
) -> None:
    """Make an image locally and print its fixed ID in each engine.

    RECIPE is python (debootstrap minbase + python3, venv, pip, git, ~40 s: build it first
    for a Python project), debian (minbase only, ~35 s) or busybox (~0.2 s, the host's
    static busybox). Or --recipe FILE, or --dockerfile PATH. The same rootfs gets a
    different ID in docker and podman.
    """
    from sprawl_orch.images.build import build_dockerfile, build_recipe, pick_engines
    from sprawl_orch.images.recipe import PACKAGE

    given = [x for x in (recipe, dockerfile, recipe_file) if x is not None]
    if len(given) != 1:
        raise click.UsageError(
            "give one of: a RECIPE (python, debian, busybox), --recipe FILE, --dockerfile PATH"
        )
    packages = [p.strip() for item in include for p in item.split(",") if p.strip()]
    for package in packages:
        if not PACKAGE.match(package):
            raise click.BadParameter(
                f"{package!r} is not a Debian package name (lower case letters, digits, + - .)",
                param_hint="'--include'",
            )
    if dockerfile is None and network != "none":
        raise click.UsageError("--network is for --dockerfile builds (debootstrap uses the host's)")
    if dockerfile is not None and (suite or mirror or packages):
        raise click.UsageError("--suite, --mirror and --include are for debootstrap recipes")
    if recipe == "busybox" and (suite or mirror):
        raise click.UsageError("--suite and --mirror are for debootstrap recipes")
    if context and not dockerfile:
        raise click.UsageError("--context goes with --dockerfile")
    steps = RichSteps(_err_console())
    engines = pick_engines(engine_name)
    if dockerfile is not None:
        what = str(dockerfile)
        built = build_dockerfile(
            dockerfile, engines, tag=tag, context=context, network=network, steps=steps
        )
    else:
        source: str | Path = recipe_file.resolve() if recipe_file else str(recipe)
        what = str(source)
        built = build_recipe(
            source, engines, suite=suite, mirror=mirror, include=packages, tag=tag, steps=steps
        )
    if as_json:
        click.echo(json.dumps({"built": what, "tag": built.tag, "images": built.ids}, indent=2))
        return
    for name, image_id in built.ids.items():
        click.echo(f"{name:<7} {image_id}  {built.tag or '(untagged)'}")
    if built.tag:
        click.echo(f"pin it: sprawl-orch image pin {built.tag}   (one pin per engine it is in)")
    else:
        for name, image_id in built.ids.items():
            click.echo(f"pin it: sprawl-orch image pin {image_id} --engine {name}")


@image.command("pin")
@click.argument("ref")
@config_options
@click.option(
    "--engine",
    "engine_name",
    type=click.Choice(ENGINES),
    default=None,
    help="Pin for this engine only ([sandbox.container.images] ENGINE).",
)
@click.option("--json", "as_json", is_flag=True)
@refusals
def pin_command(
    ref: str, workdir: Path, config_path: Path | None, engine_name: str | None, as_json: bool
) -> None:
    """Resolve REF (a local tag or ID) to its fixed ID and write it into the config
    (--config FILE, else sprawl.toml in -C DIR, made if absent)."""
    from sprawl_orch.images.pin import pin

    if not workdir.is_dir():
        raise click.BadParameter(f"{workdir} is not a directory", param_hint="'-C'")
    result = pin(ref, config_path or workdir / CONFIG_NAME, engine_name=engine_name)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "config": str(result.path),
                    "ref": ref,
                    "resolved": result.resolved,
                    "written": result.written,
                    "removed": result.removed,
                    "notes": list(result.notes),
                    "images": {e: i.as_dict() for e, i in result.images.items()},
                },
                indent=2,
            )
        )
        return
    click.echo(f"pinned {ref} in {result.path}:")
    for key, image_id in result.written.items():
        click.echo(f'  {key} = "{image_id}"')
    for key, image_id in result.removed.items():
        click.echo(f'  removed {key} = "{image_id}" (it would have shadowed the new pin)')
    for name, described in result.images.items():
        click.echo(f"  {name}: the image's own {described.facts()}")
    for note in result.notes:
        click.echo(f"  note: {note}")


@image.command("list")
@click.option("--json", "as_json", is_flag=True)
@refusals
def list_command(as_json: bool) -> None:
    """Local images made by `image build` (label sprawl.recipe), per engine."""
    from sprawl_orch.images.verify import list_images

    listings = list_images()
    if as_json:
        click.echo(json.dumps([item.as_dict() for item in listings], indent=2))
        return
    for item in listings:
        if not item.reachable:
            click.echo(f"{item.engine}: not reachable: {item.reason}")
            continue
        click.echo(f"{item.engine}: {len(item.images)} sprawl image(s)")
        for img in item.images:
            tags = ", ".join(img.tags) or "(untagged)"
            click.echo(
                f"  {img.id}  {img.labels.get(LABEL_RECIPE, '?'):<10} "
                f"{img.labels.get(LABEL_DATE, '?')}  {tags}"
            )
            click.echo(f"      source: {img.labels.get(LABEL_SOURCE, '?')}")
            click.echo(f"      {img.facts()}")


@image.command("verify")
@config_options
@click.option("--json", "as_json", is_flag=True)
@refusals
def verify_command(workdir: Path, config_path: Path | None, as_json: bool) -> None:
    """Which ID the config pins for each engine, and whether that engine has it locally.
    Exit 1 when no usable engine has its pin, or a usable engine's pin is missing."""
    from sprawl_orch.images.verify import verify

    result = verify(find_config(workdir, config_path), workdir=workdir)
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
    else:
        click.echo(f"config: {result.config}")
        for check in result.checks:
            used = (
                ""
                if check.used
                else f"  (not used: [sandbox] arm = {result.arm})"
                if not result.uses_images
                else "  (not used: [sandbox.container] engine)"
            )
            click.echo(f"{check.engine:<7} {check.status:<11} {check.pinned or '-'}{used}")
            click.echo(f"        {check.detail}")
            if check.image is not None:
                click.echo(f"        {check.image.facts()}")
            if check.recovery and check.status != "present" and check.used:
                click.echo(f"        recovery: {check.recovery}")
        if not result.uses_images:
            click.echo(f"ok: [sandbox] arm = {result.arm} runs no image")
        else:
            click.echo("ok" if result.ok else "NOT OK: see the rows above")
    if not result.ok:
        sys.exit(1)
