"""Every role is exercised for real by `make test` (issue 42): named lab tests run it on the real lab, the
whole-site test among them running every molecule scenario's checks (issue 52 folded the `lab` scenario into
make test's lab). A new role without one fails here; so does a name that went stale (a renamed test, a test
moved to an extra, a scenario whose checks the whole-site test no longer runs).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import PROJECT

# the molecule `lab` scenario, folded into make test's lab (issue 52): the whole site converged, run again with
# nothing changed, and every role scenario's testinfra checks (roles/*/molecule/*/tests) against the nodes
SITE = "tests/test_serve_lab.py::test_the_whole_site_converges_then_changes_nothing_and_every_scenarios_checks_hold"
# role -> the lab tests that run it in `make test` ("tests/FILE.py::TEST")
COVERAGE: dict[str, tuple[str, ...]] = {
    "sparkplay": (SITE,),  # the project's defaults, listed first by every play
    "preflight": (
        SITE,
        "tests/test_provision_lab.py::test_check_mode_on_a_fresh_lab_reports_and_changes_nothing",
    ),
    "nvidia_stack": (
        SITE,
        "tests/test_provision_lab.py::test_skipping_the_nvidia_stacks_other_steps_does_not_skip_the_daemon_json_question",
    ),
    "fabric": (SITE,),
    "peer_ssh": (
        SITE,
        "tests/test_models_lab.py::test_only_rank0_is_trusted_between_the_ranks",
    ),
    "managed_files": ("tests/test_provision_lab.py::test_confirming_backs_up_and_replaces_it",),
    "checkpoint": (
        SITE,
        "tests/test_models_lab.py::test_mirror_copies_and_verifies_on_every_rank",
    ),
    "mtp_overlay": ("tests/test_overlay_lab.py::test_every_rank_builds_and_verifies_its_overlay",),
    "engine": (
        SITE,
        "tests/test_serve_lab.py::test_up_yes_from_a_fresh_lab_serves_across_both_ranks",
    ),
    "serve": (
        SITE,
        "tests/test_serve_lab.py::test_up_yes_from_a_fresh_lab_serves_across_both_ranks",
        "tests/test_several_lab.py::test_the_primary_then_a_second_model_beside_it_on_the_other_node",
    ),
    "status": (
        "tests/test_serve_lab.py::test_status_table_lists_every_rank",
        "tests/test_several_lab.py::test_status_lists_every_deployment_and_a_rerun_changes_nothing",
    ),
    "stop": ("tests/test_several_lab.py::test_stopping_one_leaves_the_other_answering_and_frees_its_claim",),
    "doctor": ("tests/test_provision_lab.py::test_doctor_prints_its_table_and_changes_nothing",),
    "reset": ("tests/test_provision_lab.py::test_reset_puts_every_file_back_and_a_second_reset_changes_nothing",),
    "bench": ("tests/test_several_lab.py::test_bench_measures_one_model_of_several",),
    "stack": ("tests/test_serve_lab.py::test_lock_records_each_nodes_stack_and_holds_the_engine_packages",),
}
# marks that keep a test out of `make test` (pyproject's addopts)
LEFT_OUT = {"lab3", "extra", "vllm", "sglang", "faults", "faults_long", "stack"}


def marks(node: ast.AST) -> set[str]:
    return {
        m.attr
        for m in ast.walk(node)
        if isinstance(m, ast.Attribute) and isinstance(m.value, ast.Attribute) and m.value.attr == "mark"
    }


def runs_in_make_test(ref: str) -> bool:
    path, name = ref.split("::")
    tree = ast.parse((PROJECT / path).read_text())
    module = next(
        (
            n
            for n in tree.body
            if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
        ),
        None,
    )
    test = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if test is None:
        return False
    found = marks(test) | (marks(module) if module else set())
    return "lab" in found and not (found & LEFT_OUT)


def test_every_role_is_run_by_make_test():
    roles = {p.name for p in (PROJECT / "roles").iterdir() if (p / "tasks").is_dir() or (p / "defaults").is_dir()}
    assert set(COVERAGE) == roles, (
        f"roles without coverage: {sorted(roles - set(COVERAGE))}; gone: {sorted(set(COVERAGE) - roles)}"
    )
    for role, refs in COVERAGE.items():
        for ref in refs:
            assert runs_in_make_test(ref), f"{role}: {ref} is not a lab test `make test` runs"


def test_the_whole_site_test_runs_every_role_scenarios_checks():
    from tests import test_serve_lab

    scenarios = {str(p.parent.relative_to(PROJECT)) for p in (PROJECT / "roles").glob("*/molecule/*/molecule.yml")}
    checked = {str(Path(path).parent) for path in test_serve_lab.SCENARIO_CHECKS}
    assert scenarios <= checked, f"scenarios whose checks make test does not run: {sorted(scenarios - checked)}"
    # and no second converge of its own: make test runs no molecule scenario
    recipe = (PROJECT / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "directory molecule" not in recipe and "molecule test" not in recipe


def test_every_role_has_its_own_scenario_and_make_molecule_roles_runs_each():
    """Issue 58: a scenario inside every role (converge, idempotence unless it says why not, verify with
    testinfra), each run by `make molecule-roles` in the site's order."""
    roles = sorted(p.name for p in (PROJECT / "roles").iterdir() if (p / "defaults").is_dir() or (p / "tasks").is_dir())
    makefile = (PROJECT / "Makefile").read_text()
    listed = makefile.split("MOLECULE_ROLES :=", 1)[1].split("\nmolecule-roles:", 1)[0].replace("\\", " ").split()
    assert sorted(listed) == roles, f"make molecule-roles runs {listed}"
    for role in roles:
        scenario = PROJECT / "roles" / role / "molecule" / "default"
        config = (scenario / "molecule.yml").read_text()
        assert "verify" in config and "converge" in config, role
        assert "idempotence" in config or "no idempotence step:" in config, role
        assert list((scenario / "tests").glob("test_*.py")), f"{role}: no testinfra checks"


def test_a_test_left_out_of_make_test_does_not_count():
    assert runs_in_make_test("tests/test_serve_lab.py::test_up_yes_from_a_fresh_lab_serves_across_both_ranks")
    assert not runs_in_make_test(
        "tests/test_several_extra_lab.py::test_models_on_demand_start_when_asked_for_make_room_lru_and_stop_after_their_ttl"
    )  # marked extra
    assert not runs_in_make_test(
        "tests/test_stack_lab.py::test_a_changed_engine_file_is_drift_that_doctor_and_status_name_and_up_refuses_until_accepted"
    )  # marked stack (module-wide)
    assert not runs_in_make_test("tests/test_serve_lab.py::test_no_such_test")
