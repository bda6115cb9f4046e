"""The series book: which occurrences are the same event, when a series is written (created, at
its first repeat, refreshed, at its end), and that it stays bounded (client-go's rules,
k8s.io/client-go@v0.37.2 tools/events/event_broadcaster.go)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.kube.event_series import (
    FINISH_SECONDS,
    REFRESH_SECONDS,
    Series,
    SeriesBook,
    SeriesKey,
)

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def key(pod: str = "a", note: str = "0/3 nodes are available") -> SeriesKey:
    return SeriesKey(
        ("Pod", "ns", pod, f"uid-{pod}"), "Warning", "FailedScheduling", "Scheduling", note
    )


def body(name: str = "a.1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"}}


def observe(book: SeriesBook, at: float, which: SeriesKey | None = None) -> list[Series]:
    return book.observe(which or key(), at, EPOCH + timedelta(seconds=at), body)


def written(series: Series, at: float) -> None:
    """As the recorder marks a write of `series` tried at `at` and accepted."""
    series.attempted_at = at
    series.written = series.count


def test_a_new_event_is_written_and_only_its_first_repeat_is_written_at_once() -> None:
    book = SeriesBook()
    [first] = observe(book, 0)
    assert (first.count, first.body["metadata"]["name"]) == (1, "a.1")
    assert observe(book, 10) == [first]  # count 2: written now
    assert first.count == 2
    for at in (20, 30, 40):
        assert observe(book, at) == []  # counted in memory only
    assert first.count == 5
    assert first.series_field() == {"count": 5, "lastObservedTime": "2026-01-01T00:00:40.000000Z"}


def test_another_note_object_or_reason_is_another_event() -> None:
    book = SeriesBook()
    [a] = observe(book, 0)
    [other_note] = observe(book, 1, key(note="0/4 nodes are available"))
    [other_pod] = observe(book, 2, key(pod="b"))
    [other_reason] = book.observe(
        SeriesKey(key().regarding, "Normal", "Scheduled", "Binding", key().note), 3, EPOCH, body
    )
    assert len({id(s) for s in (a, other_note, other_pod, other_reason)}) == 4
    assert len(book) == 4


def test_a_series_ends_a_window_after_its_last_occurrence_with_its_final_count() -> None:
    book = SeriesBook()
    [series] = observe(book, 0)
    observe(book, 10)
    written(series, 10)  # the first repeat's write
    observe(book, 100)
    observe(book, 200)
    assert book.due(200 + FINISH_SECONDS) == []  # exactly the window: still live
    assert book.due(200 + FINISH_SECONDS + 1) == [series]  # the final count, 4
    assert len(book) == 0
    [fresh] = observe(book, 200 + FINISH_SECONDS + 2)
    assert fresh is not series and fresh.count == 1


def test_an_ended_series_whose_count_is_written_and_a_single_event_end_unwritten() -> None:
    book = SeriesBook()
    [series] = observe(book, 0)
    observe(book, 1)
    written(series, 1)
    observe(book, 2, key(pod="once"))
    assert book.due(1000) == []
    assert len(book) == 0


def test_a_repeat_after_the_window_starts_a_new_event_and_hands_back_the_old_count() -> None:
    book = SeriesBook()
    [old] = observe(book, 0)
    observe(book, 1)
    observe(book, 2)  # count 3, never written
    ended, new = observe(book, 2 + FINISH_SECONDS + 1)
    assert ended is old and old.count == 3
    assert new.count == 1 and book.get(key()) is new


def test_a_live_series_is_refreshed_when_not_tried_for_the_refresh_period() -> None:
    book = SeriesBook(window=10_000.0)
    [series] = observe(book, 0)
    observe(book, 1)
    written(series, 1)
    observe(book, 500)
    assert book.due(REFRESH_SECONDS) == []
    assert book.due(1 + REFRESH_SECONDS) == [series]
    series.attempted_at = 1 + REFRESH_SECONDS
    assert book.due(2 + REFRESH_SECONDS) == []


def test_a_single_event_is_never_refreshed() -> None:
    book = SeriesBook(window=10_000.0)
    observe(book, 0)
    assert book.due(5000) == []


def test_the_book_is_bounded_and_hands_back_unwritten_counts_it_pushes_out() -> None:
    book = SeriesBook(capacity=2)
    [a] = observe(book, 0, key("a"))
    observe(book, 1, key("a"))  # a: count 2, not written yet
    [b] = observe(book, 2, key("b"))
    observe(book, 3, key("b"))
    written(b, 3)
    observe(book, 4, key("a"))  # a: count 3, now the most recently observed
    [c] = observe(book, 5, key("c"))  # pushes out b, the least recently observed: nothing to write
    assert book.get(key("b")) is None and len(book) == 2
    pushed_out, d = observe(book, 6, key("d"))  # pushes out a: its count 3 is handed back
    assert pushed_out is a and a.count == 3
    assert book.get(key("a")) is None and book.get(key("c")) is c and book.get(key("d")) is d


def test_forget_drops_only_the_live_series_of_its_key() -> None:
    book = SeriesBook()
    [old] = observe(book, 0)
    [new] = observe(book, FINISH_SECONDS + 1)  # old was a single event: nothing to hand back
    book.forget(old)
    assert book.get(key()) is new
    book.forget(new)
    assert book.get(key()) is None


@pytest.mark.parametrize(
    "arguments", [{"window": 0.0}, {"refresh": -1.0}, {"capacity": 0}], ids=str
)
def test_bad_settings_are_refused(arguments: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SeriesBook(**arguments)


@given(
    st.lists(
        st.tuples(st.sampled_from("abcd"), st.floats(min_value=0, max_value=2 * FINISH_SECONDS)),
        max_size=60,
    ),
    st.integers(min_value=1, max_value=3),
)
def test_every_occurrence_is_counted_in_exactly_one_series(
    steps: list[tuple[str, float]], capacity: int
) -> None:
    """Whatever the timing: the counts of every series ever made add up to the occurrences, the
    book never holds more than `capacity`, and no series is handed back for writing twice in
    one call."""
    book = SeriesBook(capacity=capacity)
    made: dict[int, Series] = {}
    now = 0.0
    for pod, gap in steps:
        now += gap
        handed = observe(book, now, key(pod))
        assert len({id(s) for s in handed}) == len(handed)
        made.update((id(s), s) for s in handed if s.count == 1)
        assert len(book) <= capacity
        book.due(now)
    assert sum(s.count for s in made.values()) == len(steps)
