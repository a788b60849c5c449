"""Container image references: what a recipe may put where `docker run` reads its image (no lab)."""

from __future__ import annotations

import copy

import pytest

from sparkplay import imageref
from sparkplay.engines.plan import Options, build
from sparkplay.errors import BadInput
from sparkplay.recipes import model
from sparkplay.recipes.store import catalog
from tests.conftest import PROJECT
from tests.test_engines import nodes

GOOD = [
    "ubuntu",
    "library/ubuntu:24.04",
    "nvcr.io/nvidia/vllm:25.09-py3",
    "ghcr.io/enntity/atlas-sparkglm:246a3a948ab9",
    "localhost:5000/team/engine@sha256:" + "ab" * 32,
    "registry.example.com:443/a/b_c/d-e:v1.2",
    "vllm/vllm-openai:latest",
]
BAD = [
    "--privileged",
    "-v/:/host",
    "Image nvcr.io/nvidia/vllm:25.09-py3",  # a sentence from a web page
    "nvcr.io/nvidia/vllm:25.09-py3,",  # a comma from the sentence kept
    "Nvidia/vllm",  # a Hub path must be lower case
    "a b",
    "x;rm -rf /",
    "nvcr.io/nvidia/vllm:" + "t" * 200,
    "",
]


@pytest.mark.parametrize("text", GOOD)
def test_references_are_accepted(text):
    assert imageref.is_reference(text)


@pytest.mark.parametrize("text", BAD)
def test_everything_else_is_refused(text):
    assert not imageref.is_reference(text)


def test_floating_and_pinned():
    assert imageref.floating("ubuntu") and imageref.floating("vllm/vllm-openai:latest")
    assert not imageref.floating("nvcr.io/nvidia/vllm:25.09-py3")
    assert imageref.pinned("a/b@sha256:" + "0" * 64) and not imageref.pinned("a/b:1")


def recipe_with_image(image: str) -> dict:
    doc = copy.deepcopy(catalog.load_for_use(catalog.catalog_dir(PROJECT), "glm53"))
    doc["engine"]["image"] = image
    return doc


def test_an_option_as_image_is_an_error_and_never_reaches_docker_run():
    found = [p for p in model.problems(recipe_with_image("--privileged")) if p.key == "engine.image"]
    assert [p.severity for p in found] == ["error"] and "not a container image reference" in found[0].message
    with pytest.raises(BadInput, match="not a container image reference"):
        build(recipe_with_image("--privileged"), nodes(2), Options(model_root="/models"))


def test_a_latest_image_is_a_warning():
    found = [p for p in model.problems(recipe_with_image("vllm/vllm-openai:latest")) if p.key == "engine.image"]
    assert [p.severity for p in found] == ["warning"]


def test_a_title_with_newlines_still_writes_a_loadable_recipe():
    doc = copy.deepcopy(catalog.load_for_use(catalog.catalog_dir(PROJECT), "glm53"))
    doc["title"] = "GLM\nengine: evil\r\n--- \x0b"
    text = model.to_yaml(doc)
    assert model.from_yaml(text, "t")["title"] == doc["title"]  # the header comment cannot end early
    assert text.splitlines()[0] == "# GLM engine: evil ---"
