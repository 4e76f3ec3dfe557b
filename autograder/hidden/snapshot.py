"""Identity snapshot of the modules a student's code could patch: torch, numpy, labutils, the grader, some stdlib.

Why its own module: the recheck takes one before any student code runs and restores it before every hidden check,
and :func:`autograder.hidden.run_check` takes one around each property check to drop a report made while torch was
patched. Both import it from here, so neither imports the other.
"""

from __future__ import annotations

import sys
from types import FunctionType, ModuleType

GUARDED_PREFIXES = ("torch", "numpy", "labutils", "autograder", "torchvision")
GUARDED_MODULES = (
    "builtins", "math", "random", "copy", "inspect", "functools", "itertools", "operator", "types", "collections",
    "warnings", "contextlib", "dataclasses", "os", "posixpath", "tempfile", "pathlib", "io", "json", "pickle", "re",
    "statistics", "time", "gc", "weakref",
)
_MISSING = object()
_CONTAINERS = (dict, list, set)


def _guarded(name: str) -> bool:
    return name in GUARDED_MODULES or name.split(".", 1)[0] in GUARDED_PREFIXES


class Snapshot:
    """Identity snapshot of guarded modules' and classes' attributes (and small global registries' contents)."""

    def __init__(self) -> None:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # touching deprecated torch aliases warns; this only reads them
            self._take()

    def _take(self) -> None:
        self.modules: dict[str, tuple[ModuleType, dict]] = {}
        self.classes: list[tuple[type, dict]] = []
        self.contents: list[tuple[object, object]] = []
        for name, mod in list(sys.modules.items()):
            if not isinstance(mod, ModuleType) or not _guarded(name):
                continue
            saved = dict(vars(mod))
            self.modules[name] = (mod, saved)
            for value in saved.values():
                if isinstance(value, type) and getattr(value, "__module__", None) == name:
                    self.classes.append((value, dict(vars(value))))
                elif type(value) in _CONTAINERS and len(value) <= 256:  # global hook registries and the like
                    self.contents.append((value, value.copy()))

    # The builtins these two use are bound at definition time (default arguments): a cell that replaced
    # ``builtins.vars`` or ``autograder.hidden.snapshot.sys`` cannot blind the restore that is meant to undo it.
    def restore(self, _vars=vars, _setattr=setattr, _delattr=delattr, _isinstance=isinstance,
                _modules=sys.modules, _module_type=ModuleType, _missing=_MISSING) -> None:
        """Put every guarded attribute back; remove attributes added to guarded classes."""
        vars, setattr, delattr, isinstance, ModuleType, _MISSING = (  # noqa: N806 - the captured originals
            _vars, _setattr, _delattr, _isinstance, _module_type, _missing)
        for name, (mod, saved) in self.modules.items():
            if _modules.get(name) is not mod:
                _modules[name] = mod
            current = vars(mod)
            for key, value in saved.items():
                if current.get(key, _MISSING) is not value:
                    current[key] = value
            for key in [k for k in current if k not in saved]:
                if not isinstance(current[key], ModuleType):
                    del current[key]
        for cls, saved in self.classes:
            current = vars(cls)
            for key, value in saved.items():
                if current.get(key, _MISSING) is not value:
                    try:
                        setattr(cls, key, value)
                    except (TypeError, AttributeError):
                        pass
            for key in [k for k in current if k not in saved]:
                try:
                    delattr(cls, key)
                except (TypeError, AttributeError):
                    pass
        for container, saved in self.contents:
            if container != saved:
                container.clear()
                container.update(saved) if isinstance(container, (dict, set)) else container.extend(saved)

    def tampered(self, _vars=vars, _callable=callable, _isinstance=isinstance, _missing=_MISSING,
                 _kinds=(FunctionType, property, staticmethod, classmethod)) -> list[str]:
        """Guarded functions and classes whose binding changed since the snapshot (or the last restore)."""
        vars, callable, isinstance, _MISSING = _vars, _callable, _isinstance, _missing  # noqa: N806
        changed = []
        for name, (mod, saved) in self.modules.items():
            current = vars(mod)
            for key, value in saved.items():
                if callable(value) and current.get(key, _MISSING) is not value:
                    changed.append(f"{name}.{key}")
        for cls, saved in self.classes:
            current = vars(cls)
            for key, value in saved.items():
                if isinstance(value, _kinds):
                    if current.get(key, _MISSING) is not value:
                        changed.append(f"{cls.__module__}.{cls.__qualname__}.{key}")
            for key in current:
                if key not in saved and callable(current[key]):
                    changed.append(f"{cls.__module__}.{cls.__qualname__}.{key} (added)")
        return changed
