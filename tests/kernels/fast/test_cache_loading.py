"""Reading the symbols a cached library's machine code defines (``lite.kernels.fast.cache_loading``)."""

from __future__ import annotations

import struct

import pytest

from lite.kernels.fast import cache_loading

llvm = pytest.importorskip("llvmlite.binding")

MODULE = """
@counter = global i64 7
@hidden = internal global i64 1
declare double @llvm.sqrt.f64(double)
declare i64 @elsewhere(i64)
define i64 @exported(i64 %x) {
  %y = call i64 @elsewhere(i64 %x)
  %z = load i64, i64* @hidden
  %s = add i64 %y, %z
  ret i64 %s
}
define linkonce_odr i64 @shared(i64 %x) {
  ret i64 %x
}
define internal i64 @helper(i64 %x) {
  ret i64 %x
}
define i64 @uses_helper(i64 %x) {
  %y = call i64 @helper(i64 %x)
  ret i64 %y
}
"""


@pytest.fixture(scope="module")
def object_code() -> bytes:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(MODULE)
    machine = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine(opt=0)
    return machine.emit_object(module)


def test_global_and_weak_definitions_are_read_and_nothing_else(object_code):
    if not object_code.startswith(b"\x7fELF"):
        pytest.skip("this platform's objects are not ELF: numba's own loading runs")
    assert cache_loading.defined_symbols(object_code) == {"counter", "exported", "shared", "uses_helper"}


def test_the_symbols_are_numba_s_own_for_every_library_of_a_real_kernel():
    """Against what numba itself walks: every function and global the linking bitcode defines with
    a linkage another module can see is read from the machine code, and nothing it does not define."""
    fast = pytest.importorskip("lite.kernels.fast")
    if fast.numba_module() is None:
        pytest.skip("numba is not importable here")
    import numpy as np

    from lite.kernels.fast import activation

    values = np.linspace(-2, 2, 16).astype(np.float32)
    activation.gelu_float32(values, np.empty_like(values), np.float32(0))
    library = next(iter(activation.gelu_float32.overloads.values())).library
    state = library.serialize_using_object_code()
    if not state[2][0].startswith(b"\x7fELF"):
        pytest.skip("this platform's objects are not ELF")
    module = llvm.parse_bitcode(state[2][1])
    defined = [g for group in (module.functions, module.global_variables) for g in group if not g.is_declaration]
    visible = {g.name for g in defined if g.linkage not in (llvm.Linkage.internal, llvm.Linkage.private)}
    found = cache_loading.defined_symbols(state[2][0])
    assert visible and visible <= found <= {g.name for g in defined}


def _section_header_offset(code: bytes) -> int:
    return struct.unpack_from("<Q", code, 0x28)[0]


@pytest.mark.parametrize("damage", ["not elf", "32-bit", "truncated", "sections past the end",
                                    "section entry size", "names past the end", "not bytes"])
def test_damaged_objects_read_as_none_so_numba_loads_them_itself(object_code, damage):
    if not object_code.startswith(b"\x7fELF"):
        pytest.skip("this platform's objects are not ELF")
    code = bytearray(object_code)
    if damage == "not elf":
        code[1:4] = b"ABC"
    elif damage == "32-bit":
        code[4] = 1
    elif damage == "truncated":
        code = code[:len(code) // 2]
    elif damage == "sections past the end":
        struct.pack_into("<Q", code, 0x28, len(code) + 64)
    elif damage == "section entry size":
        struct.pack_into("<H", code, 0x3A, 40)
    elif damage == "names past the end":
        _stretch_string_tables(code)
    result = cache_loading.defined_symbols(str(code) if damage == "not bytes" else bytes(code))
    assert result is None


def _stretch_string_tables(code: bytearray) -> None:
    """Every string table section (type 3) claims to run far past the object's end."""
    start, count = _section_header_offset(bytes(code)), struct.unpack_from("<H", code, 0x3C)[0]
    for index in range(count):
        header = start + index * 64
        if struct.unpack_from("<I", code, header + 4)[0] == 3:
            struct.pack_into("<Q", code, header + 32, 1 << 40)
