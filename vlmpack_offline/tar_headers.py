"""Tar headers read the way stdlib ``tarfile`` reads them, without its per-member cost.

``HeaderReader`` walks a tar like ``tarfile.TarFile(fileobj=..., mode="r")`` does: its constructor reads the
first member (raising ``tarfile.ReadError`` where ``TarFile()`` would), ``next()`` returns the next member or
None, ``offset`` is where the next header starts. Same members, same names, same data offsets, same failures,
because each step follows ``tarfile.py`` (CPython 3.11: ``TarFile.next``, ``TarInfo.frombuf``,
``_proc_builtin``, ``_proc_gnulong``, ``_proc_sparse``, ``_proc_pax``, ``_apply_pax_info``); what it saves:

    tarfile                                          here
    a read(512) + seek per header                    one read per window of the file, sized by how far apart
                                                     the headers lie: up to 1 MiB while they follow each other
                                                     closely, 4 KiB where members' data lies between them
                                                     (that data is never read: the scan reads what it uses)
    a TarInfo with 20 fields decoded                 a ``Header`` with the 5 fields a reader needs; the other
                                                     number fields checked (they can fail the header), not kept
    two struct sums per header for the checksum      one Adler-32 byte sum; the signed sum only when it fails

Where ``tarfile`` crashes, loops or yields what no reader can read on a hostile header (a negative size:
a file of -5 bytes, or a step back to an earlier header, forever; a long-name or PAX header of negative
size; a GNU sparse map that is not numbers; a cut sparse extension block; thousands of nested long-name
headers), the header is read as invalid instead, so the caller records a damaged member and goes on.
Everywhere else the members are tarfile's, checked on thousands of damaged tars by
tests/test_tar_fast_reader.py.
"""

from __future__ import annotations

import re
import tarfile
import zlib
from dataclasses import dataclass
from tarfile import (
    BLOCKSIZE,
    EmptyHeaderError,
    EOFHeaderError,
    InvalidHeaderError,
    ReadError,
    TruncatedHeaderError,
)

__all__ = ["Header", "HeaderReader"]

_WINDOW = 1 << 20  # bytes read at once at most, while headers follow each other closely
_PROBE = 4 << 10  # bytes read at least: a header reached by skipping members' data, with what small members follow
_MAX_EXTENSION = 16 << 20  # bytes of one long-name or PAX header's data: more is hostile (names are < 4 KiB)
_MAX_NESTING = 64  # long-name / PAX headers before one member: more is hostile (tarfile would recurse until it fails)

_ENCODING = tarfile.ENCODING  # what TarFile() decodes names with (the file-system encoding)
_ERRORS = "surrogateescape"  # TarFile()'s default: undecodable bytes kept as surrogates
_LONG = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
_PAX = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
_OCTAL = re.compile(rb" *[0-7]+ *(?:\0.*)?|\0.*| *", re.DOTALL)  # number fields int(..., 8) reads as it is
_NUMBERS = re.compile(  # from byte 100: mode uid gid size mtime chksum, 173 bytes of type and names, devmajor devminor
    rb"(?:[0-7]{7}\0){3}([0-7]{11})\0[0-7]{11}\0([0-7]{6})\0 .{173}(?:[0-7]{7}\0|\0{8}){2}", re.DOTALL)
_PAX_RECORD = re.compile(rb"(\d+) ([^=]+)=")
_PAX_CHARSET = re.compile(rb"\d+ hdrcharset=([^\n]+)\n")


class _Hostile(Exception):
    """A header tarfile would crash or loop on; read as an invalid header."""


@dataclass(slots=True)
class Header:
    """One member as ``TarFile.next()`` returns it, reduced to what a member reader uses.

    Not frozen: long-name and PAX headers patch the member read after them, as tarfile patches its TarInfo.
    """

    name: str  # member path (GNU long name / PAX path applied)
    type: bytes  # typeflag, e.g. b"0", b"5", b"S"
    size: int  # data size (a sparse member: its full size)
    linkname: str  # a link's target
    offset_data: int = 0  # where the member's data starts in the file
    sparse: bool = False  # a GNU sparse member (old ``S`` type or PAX GNU.sparse records)

    def isreg(self) -> bool:
        return self.type in tarfile.REGULAR_TYPES

    def isdir(self) -> bool:
        return self.type == tarfile.DIRTYPE

    def issym(self) -> bool:
        return self.type == tarfile.SYMTYPE

    def islnk(self) -> bool:
        return self.type == tarfile.LNKTYPE

    def issparse(self) -> bool:
        return self.sparse


class _Window:
    """Bytes of an open source by position, from one large read at a time (``read(pos, n)`` = read at pos).

    How much one read takes follows where the headers lie: a read that starts past the end of the last one
    (members' data skipped, never read) takes ``_PROBE`` bytes, as the header and any small members after it
    need; one that starts inside or at the end of the last one (headers close together: small members) takes
    twice the last, up to ``_WINDOW``. Image-sized members then cost a 4 KiB read per header, not their data
    copied twice (here and where the scan reads it); text-sized ones one read per thousands of headers."""

    __slots__ = ("_handle", "_read", "_data", "_base", "_end", "_want")

    def __init__(self, handle, read_range) -> None:
        self._handle, self._read = handle, read_range
        self._data, self._base, self._end = b"", 0, 0
        self._want = _PROBE

    def read(self, pos: int, size: int) -> bytes:
        if self._base <= pos and pos + size <= self._end:
            start = pos - self._base
            return self._data[start : start + size]
        self._want = _PROBE if not self._base <= pos <= self._end else min(2 * self._want, _WINDOW)
        self._data, self._base = self._read(self._handle, pos, max(size, self._want)), pos
        self._end = pos + len(self._data)
        return self._data[:size]


def _nti(field: bytes) -> int:
    """``tarfile.nti``: the common octal fields by one match, anything else by tarfile itself."""
    if _OCTAL.fullmatch(field):
        digits = field.split(b"\0", 1)[0].strip()
        return int(digits, 8) if digits else 0
    return tarfile.nti(field)  # base-256, odd spacing, or invalid (raises InvalidHeaderError)


def _block(count: int) -> int:
    return -(-count // BLOCKSIZE) * BLOCKSIZE  # tarfile's TarInfo._block, negative counts included


def _byte_sum(buf: bytes) -> int:
    """Sum of a 512-byte block's bytes: Adler-32's first sum is 1 + the byte sum, exact below 65521 (256 bytes)."""
    return (zlib.adler32(buf[:256]) & 0xFFFF) + (zlib.adler32(buf[256:]) & 0xFFFF) - 2


def _frombuf(buf: bytes) -> tuple[Header, int, bool]:
    """``TarInfo.frombuf``: the header, the ``S`` member's full size, and whether sparse blocks follow."""
    if not buf:
        raise EmptyHeaderError("empty header")
    if len(buf) != BLOCKSIZE:
        raise TruncatedHeaderError("truncated header")
    numbers = _NUMBERS.match(buf, 100)  # all number fields as tarfile and GNU tar write them
    if numbers is not None:
        chksum = int(numbers.group(2), 8)
    elif buf.count(0) == BLOCKSIZE:
        raise EOFHeaderError("end of file header")
    else:
        chksum = _nti(buf[148:156])
    if chksum != 256 + _byte_sum(buf) - sum(buf[148:156]) and chksum not in tarfile.calc_chksums(buf):
        raise InvalidHeaderError("bad checksum")
    if numbers is not None:
        size = int(numbers.group(1), 8)
    else:  # mode, uid, gid, mtime, devmajor, devminor are not used, but a bad one fails the header
        for start, end in ((100, 108), (108, 116), (116, 124), (136, 148), (329, 337), (337, 345)):
            _nti(buf[start:end])
        size = _nti(buf[124:136])
    kind = buf[156:157]
    name = buf[0:100].split(b"\0", 1)[0].decode(_ENCODING, _ERRORS)
    link = buf[157:257].split(b"\0", 1)[0].decode(_ENCODING, _ERRORS) if kind in b"12K" else ""
    header = Header(name, kind, size, link)
    if kind == tarfile.AREGTYPE and name.endswith("/"):
        header.type = tarfile.DIRTYPE
    full_size, extended = 0, False
    if kind == tarfile.GNUTYPE_SPARSE:
        for pos in range(386, 482, 12):
            _nti(buf[pos : pos + 12])  # the four (offset, numbytes) pairs
        extended, full_size = bool(buf[482]), _nti(buf[483:495])
    if header.type == tarfile.DIRTYPE:
        header.name = name.rstrip("/")
    if buf[345] and kind not in tarfile.GNU_TYPES:  # a ustar prefix (GNU headers keep times here: tarfile too)
        prefix = buf[345:500].split(b"\0", 1)[0].decode(_ENCODING, _ERRORS)
        header.name = prefix + "/" + header.name
    return header, full_size, extended


class HeaderReader:
    """``tarfile.TarFile(fileobj=handle, mode="r")`` positioned at ``start``, for reading headers only.

    ``read_range(handle, pos, n)`` reads n bytes at pos (fewer at the end of the file); ``file_size`` bounds
    what a long-name or PAX header may make it read.
    """

    def __init__(self, handle, start: int, file_size: int, read_range) -> None:
        self._file = _Window(handle, read_range)
        self._size = file_size
        self.offset = start  # where the next header starts (TarFile.offset)
        self._pos = start  # where TarFile's file object would stand
        self._globals: dict[str, str] = {}  # PAX global ('g') records so far (TarFile.pax_headers)
        self._first: Header | None = None
        self._first = self.next()

    def next(self) -> Header | None:
        """``TarFile.next()``: the next member, None at the end or at a bad header; ReadError as it raises."""
        if self._first is not None:
            first, self._first = self._first, None
            return first
        if self.offset != self._pos:
            if self.offset == 0:
                return None
            if self.offset > self._size or not self._read(self.offset - 1, 1):  # (past the end: not even a read)
                raise ReadError("unexpected end of data")
        at = self.offset
        try:
            member = self._member(0)
            if member.size < 0 and member.type in tarfile.REGULAR_TYPES and not member.sparse:
                raise _Hostile(f"negative file size {member.size}")  # tarfile yields it; no reader can read it
            if self.offset <= at and not self.offset == at == 0:  # (at 0, tarfile's next() just ends the walk)
                raise _Hostile("the next header would be this one or an earlier one")  # tarfile loops over them
            return member
        except EOFHeaderError:
            return None
        except (InvalidHeaderError, EmptyHeaderError, TruncatedHeaderError, _Hostile) as error:
            self.offset = at  # a bad header moves nothing (tarfile's offset is only set once a member is read)
            if at == 0:
                raise ReadError(str(error)) from None
            return None
        except _Subsequent as error:
            self.offset = at
            raise ReadError(str(error)) from None

    def _read(self, pos: int, size: int) -> bytes:
        data = self._file.read(pos, size)
        self._pos = pos + len(data)
        return data

    def _read_on(self, size: int) -> bytes:
        """``fileobj.read(size)`` from the current position, never past the end of the file.

        A negative size (``read`` raises ValueError for it) or more than ``_MAX_EXTENSION`` bytes for one
        long-name or PAX header is hostile.
        """
        size = min(size, max(self._size - self._pos, 0))
        if not 0 <= size <= _MAX_EXTENSION:
            raise _Hostile(f"a long-name, PAX or sparse header of {size} bytes")
        return self._read(self._pos, size)

    def _member(self, depth: int) -> Header:
        """``TarInfo.fromtarfile``: one header (and the long-name / PAX headers that lead to it)."""
        if depth > _MAX_NESTING:
            raise _Hostile(f"more than {_MAX_NESTING} long-name or PAX headers in a row")
        header, full_size, extended = _frombuf(self._read(self._pos, BLOCKSIZE))
        if header.type in _LONG:
            return self._long_name(header, depth)
        if header.type == tarfile.GNUTYPE_SPARSE:
            return self._old_sparse(header, full_size, extended)
        if header.type in _PAX:
            return self._pax(header, depth)
        return self._builtin(header)

    def _next_of(self, depth: int) -> Header:
        try:
            return self._member(depth + 1)
        except (tarfile.HeaderError, _Hostile) as error:
            raise _Subsequent(str(error)) from None

    def _builtin(self, header: Header) -> Header:
        header.offset_data = self._pos
        self.offset = header.offset_data + (_block(header.size) if _has_data(header) else 0)
        if self._globals:
            _apply_pax(header, self._globals)
            if header.type == tarfile.DIRTYPE:
                header.name = header.name.rstrip("/")
        return header

    def _long_name(self, header: Header, depth: int) -> Header:
        data = self._read_on(_block(header.size))
        member = self._next_of(depth)
        if header.type == tarfile.GNUTYPE_LONGNAME:
            member.name = tarfile.nts(data, _ENCODING, _ERRORS)
        else:
            member.linkname = tarfile.nts(data, _ENCODING, _ERRORS)
        if member.type == tarfile.DIRTYPE:
            member.name = member.name.removesuffix("/")
        return member

    def _old_sparse(self, header: Header, full_size: int, extended: bool) -> Header:
        while extended:
            block = self._read_on(BLOCKSIZE)
            if len(block) != BLOCKSIZE:
                raise _Hostile("sparse extension block cut short")  # tarfile: IndexError
            for pos in range(0, 504, 12):
                _nti(block[pos : pos + 12])  # tarfile reads up to 21 pairs; a bad number fails the header
            extended = bool(block[504])
        header.offset_data, header.sparse = self._pos, True
        self.offset = header.offset_data + _block(header.size)
        header.size = full_size
        return header

    def _pax(self, header: Header, depth: int) -> Header:
        data = self._read_on(_block(header.size))
        records = self._globals if header.type == tarfile.XGLTYPE else dict(self._globals)
        charset = _PAX_CHARSET.search(data) if b"hdrcharset=" in data else None
        if charset is not None:
            try:
                records["hdrcharset"] = charset.group(1).decode("utf-8")
            except UnicodeDecodeError:
                raise _Hostile("PAX hdrcharset is not UTF-8") from None  # tarfile: UnicodeDecodeError
        names_in = _ENCODING if records.get("hdrcharset") == "BINARY" else "utf-8"
        pos = 0
        while match := _PAX_RECORD.match(data, pos):
            length = int(match.group(1))
            if length == 0:
                raise InvalidHeaderError("invalid header")
            value = data[match.end(2) + 1 : match.start(1) + length - 1]
            keyword = _decode(match.group(2), "utf-8", "utf-8")
            if keyword in tarfile.PAX_NAME_FIELDS:
                records[keyword] = _decode(value, names_in, _ENCODING)
            else:
                records[keyword] = _decode(value, "utf-8", "utf-8")
            pos += length
        member = self._next_of(depth)
        if "GNU.sparse.map" in records or "GNU.sparse.size" in records:
            member.sparse = True
            if "GNU.sparse.map" in records and not _numbers(records["GNU.sparse.map"].split(",")):
                raise _Hostile("GNU.sparse.map is not a list of numbers")  # tarfile: ValueError
        elif records.get("GNU.sparse.major") == "1" and records.get("GNU.sparse.minor") == "0":
            member.sparse = True
            member.offset_data = self._sparse_map_10()
        if header.type != tarfile.XGLTYPE:
            _apply_pax(member, records)
            if "size" in records:
                self.offset = member.offset_data + (_block(member.size) if _has_data(member) else 0)
        return member

    def _sparse_map_10(self) -> int:
        """``_proc_gnusparse_10``: skip the sparse map that starts the data; where the data really starts."""
        buf = self._read_on(BLOCKSIZE)
        if b"\n" not in buf:
            raise _Hostile("GNU sparse 1.0 map: no count")  # tarfile: ValueError
        count, buf = buf.split(b"\n", 1)
        if not _numbers([count]):
            raise _Hostile("GNU sparse 1.0 map: the count is not a number")  # tarfile: ValueError
        numbers, wanted = 0, int(count) * 2
        while numbers < wanted:
            if b"\n" not in buf:
                buf += self._read_on(BLOCKSIZE)  # one block more, as tarfile reads
            if b"\n" not in buf:
                raise _Hostile("GNU sparse 1.0 map cut short")  # tarfile: ValueError
            number, buf = buf.split(b"\n", 1)
            if not _numbers([number]):
                raise _Hostile("GNU sparse 1.0 map holds a non-number")  # tarfile: ValueError
            numbers += 1
        return self._pos


class _Subsequent(tarfile.HeaderError):
    """``tarfile.SubsequentHeaderError``: the header after a long-name or PAX header is bad."""


def _has_data(header: Header) -> bool:
    return header.type in tarfile.REGULAR_TYPES or header.type not in tarfile.SUPPORTED_TYPES


def _numbers(texts) -> bool:
    try:
        for text in texts:
            int(text)
    except ValueError:
        return False
    return True


def _decode(value: bytes, encoding: str, fallback: str) -> str:
    """``TarInfo._decode_pax_field``: strict first, then the fallback keeping bad bytes as surrogates."""
    try:
        return value.decode(encoding, "strict")
    except UnicodeDecodeError:
        return value.decode(fallback, _ERRORS)


def _apply_pax(header: Header, records: dict[str, str]) -> None:
    """``TarInfo._apply_pax_info`` for the fields a member reader uses, in the records' order as tarfile does."""
    for keyword, value in records.items():
        if keyword in ("path", "GNU.sparse.name"):
            header.name = value.rstrip("/") if keyword == "path" else value
        elif keyword == "linkpath":
            header.linkname = value
        elif keyword == "size":
            try:
                header.size = int(value)
            except ValueError:
                header.size = 0
        elif keyword in ("GNU.sparse.size", "GNU.sparse.realsize"):
            if not _numbers([value]):
                raise _Hostile(f"{keyword} is not a number")  # tarfile: ValueError
            header.size = int(value)
