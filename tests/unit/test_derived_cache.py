"""The disk cache of the CRDs' parsed and serialised forms changes nothing but the time a render takes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT, needs_crds
from trainyard import catalog, yamlio
from trainyard.derived_cache import cache_root, derived_text
from trainyard.manifests import crd_components, crds
from trainyard.project import open_stack
from trainyard.review.render import rendered_files, to_yaml, to_yaml_cached


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    crds._json_text.cache_clear()
    crds._crd_name.cache_clear()
    return tmp_path / "cache"


@needs_crds
def test_cached_crds_are_the_documents_yaml_parses(empty_cache: Path) -> None:
    stack = open_stack("prod", ROOT)
    cold = crds.load_crds(stack.config, crd_components(stack.config), ROOT / "stacks")
    crds._json_text.cache_clear()  # the second load reads the disk entries
    warm = crds.load_crds(stack.config, crd_components(stack.config), ROOT / "stacks")
    assert list((cache_root() / "crd-json").glob("*.txt"))
    for component, version in crd_components(stack.config):
        release = catalog.release(component, version)
        for crd in release.crds:
            content = crds._read_verified(stack.config, release, crd, ROOT / "stacks")
            parsed = yamlio.safe_load(content)
            assert parsed in cold and parsed in warm
    assert cold == warm


@needs_crds
def test_each_load_returns_a_fresh_copy_callers_may_edit(empty_cache: Path) -> None:
    stack = open_stack("prod", ROOT)
    first = crds.load_crds(stack.config, crd_components(stack.config))
    first[0]["metadata"]["name"] = "edited"
    assert crds.load_crds(stack.config, crd_components(stack.config))[0]["metadata"]["name"] != "edited"


@needs_crds
def test_cached_yaml_is_byte_identical_to_dumping_again(empty_cache: Path) -> None:
    rendered = open_stack("prod", ROOT).render()
    cold = rendered_files(rendered)
    warm = rendered_files(rendered)
    assert cold == warm
    for crd in rendered.crds:
        assert to_yaml_cached(crd) == to_yaml(crd)


@needs_crds
def test_unparsed_crds_write_what_their_documents_would(empty_cache: Path) -> None:
    """``trainyard render`` writes the CRDs from their verified files without parsing them (patched ones, Kueue's
    conversion webhooks, from their documents); the files equal those written from the parsed documents, cold
    and warm, and once the documents were asked for an edit to one is what is written."""
    stack = open_stack("prod", ROOT)
    cold, warm, parsed = stack.render(), stack.render(), stack.render()
    assert any(s.patch is not None for s in cold.crd_sources) and any(s.patch is None for s in cold.crd_sources)
    from_sources = rendered_files(cold)
    assert not cold.crds_parsed
    assert rendered_files(warm) == from_sources
    for crd in parsed.crds:
        assert to_yaml_cached(crd) == to_yaml(crd)
    assert parsed.crds_parsed and rendered_files(parsed) == from_sources
    parsed.crds[0]["metadata"]["labels"] = {"edited": "true"}
    edited = rendered_files(parsed)
    changed = [path for path in from_sources if edited[path] != from_sources[path]]
    assert changed == [Path("CustomResourceDefinition.apiextensions.k8s.io") / f"{parsed.crds[0]['metadata']['name']}.yaml"]


def test_documents_equal_but_for_types_or_order_never_share_an_entry(empty_cache: Path) -> None:
    docs = [{"a": 1, "b": "x"}, {"a": True, "b": "x"}, {"a": 1.0, "b": "x"}, {"a": "1", "b": "x"}, {"b": "x", "a": 1}]
    for doc in docs * 2:  # the second round reads the entries the first wrote
        assert to_yaml_cached(doc) == to_yaml(doc)
    assert len(list((empty_cache / "trainyard" / "derived" / "yaml").iterdir())) == len(docs)


def test_a_document_marshal_cannot_carry_is_dumped_directly(empty_cache: Path) -> None:
    import datetime

    doc = {"when": datetime.date(2026, 1, 1), 1: "int key"}
    assert to_yaml_cached(doc) == to_yaml(doc)
    assert not (empty_cache / "trainyard" / "derived" / "yaml").exists()


def test_an_unwritable_cache_only_costs_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert derived_text("x", ("key",), lambda: "computed") == "computed"
