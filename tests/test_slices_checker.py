"""The slices exactly-once checker on synthetic logs and samples written as the nodes write
them (40-byte log records in real files): a clean run, a lost item, a repeated item, and
the repeats a killed PN is allowed to cause."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from knee.analysis.slices import (
    LOG_DTYPE,
    LOG_HELD,
    LOG_PROCESSED,
    check_exactly_once,
    handoffs_from_log,
    log_frame,
    read_pn_log,
)

SENDER = 7
SLICES = 4
RETRIES = 2


def _samples(
    n: int, replier: dict[int, int], attempts: dict[int, int] | None = None
) -> pd.DataFrame:
    """The client's samples of items 0..n-1: ok when `replier` names the PN that replied,
    else a timeout after `attempts` publications (default: all of them)."""
    ids = np.arange(n)
    attempts = attempts or {}
    return pd.DataFrame(
        {
            "client": np.full(n, SENDER),
            "request_id": ids,
            "status": pd.Categorical(
                ["ok" if i in replier else "timeout" for i in ids],
                categories=["ok", "timeout", "drop", "error", "late"],
            ),
            "attempts": [attempts.get(i, 1 if i in replier else RETRIES + 1) for i in ids],
            "service": [replier.get(i, 0) for i in ids],
        }
    )


def _write_log(
    path: Path, rows: list[tuple[int, int, int, int]], kinds: dict[int, int] | None = None
) -> Path:
    """rows: (pn, id, epoch, done_ns), processed unless `kinds` says otherwise (by row); a
    partial record at the end, as a kill leaves."""
    rec = np.zeros(len(rows), dtype=LOG_DTYPE)
    for k, (pn, item, epoch, done) in enumerate(rows):
        kind = (kinds or {}).get(k, LOG_PROCESSED)
        rec[k] = (pn, item % SLICES, SENDER, kind, item, epoch, done)
    path.write_bytes(rec.tobytes() + b"\x01\x02\x03")
    return path


def _log(
    tmp_path: Path, rows: list[tuple[int, int, int, int]], kinds: dict[int, int] | None = None
) -> pd.DataFrame:
    return log_frame(read_pn_log(_write_log(tmp_path / "pn.log", rows, kinds)))


def test_every_item_once_passes(tmp_path: Path) -> None:
    rows = [(i % 2, i, 1, i * 10) for i in range(20)]
    verdict = check_exactly_once(
        _samples(20, {i: i % 2 for i in range(20)}),
        _log(tmp_path, rows),
        killed=set(),
        retries=RETRIES,
    )
    assert verdict.passed
    assert (verdict.items, verdict.replied, verdict.processed) == (20, 20, 20)
    assert verdict.lost == verdict.repeated == verdict.killed_repeats == 0
    assert {(r["pn"], r["epoch"]): r["items"] for r in verdict.by_pn_epoch} == {
        (0, 1): 10,
        (1, 1): 10,
    }


def test_a_lost_item_fails(tmp_path: Path) -> None:
    rows = [(0, i, 1, i) for i in range(10) if i != 3]
    verdict = check_exactly_once(
        _samples(10, {i: 0 for i in range(10) if i != 3}),
        _log(tmp_path, rows),
        killed=set(),
        retries=RETRIES,
    )
    assert not verdict.passed
    assert verdict.lost == 1


def test_given_up_but_processed_late_or_held_at_the_end_is_not_lost(tmp_path: Path) -> None:
    """Past capacity an item can outwait every publication: processed after the client gave
    up (late), or still queued when the PNs stopped (held). Neither is a loss."""
    rows = [(0, i, 1, i * 10) for i in range(8)] + [(0, 8, 1, 90)]
    replied = {i: 0 for i in range(6)}  # 6 and 7 processed too late; 8 held; 9 lost
    verdict = check_exactly_once(
        _samples(10, replied), _log(tmp_path, rows, {8: LOG_HELD}), killed=set(), retries=RETRIES
    )
    assert (verdict.late, verdict.held, verdict.lost) == (2, 1, 1)
    assert verdict.processed == 8 and verdict.repeated == 0
    assert not verdict.passed  # item 9 is lost: nothing ever held or processed it


def test_unanswered_with_retries_left_is_unfinished_not_lost(tmp_path: Path) -> None:
    rows = [(0, i, 1, i) for i in range(9)]
    samples = _samples(10, {i: 0 for i in range(9)}, attempts={9: 1})
    verdict = check_exactly_once(samples, _log(tmp_path, rows), killed=set(), retries=RETRIES)
    assert verdict.passed
    assert (verdict.lost, verdict.unfinished) == (0, 1)


def test_a_wrong_answer_fails_and_is_not_unfinished(tmp_path: Path) -> None:
    """Item 2 answered by pn 0 with a wrong grayscale (the client records it as an error):
    processed once, yet the run fails; so does a wrong answer the client only counted (a
    late or repeated reply is not a sample)."""
    samples = _samples(4, {0: 0, 1: 0, 2: 0, 3: 0})
    samples.loc[2, "status"] = "error"
    log = _log(tmp_path, [(0, i, 1, 10 + i) for i in range(4)])
    verdict = check_exactly_once(samples, log, killed=set(), retries=RETRIES, bad_checksums=1)
    assert (verdict.wrong, verdict.unfinished, verdict.lost, verdict.replied) == (1, 0, 0, 3)
    assert verdict.unlogged_replies == 0 and not verdict.passed
    right = _samples(4, {0: 0, 1: 0, 2: 0, 3: 0})
    counted_only = check_exactly_once(right, log, killed=set(), retries=RETRIES, bad_checksums=1)
    assert counted_only.wrong == 0 and not counted_only.passed
    assert check_exactly_once(right, log, killed=set(), retries=RETRIES).passed


def test_an_item_processed_twice_by_living_pns_fails(tmp_path: Path) -> None:
    rows = [(0, i, 1, i) for i in range(10)] + [(1, 4, 2, 100)]
    verdict = check_exactly_once(
        _samples(10, {i: 0 for i in range(10)}), _log(tmp_path, rows), killed=set(), retries=RETRIES
    )
    assert not verdict.passed
    assert verdict.repeated == 1


def test_a_killed_pn_may_repeat_what_it_never_acknowledged(tmp_path: Path) -> None:
    # PN 1 processed items 4 and 5 and was killed before its replies left; PN 0 took the
    # slice and processed them again; the client got PN 0's replies.
    rows = [(0, i, 1, i) for i in range(10)] + [(1, 4, 1, 1), (1, 5, 1, 2)]
    verdict = check_exactly_once(
        _samples(10, {i: 0 for i in range(10)}), _log(tmp_path, rows), killed={1}, retries=RETRIES
    )
    assert verdict.passed
    assert (verdict.repeated, verdict.killed_repeats) == (0, 2)
    # The same log without the kill is a failure.
    verdict = check_exactly_once(
        _samples(10, {i: 0 for i in range(10)}), _log(tmp_path, rows), killed=set(), retries=RETRIES
    )
    assert verdict.repeated == 2 and not verdict.passed


def test_a_killed_pn_that_replied_and_a_living_one_that_repeated_fails(tmp_path: Path) -> None:
    # The client got PN 1's reply before PN 1 died: PN 0 processing it again is a repeat.
    rows = [(0, i, 1, i) for i in range(10)] + [(1, 4, 1, 1)]
    replier = {i: 0 for i in range(10)} | {4: 1}
    verdict = check_exactly_once(
        _samples(10, replier), _log(tmp_path, rows), killed={1}, retries=RETRIES
    )
    assert verdict.repeated == 1 and not verdict.passed


def test_ids_never_published_and_unlogged_replies_fail(tmp_path: Path) -> None:
    rows = [(0, i, 1, i) for i in range(10)] + [(0, 99, 1, 50)]
    verdict = check_exactly_once(
        _samples(10, {i: 0 for i in range(10)}), _log(tmp_path, rows), killed=set(), retries=RETRIES
    )
    assert verdict.unknown == 1 and not verdict.passed
    rows = [(0, i, 1, i) for i in range(9)]
    verdict = check_exactly_once(
        _samples(10, {i: 0 for i in range(10)}), _log(tmp_path, rows), killed=set(), retries=RETRIES
    )
    assert verdict.unlogged_replies == 1 and not verdict.passed


def test_handoffs_from_the_logs(tmp_path: Path) -> None:
    # Slice 0's items on PN 0 at epoch 1 until 2 s, then on PN 1 at epoch 2.
    rows = [(0, i, 1, i * 10**8) for i in range(0, 20, 4)] + [
        (1, i, 2, 2 * 10**9 + i * 10**6) for i in range(20, 40, 4)
    ]
    moves = handoffs_from_log(_log(tmp_path, rows))
    assert len(moves) == 1
    move = moves.iloc[0]
    assert (move["slice"], move["from"], move["to"], move["epoch"]) == (0, 0, 1, 2)
    assert (move["giver_last_id"], move["taker_first_id"]) == (16, 20)
    assert move["t_done_s"] > move["t_start_s"]
