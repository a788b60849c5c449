"""The fields of a GGUF file's header that size llama.cpp's KV cache, read on a node (stdlib only).

A GGUF file starts: magic b"GGUF", version (u32, 2 or 3), tensor count (u64), metadata count (u64), then each
metadata entry as a key (u64 length, UTF-8), a value type (u32) and its value (strings: u64 length and bytes;
arrays: item type u32, count u64, items). Everything is little-endian. The file may come from anywhere, so
every length is bounded and the read stops at the first thing out of shape; only integers and the
architecture name are kept, and only under the keys asked for. Its time is bounded too: strings are skipped
by their length (never read), and a header that takes longer than MAX_SECONDS to walk (tens of millions of
empty strings fit in the size bound) is refused; a real vocabulary of 256k tokens takes a tenth of that.
"""

from __future__ import annotations

import os
import struct
import time
from typing import BinaryIO

MAGIC = b"GGUF"
# value type -> struct format of a fixed-size value (8 is a string, 9 an array)
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
MAX_ENTRIES = 1 << 20
MAX_KEY = 1 << 16
MAX_STRING = 1 << 24
MAX_ITEMS = 1 << 26
MAX_HEADER = 1 << 30  # a tokenizer's vocabulary is tens of MB at most
MAX_SECONDS = 1.0
CHECK_EVERY = 4096  # entries between two looks at the clock
CHUNK = 1 << 20


class GGUFError(ValueError):
    pass


def _take(fh: BinaryIO, size: int) -> bytes:
    data = fh.read(size)
    if len(data) != size:
        raise GGUFError("the header ends early")
    if fh.tell() > MAX_HEADER:
        raise GGUFError(f"the header runs past {MAX_HEADER} bytes")
    return data


def _unpack(fh: BinaryIO, fmt: str) -> int | float | bool:
    return struct.unpack(fmt, _take(fh, struct.calcsize(fmt)))[0]


def _string(fh: BinaryIO, limit: int) -> bytes:
    length = int(_unpack(fh, "<Q"))
    if length > limit:
        raise GGUFError(f"a string of {length} bytes")
    return _take(fh, length)


def _pass_string(fh: BinaryIO) -> None:
    """Past one string without reading it: its length, then a seek."""
    length = int(_unpack(fh, "<Q"))
    if length > MAX_STRING:
        raise GGUFError(f"a string of {length} bytes")
    _seek(fh, fh.tell() + length)


def _pass_strings(fh: BinaryIO, count: int, deadline: float) -> None:
    """Past `count` strings (a vocabulary): their lengths walked in a buffer read a chunk at a time."""
    start = fh.tell()
    buffer, offset, done = b"", 0, 0  # buffer holds the file from `start`; offset: the next string's length
    length_of = struct.Struct("<Q").unpack_from
    while done < count:
        if offset + 8 > len(buffer):
            start += offset
            fh.seek(start)
            buffer, offset = fh.read(CHUNK), 0
            if len(buffer) < 8:
                raise GGUFError("the header ends early")
            _in_time(deadline)
        (length,) = length_of(buffer, offset)
        if length > MAX_STRING:
            raise GGUFError(f"a string of {length} bytes")
        offset += 8 + length
        done += 1
    _seek(fh, start + offset)


def _seek(fh: BinaryIO, end: int) -> None:
    """To `end` (a seek past the file's end is caught by the next read, which comes up short)."""
    if end > MAX_HEADER:
        raise GGUFError(f"the header runs past {MAX_HEADER} bytes")
    fh.seek(end)


def _in_time(deadline: float) -> None:
    if time.monotonic() > deadline:
        raise GGUFError(f"the header takes more than {MAX_SECONDS:g} s to read (a real one takes a tenth of that)")


def _skip(fh: BinaryIO, kind: int, deadline: float) -> None:
    if kind in SCALARS:
        _take(fh, struct.calcsize(SCALARS[kind]))
    elif kind == STRING:
        _pass_string(fh)
    elif kind == ARRAY:
        item, count = int(_unpack(fh, "<I")), int(_unpack(fh, "<Q"))
        if count > MAX_ITEMS:
            raise GGUFError(f"an array of {count} items")
        if item in SCALARS:  # one seek for the lot
            _seek(fh, fh.tell() + count * struct.calcsize(SCALARS[item]))
        elif item == STRING:
            _pass_strings(fh, count, deadline)
        else:  # arrays of arrays: no field sparkplay reads is one, and llama.cpp writes none
            raise GGUFError(f"an array of value type {item}")
    else:
        raise GGUFError(f"value type {kind} is not GGUF's")


def header_fields(path: str, suffixes: tuple[str, ...], seconds: float = MAX_SECONDS) -> dict:
    """general.architecture and the integer fields whose keys end with one of `suffixes`."""
    found: dict = {}
    deadline = time.monotonic() + seconds
    with open(path, "rb") as fh:
        if _take(fh, 4) != MAGIC:
            raise GGUFError(f"{path} is not a GGUF file")
        version = int(_unpack(fh, "<I"))
        if version not in (2, 3):
            raise GGUFError(f"{path} is GGUF version {version}; llama.cpp writes 2 or 3")
        _unpack(fh, "<Q")
        entries = int(_unpack(fh, "<Q"))
        if entries > MAX_ENTRIES:
            raise GGUFError(f"{path} claims {entries} metadata entries")
        for entry in range(entries):
            if entry % CHECK_EVERY == 0:
                _in_time(deadline)
            key = _string(fh, MAX_KEY).decode("utf-8", errors="replace")
            kind = int(_unpack(fh, "<I"))
            if key == "general.architecture" and kind == STRING:
                found[key] = _string(fh, 256).decode("utf-8", errors="replace")
            elif key.endswith(suffixes) and kind in SCALARS and kind not in (6, 7, 12):
                found[key] = int(_unpack(fh, SCALARS[kind]))
            else:
                _skip(fh, kind, deadline)
    return found


def headers(paths: list, suffixes: tuple[str, ...]) -> dict:
    """header_fields of each file, None for one that is absent."""
    return {p: header_fields(p, suffixes) if os.path.isfile(p) else None for p in paths}
