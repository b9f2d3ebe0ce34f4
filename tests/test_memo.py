"""``monitor.memo.ByIdentity``: values kept by an object's identity and a tag."""

from __future__ import annotations

from monitor.memo import ByIdentity


def test_a_value_is_found_by_the_same_object_and_tag_only() -> None:
    memo: ByIdentity[str] = ByIdentity(4)
    a, b = [1, 2], [1, 2]  # equal, not the same object
    memo.put(a, "x", "kept")
    assert memo.get(a, "x") == "kept"
    assert memo.get(b, "x") is None
    assert memo.get(a, "y") is None
    memo.put(a, "y", "other")  # a second tag for the same object
    assert (memo.get(a, "x"), memo.get(a, "y")) == ("kept", "other")


def test_the_object_is_held_so_its_id_is_not_reused_and_a_full_memo_starts_over() -> None:
    memo: ByIdentity[int] = ByIdentity(3)
    for k in range(3):
        memo.put(object(), None, k)  # held: no later object can take one of these ids
    assert len(memo) == 3
    fresh = object()
    assert memo.get(fresh) is None
    memo.put(fresh, None, 9)  # full: cleared whole, then kept
    assert len(memo) == 1
    assert memo.get(fresh) == 9
