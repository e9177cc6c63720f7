"""core/budget.py, the one budgeted store (kept outputs, kept changes, persistent copies)."""

from __future__ import annotations

from pathlib import Path

from sprawl_orch.core.budget import drop_entry, evict_oldest

# (age, name, bytes): c is the oldest.
HELD = [(3.0, "a", 40), (1.0, "c", 30), (2.0, "b", 50)]


def _evict(budget: int, **kw: object) -> list[str]:
    gone: list[str] = []

    def drop(e: tuple[float, str, int]) -> bool:
        gone.append(e[1])
        return e[1] not in kw.get("held_by_a_command", ())  # type: ignore[operator]

    out = evict_oldest(
        HELD,
        budget,
        size=lambda e: e[2],
        age=lambda e: e[0],
        drop=drop,
        spare=kw.get("spare", lambda _: False),  # type: ignore[arg-type]
        incoming=kw.get("incoming", 0),  # type: ignore[arg-type]
    )
    return [e[1] for e in out]


def test_oldest_first_and_only_until_it_fits() -> None:
    assert _evict(200) == []  # 120 held: fits
    assert _evict(90) == ["c"]  # 120 -> 90
    assert _evict(40) == ["c", "b"]  # 120 -> 40
    assert _evict(0) == ["c", "b", "a"]


def test_bytes_about_to_be_kept_count() -> None:
    assert _evict(150, incoming=30) == []
    assert _evict(150, incoming=31) == ["c"]


def test_a_spared_entry_and_one_a_command_holds_stay_and_still_count() -> None:
    assert _evict(40, spare=lambda e: e[1] == "c") == ["b", "a"]
    # b could not be dropped (held): a goes too, though b alone would have made room
    assert _evict(70, held_by_a_command={"b"}) == ["c", "a"]


def test_a_dropped_entry_is_renamed_away_and_said_why(tmp_path: Path) -> None:
    entry = tmp_path / "h1"
    (entry / "blobs").mkdir(parents=True)
    (entry / "blobs" / "0").write_text("x")
    (entry / "outside").symlink_to(tmp_path / "kept")
    (tmp_path / "kept").write_text("not ours to drop")
    drop_entry(tmp_path, "h1", "over the budget")
    assert not entry.exists()
    assert (tmp_path / "h1.gone").read_text() == "over the budget\n"
    assert (tmp_path / "kept").read_text() == "not ours to drop"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".drop-")] == []
    drop_entry(tmp_path, "never-was", "gone already")  # no error
