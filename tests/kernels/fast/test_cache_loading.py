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
    kernel = fast.numba_module().njit(activation.gelu_float32.py_func)  # NOTE: compiled here: its code at hand
    kernel(values, np.empty_like(values), np.float32(0))
    library = next(iter(kernel.overloads.values())).library
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


TAG = b"('0.68', '0.45', ('x86_64-unknown-linux-gnu', 'sapphirerapids', '+avx512f'))"


def test_the_runtime_file_gives_back_what_was_kept_for_its_tag(tmp_path):
    path = tmp_path / cache_loading.RUNTIME_FILE
    cache_loading.write_runtime(path, TAG, b"\x7fELF code", b"BC bitcode")
    assert cache_loading.read_runtime(path, TAG) == (b"\x7fELF code", b"BC bitcode")
    assert cache_loading.read_runtime(path, TAG.replace(b"0.68", b"0.69")) is None
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("damage", ["missing", "magic", "truncated", "appended", "length past the end",
                                    "empty code", "symlink", "too large"])
def test_a_damaged_runtime_file_reads_as_none_so_the_runtime_is_compiled(tmp_path, damage):
    path = tmp_path / cache_loading.RUNTIME_FILE
    cache_loading.write_runtime(path, TAG, b"" if damage == "empty code" else b"\x7fELF code", b"BC bitcode")
    data = path.read_bytes()
    if damage == "missing":
        path.unlink()
    elif damage == "magic":
        path.write_bytes(b"X" + data[1:])
    elif damage == "truncated":
        path.write_bytes(data[:-3])
    elif damage == "appended":
        path.write_bytes(data + b"\0")
    elif damage == "length past the end":
        start = len(cache_loading._RUNTIME_MAGIC)
        path.write_bytes(data[:start] + struct.pack("<Q", 1 << 62) + data[start + 8:])
    elif damage == "symlink":
        (tmp_path / "elsewhere").write_bytes(data)
        path.unlink()
        path.symlink_to(tmp_path / "elsewhere")
    elif damage == "too large":
        with open(path, "ab") as file:
            file.truncate(cache_loading.MAX_RUNTIME_BYTES + 1)
    assert cache_loading.read_runtime(path, TAG) is None


def test_a_folder_that_cannot_be_written_keeps_no_runtime_and_raises_nothing(tmp_path):
    cache_loading.write_runtime(tmp_path / "missing" / cache_loading.RUNTIME_FILE, TAG, b"code", b"bitcode")
    assert not (tmp_path / "missing").exists()
