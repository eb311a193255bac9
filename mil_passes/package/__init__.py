"""Models on disk: reading ``.mlpackage``/``.mlmodel`` files without trusting them, checking and
repairing their protobuf, writing them atomically, and ``optimize`` on a saved model.

Modules: ``files`` (paths and weight references), ``duplicate_names`` and ``declared_types`` (checks
and repairs of the protobuf), ``io`` (read and save), ``optimize`` (the ``optimize`` command's path).
"""
