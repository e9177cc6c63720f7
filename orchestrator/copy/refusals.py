"""What an E_COPY_BOUND refusal of the walk says (copy/bounds.py's docstring: which bound, the
number reached, the largest top-level entries, the key to raise). Split from walk.py (#28:
files under ~400 lines): the walk counts, this module words the refusal."""

from __future__ import annotations

from sprawl_orch.copy.bounds import RECOVERY, Bounds, Excludes, bound_key, human, largest_entries
from sprawl_orch.core.errors import CopyBoundError, ErrorCode


def refusal(
    source: str,
    subject: str,
    excludes: Excludes,
    bounds: Bounds,
    detail: str,
    key: str,
    recovery: str | None = None,
    *,
    bound: str | None = None,
    reached: int | None = None,
) -> CopyBoundError:
    """E_COPY_BOUND; `bound` ("files", "bytes", "depth") and the count `reached` go into its
    fields, the limit read from `bounds`."""
    top = largest_entries(source, excludes)
    if top:
        detail += f"; largest top-level entries: {top}"
    limits = {"files": bounds.files, "bytes": bounds.bytes, "depth": bounds.depth}
    return CopyBoundError(
        ErrorCode.COPY_BOUND,
        subject,
        detail,
        recovery or RECOVERY.format(key=key.replace(" = ", " (now ") + ")"),
        bound=bound,
        limit=None if bound is None else limits[bound],
        reached=reached,
    )


def depth_detail(rel: str, level: int, why: str, bounds: Bounds) -> tuple[str, str]:
    """(detail, key) of a depth refusal at `rel`."""
    rel = rel if len(rel) <= 160 else rel[:160] + "…"  # a link loop repeats itself
    key = bound_key("depth", bounds.depth)
    return f"{why}: {rel} is at level {level} (bound {key})", key


def files_detail(files: int, size: int, bounds: Bounds) -> tuple[str, str]:
    """(detail, key) of a file-count refusal after `files` files holding `size` bytes."""
    key = bound_key("files", bounds.files)
    detail = (
        f"the tree has more than {bounds.files:,} files: {files:,} "
        f"reached, with {human(size)} in them (bound {key})"
    )
    return detail, key


def counted_detail(files: int, bounds: Bounds) -> tuple[str, str]:
    """(detail, key) of a file-count refusal from the count before copying (bounds.count_files)."""
    key = bound_key("files", bounds.files)
    detail = (
        f"the tree has more than {bounds.files:,} files: {files:,} reached by counting, "
        f"before anything was copied (bound {key})"
    )
    return detail, key


def bytes_detail(reached: int, files: int, bounds: Bounds) -> tuple[str, str]:
    """(detail, key) of a byte refusal: `reached` bytes after `files` files."""
    bound, key = bounds.bytes, bound_key("bytes", bounds.bytes)
    detail = (
        f"the tree holds more than {bound:,} bytes ({human(bound)}): "
        f"{reached:,} reached after {files:,} files (bound {key})"
    )
    return detail, key
