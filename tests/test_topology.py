from sparkplay.topology import rank_layout_problems


def test_pair_is_valid():
    assert rank_layout_problems({"a": 0, "b": 1}) == []


def test_four_nodes_in_any_order_are_valid():
    assert rank_layout_problems({"d": 3, "a": 1, "c": 0, "b": 2}) == []


def test_no_leader():
    assert rank_layout_problems({"a": 1, "b": 2}) == ["no host has sparkplay_rank 0; give the leader rank 0"]


def test_two_leaders_named():
    (problem,) = rank_layout_problems({"a": 0, "b": 0})
    assert "more than one rank 0 (a, b)" in problem


def test_duplicate_worker_rank():
    (problem,) = rank_layout_problems({"a": 0, "b": 1, "c": 1})
    assert problem == "rank 1 is used by b, c; ranks must be unique"


def test_gap_is_not_contiguous():
    (problem,) = rank_layout_problems({"a": 0, "b": 2})
    assert "contiguous from 0 to 1; missing 1" in problem


def test_string_bool_and_missing_ranks_are_rejected():
    problems = rank_layout_problems({"a": 0, "b": "1", "c": True, "d": None, "e": -1})
    assert "b: sparkplay_rank must be a whole number, got '1'" in problems
    assert "c: sparkplay_rank must be a whole number, got True" in problems
    assert "d: sparkplay_rank is not set; give every node a rank (leader 0)" in problems
    assert "e: sparkplay_rank must be 0 or more, got -1" in problems


def test_empty_group():
    assert "no hosts" in rank_layout_problems({})[0]
