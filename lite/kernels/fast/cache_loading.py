"""Loading cached kernels without the work only compiling needs.

- **Registries.** Before numba loads a function from its cache it refreshes the target context: it
  imports and installs every typing and lowering registry it has (numpy, lists, dicts, random,
  linear algebra...). On a warm build that refresh was a third of a ResNet-50's build time.
  ``install`` makes a cache lookup initialize numba's runtime alone (the allocator the compiled
  wrappers call); the symbols cached code links against are installed when the context is made
  (numba's C helpers, its math functions). A lookup that misses refreshes as numba does, before
  numba compiles the function.
- **Linking bitcode.** A cached library holds its machine code and the LLVM bitcode that a function
  compiled later links in when it calls this one. numba parses that bitcode as it loads the
  library, and walks every function in it (one LLVM call each) to learn which symbols the library
  defines. ``install`` reads those symbols from the machine code's own symbol table instead (the
  names the JIT linker can resolve) and parses the bitcode only when a new function links the
  library in. Machine code that is not a well-formed ELF object is loaded as numba loads it.
"""

from __future__ import annotations

import contextlib
import struct
from pathlib import Path
from types import ModuleType

from lite.files import replace_file

_INSTALLED: list[bool] = []


def install(numba: ModuleType) -> bool:
    """Puts the lazy lookup in place of ``numba.core.caching.Cache.load_overload`` (once); False
    where this numba's cache has another shape (then numba's own lookup stays)."""
    if _INSTALLED:
        return _INSTALLED[0]
    try:
        from numba.core import caching
        from numba.core.runtime import rtsys
    except ImportError:
        _INSTALLED.append(False)
        return False
    cache = getattr(caching, "Cache", None)
    if cache is None or not all(hasattr(cache, name) for name in ("load_overload", "_load_overload",
                                                                  "_guard_against_spurious_io_errors")):
        _INSTALLED.append(False)
        return False
    if _install_lazy_linking():
        _install_cached_runtime(numba)

    def load_overload(self, sig, target_context):
        """numba's ``Cache.load_overload``, refreshing the context only where nothing is cached."""
        rtsys.initialize(target_context)
        with self._guard_against_spurious_io_errors():
            found = self._load_overload(sig, target_context)
            if found is not None:
                return found
        target_context.refresh()
        return None

    cache.load_overload = load_overload
    _INSTALLED.append(True)
    return True


def _install_lazy_linking() -> bool:
    """Puts ``_unserialize_lazily`` in place of numba's ``CPUCodeLibrary._unserialize``; False (and
    numba's own stays) where this numba's code library has another shape."""
    try:
        from numba.core import codegen
    except ImportError:
        return False
    library_class = getattr(codegen, "CPUCodeLibrary", None)
    engine_class = getattr(codegen, "JitEngine", None)
    needed = ("_unserialize", "enable_object_caching", "_set_compiled_object", "_finalize_final_module")
    if library_class is None or engine_class is None or not all(hasattr(library_class, n) for n in needed):
        return False
    original = library_class.__dict__["_unserialize"].__func__

    def _unserialize_lazily(cls, codegen_, state):
        """numba's ``_unserialize`` for machine code, with the symbols read from it and the linking
        bitcode parsed on first use; numba's own for anything else."""
        name, kind, data = state
        symbols = defined_symbols(data[0]) if kind == "object" else None
        if symbols is None or not hasattr(codegen_._engine, "_defined_symbols"):
            return original(cls, codegen_, state)
        library = codegen_.create_library(name)
        library.enable_object_caching()
        library._set_compiled_object(data[0])
        library.__class__ = _lazily_linked(type(library))
        library.__dict__.pop("_shared_module", None)
        library.__dict__[_PENDING] = data[1]
        library._finalize_final_module()
        codegen_._engine._defined_symbols |= symbols
        return library

    library_class._unserialize = classmethod(_unserialize_lazily)
    return True


_PENDING = "_delite_linking_bitcode"
_PARSED = "_delite_linking_module"


class _LazyLinking:
    """A cached code library whose linking module (numba's ``_shared_module``) is parsed from its
    bitcode when first read."""

    @property
    def _shared_module(self):
        bitcode = self.__dict__.pop(_PENDING, None)
        if bitcode is not None:
            import llvmlite.binding as ll

            self.__dict__[_PARSED] = ll.parse_bitcode(bitcode)
        return self.__dict__.get(_PARSED)

    @_shared_module.setter
    def _shared_module(self, module) -> None:
        self.__dict__.pop(_PENDING, None)
        self.__dict__[_PARSED] = module


_LAZY_CLASSES: dict[type, type] = {}


def _lazily_linked(library_class: type) -> type:
    if library_class not in _LAZY_CLASSES:
        _LAZY_CLASSES[library_class] = type(f"Lazy{library_class.__name__}", (_LazyLinking, library_class),
                                              {"__module__": __name__})
    return _LAZY_CLASSES[library_class]


_ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_SYMBOL = struct.Struct("<IBBHQQ")
_SYMTAB = 2
_GLOBAL, _WEAK = 1, 2


def defined_symbols(code: object) -> set[str] | None:
    """The global and weak symbols a 64-bit little-endian ELF relocatable object defines; None where
    ``code`` is not one, or any header, section or name lies outside it."""
    if not isinstance(code, bytes) or not code.startswith(b"\x7fELF\x02\x01"):
        return None
    try:
        header = _ELF_HEADER.unpack_from(code)
        sections = [_SECTION.unpack_from(code, header[6] + i * _SECTION.size) for i in range(header[12])]
        tables = [s for s in sections if s[1] == _SYMTAB]
        if header[11] != _SECTION.size or len(tables) != 1:
            return None
        return _symbols_of(code, tables[0], sections[tables[0][6]])
    except (struct.error, IndexError, UnicodeDecodeError):
        return None


def _symbols_of(code: bytes, table: tuple, strings: tuple) -> set[str] | None:
    offset, size, entry = table[4], table[5], table[9]
    names_start, names_end = strings[4], strings[4] + strings[5]
    if entry != _SYMBOL.size or offset + size > len(code) or names_end > len(code):
        return None
    found = set()
    for start in range(offset, offset + size - entry + 1, entry):
        name, info, _, section, _, _ = _SYMBOL.unpack_from(code, start)
        if section != 0 and info >> 4 in (_GLOBAL, _WEAK):
            end = code.find(b"\0", names_start + name, names_end)
            if name >= strings[5] or end < 0:
                return None
            found.add(code[names_start + name:end].decode())
    return found


RUNTIME_FILE = "numba-runtime.delite"
"""The file in numba's cache folder that keeps numba's runtime library's machine code."""
_RUNTIME_MAGIC = b"DLNRT\x00\x01\x00"
_LENGTH = struct.Struct("<Q")
MAX_RUNTIME_BYTES = 1 << 24
"""A runtime file larger than this is not one this module wrote (numba's runtime is about 6 KiB)."""


def _install_cached_runtime(numba: ModuleType) -> bool:
    """Puts a ``compile_nrt_functions`` that loads numba's runtime library from the cache folder in
    place of numba's own; False (and numba's own stays) where this numba has another shape."""
    try:
        from numba.core.runtime import nrtdynmod
    except ImportError:
        return False
    if not hasattr(nrtdynmod, "create_nrt_module") or not hasattr(nrtdynmod, "compile_nrt_functions"):
        return False

    def compile_nrt_functions(context):
        """numba's runtime library, from the cache folder where a file there has this process's tag,
        else compiled (and then kept there)."""
        codegen = context.codegen()
        folder = numba.config.CACHE_DIR
        path = Path(folder) / RUNTIME_FILE if folder else None
        tag = _runtime_tag(numba, codegen)
        state = read_runtime(path, tag) if path is not None else None
        if state is not None:
            return codegen._library_class._unserialize(codegen, ("nrt", "object", state))
        module, library = nrtdynmod.create_nrt_module(context)
        library.enable_object_caching()
        library.add_ir_module(module)
        library.finalize()
        if path is not None:
            _name, _kind, data = library.serialize_using_object_code()
            write_runtime(path, tag, *data)
        return library

    nrtdynmod.compile_nrt_functions = compile_nrt_functions
    return True


def _runtime_tag(numba: ModuleType, codegen) -> bytes:
    import llvmlite

    return repr((numba.__version__, llvmlite.__version__, codegen.magic_tuple())).encode()


def read_runtime(path: Path, tag: bytes) -> tuple[bytes, bytes] | None:
    """The machine code and linking bitcode kept at ``path`` for ``tag``; None where there is no such
    file, it was kept for another tag, or its lengths do not add up to its size."""
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_RUNTIME_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    parts, offset = [], len(_RUNTIME_MAGIC)
    if not data.startswith(_RUNTIME_MAGIC):
        return None
    for _ in range(3):
        if offset + _LENGTH.size > len(data):
            return None
        (length,) = _LENGTH.unpack_from(data, offset)
        offset += _LENGTH.size
        if length > len(data) - offset:
            return None
        parts.append(data[offset:offset + length])
        offset += length
    if offset != len(data) or parts[0] != tag or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


def write_runtime(path: Path, tag: bytes, code: bytes, bitcode: bytes) -> None:
    """Keeps the runtime at ``path`` (``lite.files.replace_file``: a new file renamed over any old
    one); a folder that cannot be written leaves it compiled in each process, as numba does."""
    with contextlib.suppress(OSError):
        replace_file(path, _RUNTIME_MAGIC + b"".join(_LENGTH.pack(len(part)) + part for part in (tag, code, bitcode)))
