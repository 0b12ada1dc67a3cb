"""The public API: everything the documentation imports comes from ``ledgerq`` itself, every
exported name resolves, and no public signature of the application's facade says ``Any``."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import ledgerq

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: The classes whose public methods are the application's surface.
FACADE = ("LedgerQ", "Task", "Batch", "Workflow", "JobContext", "HeldLock")


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_every_exported_name_resolves() -> None:
    for name in ledgerq.__all__:
        assert getattr(ledgerq, name) is not None, name


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_docs_import_only_from_the_package(doc: Path) -> None:
    for block in python_blocks(doc.read_text()):
        for module, names in re.findall(r"^from (ledgerq[\w.]*) import (.+)$", block, re.M):
            assert module == "ledgerq", f"{doc.name} imports from {module}"
            for name in re.split(r",\s*", names.strip("() ")):
                assert name in ledgerq.__all__, f"{doc.name} imports {name}, not exported"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_docs_do_not_reach_into_the_parts(doc: Path) -> None:
    assert "app.parts" not in doc.read_text(), f"{doc.name} points into app.parts"


def annotation_texts(function: object) -> dict[str, str]:
    """Each parameter's and the return's annotation as written (the modules use postponed
    annotations, so these are the source's strings)."""
    signature = inspect.signature(function)  # type: ignore[arg-type]
    texts = {name: str(p.annotation) for name, p in signature.parameters.items()}
    texts["return"] = str(signature.return_annotation)
    return texts


@pytest.mark.parametrize("class_name", FACADE)
def test_no_public_signature_says_any(class_name: str) -> None:
    cls = getattr(ledgerq, class_name)
    checked = 0
    for name, member in inspect.getmembers(cls):
        # Users build only the application; the other classes come from its methods.
        if name.startswith("_") and not (name == "__init__" and class_name == "LedgerQ"):
            continue
        function = member.fget if isinstance(member, property) else member
        if not inspect.isfunction(function):
            continue
        checked += 1
        offenders = {k: v for k, v in annotation_texts(function).items() if "Any" in v}
        assert offenders == {}, f"{class_name}.{name} says Any: {offenders}"
    assert checked >= 2, f"only {checked} public methods of {class_name} were found"
