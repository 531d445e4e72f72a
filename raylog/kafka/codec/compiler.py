"""Compiles each (message, version) of the table into a specialised reader and writer.

Interpreting the table field by field for every request would cost more than the work the
broker does for a small Produce or Fetch, so the first use of a (message, version) generates
Python source for it: one function per struct, runs of fixed-width fields read and written
with one precompiled :class:`struct.Struct`, the version, flexibility and nullability of every
field decided at compile time. The source is compiled once and cached.

A reader is ``read(b, p, n) -> (dict, p)`` over a memoryview ``b`` of format ``B`` (``n`` its
length): every field of the message appears in the dict, fields absent at the version with
their defaults; records fields are memoryviews of ``b``. Unknown tagged fields are skipped.
It raises :class:`~raylog.kafka.codec.primitives.Malformed` (or :class:`struct.error`,
IndexError) on bad bytes; :mod:`raylog.kafka.codec.frames` turns those into InvalidRequestError.

A writer is ``write(o, d, ch) -> o``: it appends the message ``d`` to the bytearray ``o``;
records fields are not copied but appended to the list ``ch`` as buffers of their own, after
the bytearray so far (the writer then continues in a new bytearray, which it returns).
"""

from __future__ import annotations

import itertools
import struct
import threading
import uuid

from . import primitives as prim
from .messages import Field, Message

_lock = threading.Lock()
_readers: dict[tuple[int, str, int], object] = {}
_writers: dict[tuple[int, str, int], object] = {}


def reader(message: Message, version: int):
    """The compiled reader of ``message`` at ``version`` (compiled on first use)."""
    key = (message.api_key, message.kind, version)
    fn = _readers.get(key)
    if fn is None:
        with _lock:
            fn = _readers.get(key) or _Compiler(message, version).reader()
            _readers[key] = fn
    return fn


def writer(message: Message, version: int):
    """The compiled writer of ``message`` at ``version`` (compiled on first use)."""
    key = (message.api_key, message.kind, version)
    fn = _writers.get(key)
    if fn is None:
        with _lock:
            fn = _writers.get(key) or _Compiler(message, version).writer()
            _writers[key] = fn
    return fn


def _truncated(what: str):
    return prim.Truncated(f"bytes end inside {what}")


class _Compiler:
    def __init__(self, message: Message, version: int):
        self.message = message
        self.version = version
        self.flexible = message.is_flexible(version)
        self.names = itertools.count()
        self.env: dict[str, object] = {
            "_ruv": prim.read_uvarint,
            "_wuv": prim.write_uvarint,
            "_rstr": prim.read_string,
            "_wstr": prim.write_string,
            "_ub": prim.uuid_bytes,
            "_nb": prim.nbytes,
            "_UUID": uuid.UUID,
            "_M": prim.Malformed,
            "_T": _truncated,
            "_unpack": struct.unpack_from,
            "_pack": struct.pack,
            "_h": prim.INT16.unpack_from,
            "_i": prim.INT32.unpack_from,
            "_ph": prim.INT16.pack,
            "_pi": prim.INT32.pack,
        }
        self.defs: list[str] = []

    # --- helpers ------------------------------------------------------------------------

    def _const(self, value) -> str:
        """A name in the generated code's globals bound to ``value``."""
        name = f"_c{next(self.names)}"
        self.env[name] = value
        return name

    def _present(self, fields: list[Field]) -> list[Field]:
        return [f for f in fields if self.version in f.versions]

    def _tagged(self, f: Field) -> bool:
        return self.flexible and f.tag is not None

    def _default_expr(self, f: Field) -> str:
        """Source of an expression giving a fresh default of ``f``."""
        value = f.default_value()
        if f.type == "{}" and f.nullable is not None:
            return "None"
        if f.type == "{}":
            return "{" + ", ".join(f"{g.name!r}: {self._default_expr(g)}" for g in f.fields) + "}"
        if isinstance(value, list):
            return "[]"
        if isinstance(value, uuid.UUID):
            return self._const(value)
        return repr(value)

    def _compile(self, entry: str):
        source = "\n".join(self.defs)
        code = compile(source, f"<kafka codec {self.message.name} {self.message.kind} v{self.version}>", "exec")
        exec(code, self.env)  # noqa: S102 - our own generated source
        return self.env[entry]

    # --- readers ------------------------------------------------------------------------

    def reader(self):
        return self._compile(self._struct_reader(self.message.fields))

    def _layout(self, fields: list[Field]) -> tuple[list[list[Field] | Field], list[Field]]:
        """The untagged fields present at this version, in order, each run of fixed-width ones
        grouped in a list (one struct reads or writes it); and the tagged fields."""
        present = self._present(fields)
        untagged = [f for f in present if not self._tagged(f)]
        groups: list[list[Field] | Field] = []
        for f in untagged:
            if f.type not in prim.FIXED:
                groups.append(f)
            elif groups and isinstance(groups[-1], list):
                groups[-1].append(f)
            else:
                groups.append([f])
        return groups, [f for f in present if self._tagged(f)]

    def _struct_reader(self, fields: list[Field]) -> str:
        name = f"_r{next(self.names)}"
        lines = [f"def {name}(b, p, n):"]
        body: list[str] = []
        values: dict[str, str] = {}
        groups, tagged = self._layout(fields)
        for run in groups:
            if isinstance(run, list):
                fmt = ">" + "".join(prim.FIXED[f.type][0] for f in run)
                unpack = self._const(struct.Struct(fmt).unpack_from)
                size = struct.calcsize(fmt)
                names = [f"v_{f.name}" for f in run]
                target = ", ".join(names) + ("," if len(names) == 1 else "")
                body.append(f"{target} = {unpack}(b, p)")
                body.append(f"p += {size}")
                for f, var in zip(run, names, strict=True):
                    if f.type == "uuid":
                        body.append(f"{var} = _UUID(bytes={var})")
                    values[f.name] = var
                continue
            f = run
            var = f"v_{f.name}"
            body.extend(self._read_field(f, var))
            values[f.name] = var
        if self.flexible:
            for f in tagged:
                var = f"v_{f.name}"
                body.append(f"{var} = {self._default_expr(f)}")
                values[f.name] = var
            body.extend(self._uvarint("k"))
            body.append("for _ in range(k):")
            body.append("    t, p = _ruv(b, p)")
            body.append("    s, p = _ruv(b, p)")
            body.append("    e = p + s")
            body.append("    if e > n:")
            body.append("        raise _T('a tagged field')")
            keyword = "if"
            for f in sorted(tagged, key=lambda g: g.tag):
                body.append(f"    {keyword} t == {f.tag}:")
                body.extend("        " + line for line in self._read_field(f, f"v_{f.name}"))
                body.append("        if p > e:")
                body.append(f"            raise _M('tagged field {f.name} is longer than its size')")
                keyword = "elif"
            body.append("    p = e")
        entries = ", ".join(f"{f.name!r}: {values.get(f.name) or self._default_expr(f)}" for f in fields)
        body.append(f"return {{{entries}}}, p")
        lines.extend("    " + line for line in body)
        self.defs.append("\n".join(lines))
        return name

    def _uvarint(self, var: str) -> list[str]:
        return [f"{var} = b[p]", f"if {var} < 128:", "    p += 1", "else:", f"    {var}, p = _ruv(b, p)"]

    def _length(self, var: str, classic: str) -> list[str]:
        """Lines reading a length or count into ``var`` (-1 for null)."""
        if self.flexible:
            return [*self._uvarint(var), f"{var} -= 1"]
        if classic == "int16":
            return [f"{var} = _h(b, p)[0]", "p += 2"]
        return [f"{var} = _i(b, p)[0]", "p += 4"]

    def _null(self, f: Field, var: str) -> list[str]:
        """Lines for a negative length ``x``: None if the field is nullable here, else an error."""
        if f.nullable_in(self.version):
            return ["if x != -1:", f"    raise _M('length ' + str(x) + ' of {f.name}')", f"{var} = None"]
        return [f"raise _M('{f.name} is null but not nullable at this version')"]

    def _min_size(self, fields: list[Field]) -> int:
        size = 1 if self.flexible else 0  # the tagged-field count
        for f in self._present(fields):
            if self._tagged(f):
                continue
            if f.type in prim.FIXED:
                size += prim.FIXED[f.type][1]
            elif f.type == "{}":
                size += 1 if f.nullable_in(self.version) else self._min_size(f.fields)
            else:
                size += 1 if self.flexible else (2 if f.type == "string" else 4)
        return size

    def _read_field(self, f: Field, var: str) -> list[str]:
        t = f.type
        if t in prim.FIXED:
            fmt, size = prim.FIXED[t]
            unpack = self._const(struct.Struct(">" + fmt).unpack_from)
            lines = [f"{var} = {unpack}(b, p)[0]", f"p += {size}"]
            if t == "uuid":
                lines.append(f"{var} = _UUID(bytes={var})")
            return lines
        if t in ("string", "bytes", "records"):
            convert = {"string": "str(b[p:e], 'utf-8')", "bytes": "bytes(b[p:e])", "records": "b[p:e]"}[t]
            return [
                *self._length("x", "int16" if t == "string" else "int32"),
                "if x < 0:",
                *("    " + line for line in self._null(f, var)),
                "else:",
                "    e = p + x",
                "    if e > n:",
                f"        raise _T('{f.name}')",
                f"    {var} = {convert}",
                "    p = e",
            ]
        if t == "{}":
            read = f"{var}, p = {self._struct_reader(f.fields)}(b, p, n)"
            if not f.nullable_in(self.version):
                return [read]
            # A nullable struct: an int8 before it, -1 (null) or 1.
            return [
                "if p >= n:",
                f"    raise _T('{f.name}')",
                "p += 1",
                "if b[p - 1] == 255:",
                f"    {var} = None",
                "else:",
                f"    {read}",
            ]
        # arrays
        lines = [*self._length("x", "int32"), "if x < 0:", *("    " + line for line in self._null(f, var)), "else:"]
        element = f.element
        if element is None:
            sub = self._struct_reader(f.fields)
            if self._min_size(f.fields) > 0:
                lines += ["    if x > n - p:", f"        raise _T('{f.name}')"]
            lines += [
                f"    {var} = []",
                "    for _ in range(x):",
                f"        y, p = {sub}(b, p, n)",
                f"        {var}.append(y)",
            ]
        elif element in prim.FIXED and element != "uuid":
            fmt, size = prim.FIXED[element]
            lines += [f"    {var} = list(_unpack('>' + str(x) + '{fmt}', b, p))", f"    p += {size} * x"]
        elif element == "string":
            lines += [
                "    if x > n - p:",
                f"        raise _T('{f.name}')",
                f"    {var} = []",
                "    for _ in range(x):",
                f"        y, p = _rstr(b, p, {self.flexible}, False)",
                f"        {var}.append(y)",
            ]
        else:
            raise ValueError(f"arrays of {element} are not supported by the codec ({f.name})")
        return lines

    # --- writers ------------------------------------------------------------------------

    def writer(self):
        return self._compile(self._struct_writer(self.message.fields))

    def _struct_writer(self, fields: list[Field]) -> str:
        name = f"_w{next(self.names)}"
        body: list[str] = []
        groups, tagged = self._layout(fields)
        for run in groups:
            if isinstance(run, list):
                fmt = ">" + "".join(prim.FIXED[f.type][0] for f in run)
                pack = self._const(struct.Struct(fmt).pack)
                args = []
                for f in run:
                    get = f"d.get({f.name!r}, {self._default_expr(f)})"
                    args.append(f"_ub({get})" if f.type == "uuid" else get)
                body.append(f"o += {pack}({', '.join(args)})")
                continue
            f = run
            body.append(f"x = d.get({f.name!r}, {self._default_expr(f)})")
            body.extend(self._write_field(f, "o"))
        if self.flexible:
            if not tagged:
                body.append("o.append(0)")
            else:
                body.append("k = 0")
                body.append("tb = bytearray()")
                for f in sorted(tagged, key=lambda g: g.tag):
                    default = self._const(f.default_value())
                    body.append(f"x = d.get({f.name!r}, {default})")
                    body.append(f"if x != {default}:")
                    body.append("    t = bytearray()")
                    body.extend("    " + line for line in self._write_field(f, "t"))
                    body.append(f"    _wuv(tb, {f.tag})")
                    body.append("    _wuv(tb, len(t))")
                    body.append("    tb += t")
                    body.append("    k += 1")
                body.append("_wuv(o, k)")
                body.append("o += tb")
        body.append("return o")
        self.defs.append("\n".join([f"def {name}(o, d, ch):", *("    " + line for line in body)]))
        return name

    def _write_length(self, out: str, expr: str) -> list[str]:
        if self.flexible:
            return [f"l = {expr} + 1", "if l < 128:", f"    {out}.append(l)", "else:", f"    _wuv({out}, l)"]
        return [f"{out} += _pi({expr})"]

    def _write_null(self, f: Field, out: str) -> list[str]:
        """Lines writing None: null where the field is nullable, else the empty value."""
        nullable = f.nullable_in(self.version)
        if self.flexible:
            return [f"{out}.append({0 if nullable else 1})"]
        width = 2 if f.type == "string" else 4
        null = bytes((255,)) * width if nullable else bytes(width)
        return [f"{out} += {null!r}"]

    def _write_field(self, f: Field, out: str) -> list[str]:
        """Lines appending the value ``x`` of field ``f`` to the bytearray named ``out``."""
        t = f.type
        if t in prim.FIXED:
            pack = self._const(struct.Struct(">" + prim.FIXED[t][0]).pack)
            return [f"{out} += {pack}({'_ub(x)' if t == 'uuid' else 'x'})"]
        if t == "{}":
            write = f"{out} = {self._struct_writer(f.fields)}({out}, x, ch)"
            if f.nullable_in(self.version):
                return ["if x is None:", f"    {out} += b'\\xff'", "else:", f"    {out} += b'\\x01'", f"    {write}"]
            return ["if x is None:", "    x = {}", write]
        lines = ["if x is None:", *("    " + line for line in self._write_null(f, out)), "else:"]
        if t == "string":
            lines += ["    x = x.encode()"]
            if self.flexible:
                lines += ["    " + line for line in self._write_length(out, "len(x)")]
            else:
                lines += [f"    {out} += _ph(len(x))"]
            return [*lines, f"    {out} += x"]
        if t == "bytes":
            return [*lines, *("    " + line for line in self._write_length(out, "_nb(x)")), f"    {out} += x"]
        if t == "records":
            if out != "o":
                raise ValueError(f"records field {f.name} in a tagged field")
            return [
                *lines,
                "    if type(x) is not list:",
                "        x = [x]",
                "    s = 0",
                "    for y in x:",
                "        s += _nb(y)",
                *("    " + line for line in self._write_length(out, "s")),
                "    if s:",
                "        ch.append(o)",
                "        ch.extend(x)",
                "        o = bytearray()",
            ]
        lines += ["    " + line for line in self._write_length(out, "len(x)")]
        element = f.element
        if element is None:
            sub = self._struct_writer(f.fields)
            return [*lines, "    for y in x:", f"        {out} = {sub}({out}, y, ch)"]
        if element in prim.FIXED and element != "uuid":
            return [*lines, f"    {out} += _pack('>' + str(len(x)) + '{prim.FIXED[element][0]}', *x)"]
        if element == "string":
            return [*lines, "    for y in x:", f"        _wstr({out}, y, {self.flexible}, False)"]
        raise ValueError(f"arrays of {element} are not supported by the codec ({f.name})")
