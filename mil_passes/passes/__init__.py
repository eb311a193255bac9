"""The package's graph passes, one module each; importing this package registers them all.

Each module declares its pass once (``DECLARATION``, :class:`~mil_passes.declaration.PassDeclaration`)
and registers its class with ``@register(DECLARATION)``; docs/writing-a-pass.md walks through one.
"""

from __future__ import annotations

import importlib
import pkgutil

from coremltools.converters.mil.mil.passes.pass_registry import register_pass

from ..declaration import NAMESPACE, PassDeclaration, qualified


def register(declaration: PassDeclaration):
    """Register a pass class as ``webnn::<declaration.name>`` (idempotent: re-imports override), and
    give it its registry name as ``name``."""
    if not isinstance(declaration, PassDeclaration):
        raise TypeError(f"register takes the module's DECLARATION, not {declaration!r} (docs/writing-a-pass.md)")
    name = declaration.name

    def decorate(cls):
        cls.name = qualified(name)
        cls.declaration = declaration
        return register_pass(namespace=NAMESPACE, override=True, name=name)(cls)

    return decorate


_MODULES = [importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)]
#: Every pass's declaration, in module order (the modules' own objects).
DECLARATIONS: tuple[PassDeclaration, ...] = tuple(m.DECLARATION for m in _MODULES if hasattr(m, "DECLARATION"))
