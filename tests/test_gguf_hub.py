"""llama.cpp's -hf repo:QUANT: the files llama.cpp itself would serve, chosen once at import, mirrored, served.

The rule is llama.cpp's (common/download.cpp, read for this): the first model GGUF whose name holds the tag
followed by `.` or `-` in any case, the first part of a split model with all its parts, Q4_K_M then Q8_0
when no tag is given, --hf-file by name in any case, the vision projector beside it unless --no-mmproj.
The hub is a test double (tests/fake_hub.py, speaking the hub's API to huggingface_hub) or a plain list.
"""

from __future__ import annotations

import pytest

from sparkplay import importing
from sparkplay.engines.plan import Options, build
from sparkplay.errors import BadInput
from sparkplay.recipes.importers.pasted import gguf_hub
from tests.conftest import PROJECT
from tests.fake_hub import FakeHub
from tests.test_engines import ROOT, contains_run, nodes

FIXTURE = PROJECT / "tests" / "fixtures" / "sparkrun" / "llamacpp-hf-quant.yaml"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
# a real repository's shape: quants side by side, a split quant in a folder (its second part listed first),
# the unsloth dynamic quants whose names hold a tag as a prefix, projectors, an importance matrix
LISTING = [
    "README.md",
    "BF16/Qwen3-30B-A3B-BF16-00002-of-00002.gguf",
    "BF16/Qwen3-30B-A3B-BF16-00001-of-00002.gguf",
    "Q6_K/Qwen3-30B-A3B-Q6_K-00002-of-00003.gguf",
    "Q6_K/Qwen3-30B-A3B-Q6_K-00001-of-00003.gguf",
    "Q6_K/Qwen3-30B-A3B-Q6_K-00003-of-00003.gguf",
    "Qwen3-30B-A3B-IQ4_XS.gguf",
    "Qwen3-30B-A3B-Q4_K_M.gguf",
    "Qwen3-30B-A3B-Q4_K_S.gguf",
    "Qwen3-30B-A3B-Q8_0.gguf",
    "Qwen3-30B-A3B-UD-Q4_K_XL.gguf",
    "imatrix_unsloth.gguf",
    "mmproj-BF16.gguf",
    "mmproj-F16.gguf",
]


@pytest.mark.parametrize(
    ("tag", "model", "parts"),
    [
        ("Q4_K_M", "Qwen3-30B-A3B-Q4_K_M.gguf", 1),  # not Q4_K_S, not UD-Q4_K_XL
        ("q8_0", "Qwen3-30B-A3B-Q8_0.gguf", 1),  # any case
        ("Q6_K", "Q6_K/Qwen3-30B-A3B-Q6_K-00001-of-00003.gguf", 3),  # the first part, then every part
        ("UD-Q4_K_XL", "Qwen3-30B-A3B-UD-Q4_K_XL.gguf", 1),
        ("BF16", "BF16/Qwen3-30B-A3B-BF16-00001-of-00002.gguf", 2),
        ("", "Qwen3-30B-A3B-Q4_K_M.gguf", 1),  # no tag: Q4_K_M first
    ],
)
def test_the_tag_picks_what_llama_cpp_picks(tag, model, parts):
    chosen, files = gguf_hub.choose(LISTING, tag)
    assert chosen == model and len(files) == parts and min(files) == chosen  # the parts, in the listing's order
    assert all(f.endswith(".gguf") and "mmproj" not in f for f in files)


def test_without_a_tag_q8_0_then_the_first_model_file_and_never_a_sidecar():
    assert gguf_hub.choose([f for f in LISTING if "Q4_K_M" not in f], "")[0] == "Qwen3-30B-A3B-Q8_0.gguf"
    only = ["imatrix_unsloth.gguf", "mmproj-F16.gguf", "m-00002-of-00002.gguf", "m-00001-of-00002.gguf"]
    assert gguf_hub.choose(only, "") == ("m-00001-of-00002.gguf", ["m-00002-of-00002.gguf", "m-00001-of-00002.gguf"])


def test_a_tag_the_repository_lacks_and_a_missing_file_are_refused_naming_what_is_there():
    with pytest.raises(BadInput, match=r"no GGUF file for the tag 'Q3_K_M'.*Qwen3-30B-A3B-Q8_0\.gguf"):
        gguf_hub.choose(LISTING, "Q3_K_M")
    assert gguf_hub.choose(LISTING, "", "qwen3-30b-a3b-iq4_xs.GGUF")[0] == "Qwen3-30B-A3B-IQ4_XS.gguf"
    with pytest.raises(BadInput, match=r"--hf-file nope\.gguf is not in the repository"):
        gguf_hub.choose(LISTING, "", "nope.gguf")


@pytest.mark.parametrize("ref", ["noslash:Q4", "a/b/c:Q4", "/b", "a/"])
def test_a_reference_that_is_not_user_model_is_refused(ref):
    with pytest.raises(BadInput, match=r"is not <user>/<model>\[:quant\]"):
        gguf_hub.split_repo_tag(ref)


def test_the_projector_is_the_closest_beside_the_model_or_in_a_folder_above_it():
    lister = lambda repo, rev: (COMMIT, LISTING)  # noqa: E731
    got = gguf_hub.resolve("o/m:Q6_K", None, None, True, lister)
    assert got.mmproj == "mmproj-BF16.gguf" and got.files[-1] == "mmproj-BF16.gguf"  # equal bits: the first
    deeper = [*LISTING, "Q6_K/mmproj-Q8_0.gguf", "BF16/mmproj-F16.gguf"]
    nearer = gguf_hub.resolve("o/m:Q6_K", None, None, True, lambda r, v: (COMMIT, deeper))
    assert nearer.mmproj == "Q6_K/mmproj-Q8_0.gguf"  # the model's own folder beats the root
    assert gguf_hub.resolve("o/m:Q6_K", None, None, False, lister).mmproj is None  # --no-mmproj


def fake_lister(calls: list):
    def lister(repo: str, revision: str | None) -> tuple[str, list[str]]:
        calls.append((repo, revision))
        return COMMIT, LISTING

    return lister


def test_an_hf_recipe_imports_with_its_files_pinned_and_plans_from_the_mirror(monkeypatch):
    calls: list = []
    monkeypatch.setattr(gguf_hub, "LISTER", fake_lister(calls))
    doc = importing.import_source(str(FIXTURE))
    model = doc["model"]
    assert calls == [("unsloth/Qwen3-30B-A3B-GGUF", None)]
    assert model["repo"] == "unsloth/Qwen3-30B-A3B-GGUF" and model["revision"] == COMMIT
    assert model["path"] == "unsloth--Qwen3-30B-A3B-GGUF/Qwen3-30B-A3B-Q4_K_M.gguf"
    assert model["gguf"] == {
        "ref": "unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M",
        "file": None,
        "mmproj": True,
        "projector": "unsloth--Qwen3-30B-A3B-GGUF/mmproj-BF16.gguf",
        "draft_ref": None,
        "draft": None,
    }
    (target,) = model["checkpoints"]
    assert target["revision"] == COMMIT and target["files"] == ["Qwen3-30B-A3B-Q4_K_M.gguf", "mmproj-BF16.gguf"]
    said = {p["key"]: p["detail"] for p in doc["provenance"]}
    assert "llama.cpp's -hf rule on unsloth/Qwen3-30B-A3B-GGUF's files" in said["model.path"]
    assert "mmproj-BF16.gguf" in said["model.gguf.projector"] and COMMIT in said["model.revision"]
    # the engine serves the mirrored files; no rank downloads on its own
    (leader,) = build(doc, nodes(1), Options(model_root=ROOT))["ranks"]
    argv = leader["argv"]
    assert "-hf" not in argv and not any(a.startswith("unsloth/") for a in argv)
    assert contains_run(argv, ["-m", f"{ROOT}/unsloth--Qwen3-30B-A3B-GGUF/Qwen3-30B-A3B-Q4_K_M.gguf"])
    assert contains_run(argv, ["--mmproj", f"{ROOT}/unsloth--Qwen3-30B-A3B-GGUF/mmproj-BF16.gguf"])
    assert contains_run(argv, ["-c", "32768"]) and "--no-mmap" in argv


def test_a_pinned_revision_is_listed_at_that_revision_and_no_mmproj_is_kept(monkeypatch, tmp_path):
    calls: list = []
    monkeypatch.setattr(gguf_hub, "LISTER", fake_lister(calls))
    text = FIXTURE.read_text().replace("--no-mmap", "--no-mmproj")
    source = tmp_path / "pinned.yaml"
    source.write_text(text)
    doc = importing.import_source(str(source), sets=["model.revision=v2.0"])
    assert calls == [("unsloth/Qwen3-30B-A3B-GGUF", "v2.0")] and doc["model"]["revision"] == COMMIT
    assert doc["model"]["gguf"]["projector"] is None
    assert doc["model"]["checkpoints"][0]["files"] == ["Qwen3-30B-A3B-Q4_K_M.gguf"]


def test_without_the_hub_the_import_says_so_and_a_named_file_needs_no_hub(monkeypatch):
    def unreachable(repo: str, revision: str | None) -> tuple[str, list[str]]:
        raise BadInput(
            f"cannot list {repo}@main on the Hugging Face hub (no route)",
            "import where the hub answers, or --set model.path=<file in the repository>",
        )

    monkeypatch.setattr(gguf_hub, "LISTER", unreachable)
    with pytest.raises(BadInput, match=r"llamacpp-hf-quant\.yaml: cannot list .*--set model\.path="):
        importing.import_source(str(FIXTURE))
    doc = importing.import_source(str(FIXTURE), sets=["model.path=unsloth--Qwen3-30B-A3B-GGUF/own.gguf"])
    assert doc["model"]["path"] == "unsloth--Qwen3-30B-A3B-GGUF/own.gguf"


def test_the_hub_lister_reads_the_commit_and_the_tree_through_huggingface_hub(monkeypatch):
    """huggingface_hub against the hub's API (the stand-in): the commit of main, then the tree at it."""
    hub = FakeHub({"org/m-GGUF": {"m-Q4_K_M.gguf": b"GGUF", "sub/m-Q8_0.gguf": b"GGUF", "README.md": b"r"}})
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    try:
        commit, files = gguf_hub.hub_lister("org/m-GGUF", None)
        assert commit == hub.commit and sorted(files) == ["README.md", "m-Q4_K_M.gguf", "sub/m-Q8_0.gguf"]
        assert any(path.startswith(f"/api/models/org/m-GGUF/tree/{hub.commit}") for _, path, _ in hub.requests)
        with pytest.raises(BadInput, match=r"cannot list org/none@main on the Hugging Face hub"):
            gguf_hub.hub_lister("org/none", None)
    finally:
        hub.close()


def test_a_draft_model_from_the_hub_is_resolved_by_the_same_rule_and_served_from_the_mirror(monkeypatch, tmp_path):
    """-hfd repo[:quant] (llama.cpp's speculative decoding with a draft from the hub): the drafter checkpoint
    holds the files the rule picks (no projector), pinned; the engine gets -md from the mirror."""
    draft_files = ["Qwen3-0.6B-Q8_0.gguf", "Qwen3-0.6B-Q4_K_M.gguf", "mmproj-F16.gguf"]
    lists = {"unsloth/Qwen3-30B-A3B-GGUF": LISTING, "unsloth/Qwen3-0.6B-GGUF": draft_files}
    monkeypatch.setattr(gguf_hub, "LISTER", lambda repo, rev: (COMMIT, lists[repo]))
    source = tmp_path / "spec.yaml"
    source.write_text(FIXTURE.read_text().replace("--no-mmap", "-hfd unsloth/Qwen3-0.6B-GGUF:Q8_0 --draft-max 8"))
    doc = importing.import_source(str(source))
    drafter = next(c for c in doc["model"]["checkpoints"] if c["role"] == "drafter")
    assert drafter["repo"] == "unsloth/Qwen3-0.6B-GGUF" and drafter["revision"] == COMMIT
    assert drafter["files"] == ["Qwen3-0.6B-Q8_0.gguf"]
    assert doc["model"]["gguf"]["draft"] == "unsloth--Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0.gguf"
    assert doc["speculative"] == {"method": "draft", "num_tokens": 8, "draft_model": "unsloth/Qwen3-0.6B-GGUF:Q8_0"}
    (leader,) = build(doc, nodes(1), Options(model_root=ROOT))["ranks"]
    argv = leader["argv"]
    assert contains_run(argv, ["-md", f"{ROOT}/unsloth--Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0.gguf"]) and "-hfd" not in argv
