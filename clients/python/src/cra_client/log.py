"""The transparency log, checked by the client (``specs/tlog.md``): C2SP signed notes and
checkpoints, and RFC 9162 inclusion and consistency proofs.

Hashing is the standard library's; the Ed25519 check of a checkpoint's signature uses the
``cryptography`` package (install ``cra-client[log]``), an implementation cra did not write.
A leaf's data is the 32 raw bytes of an event's ``event_hash``.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

_SIGNATURE_PREFIX = "\u2014 "


class LogError(Exception):
    """A key, note, checkpoint or proof that does not check, and why."""


@dataclass(frozen=True)
class VerifierKey:
    """A C2SP verifier key ``<name>+<hex key id>+<base64(0x01 || Ed25519 key)>``."""

    name: str
    key_id: bytes
    public_key: bytes

    @classmethod
    def parse(cls, text: str) -> VerifierKey:
        try:
            name, hex_id, encoded = text.strip().split("+", 2)
            raw = base64.b64decode(encoded, validate=True)
            key_id = bytes.fromhex(hex_id)
        except ValueError as bad:
            raise LogError(f"not a verifier key (name+hex id+base64 key): {bad}") from None
        if len(raw) != 33 or raw[0] != 0x01 or len(key_id) != 4:
            raise LogError("the verifier key is not an Ed25519 key (type 0x01, 32 bytes)")
        expected = hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4]
        if expected != key_id:
            raise LogError("the verifier key's id does not match its name and key")
        return cls(name, key_id, raw[1:])


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint whose signature checked: the log's origin, its size and its root."""

    origin: str
    size: int
    root: bytes


def open_checkpoint(note: str, key: VerifierKey) -> Checkpoint:
    """The checkpoint in the signed note ``note``, once ``key`` signed it (C2SP tlog-checkpoint
    over signed-note); :class:`LogError` otherwise."""
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    except ImportError:
        raise LogError(
            "checking a checkpoint's signature needs the cryptography package: "
            "pip install 'cra-client[log]'"
        ) from None

    text, sep, signatures = note.partition("\n\n")
    if not sep or not text:
        raise LogError("not a signed note: no blank line before its signatures")
    text += "\n"
    verifier = Ed25519PublicKey.from_public_bytes(key.public_key)
    signed = False
    for line in signatures.splitlines():
        if not line.startswith(_SIGNATURE_PREFIX):
            raise LogError(f"not a signature line: {line!r}")
        name, _, encoded = line[len(_SIGNATURE_PREFIX):].partition(" ")
        try:
            raw = base64.b64decode(encoded, validate=True)
        except ValueError:
            raise LogError(f"a signature that is not base64: {line!r}") from None
        if name != key.name or raw[:4] != key.key_id:
            continue
        try:
            verifier.verify(raw[4:], text.encode())
        except InvalidSignature:
            raise LogError(f"the signature by {key.name} does not verify") from None
        signed = True
    if not signed:
        raise LogError(f"the note carries no signature by {key.name}")
    lines = text.splitlines()
    if len(lines) < 3 or lines[0] != key.name:
        raise LogError("not a checkpoint of this log: origin, size and root lines expected")
    if not lines[1].isdigit() or (lines[1] != "0" and lines[1].startswith("0")):
        raise LogError(f"a checkpoint size that is not a decimal number: {lines[1]!r}")
    root = base64.b64decode(lines[2], validate=True)
    if len(root) != 32:
        raise LogError("a checkpoint root that is not 32 bytes")
    return Checkpoint(lines[0], int(lines[1]), root)


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def verify_inclusion(data: bytes, index: int, size: int, proof: list[bytes], root: bytes) -> None:
    """RFC 9162 §2.1.3.2: ``data`` is leaf ``index`` of the tree of ``size`` with ``root``."""
    if index >= size:
        raise LogError(f"leaf {index} is not in a tree of {size}")
    fn, sn, r = index, size - 1, leaf_hash(data)
    for p in proof:
        if sn == 0:
            raise LogError("the inclusion proof is longer than the tree allows")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0 or r != root:
        raise LogError("the inclusion proof does not lead to the checkpoint's root")


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: list[bytes]
) -> None:
    """RFC 9162 §2.1.4.2: the tree of ``new_size`` extends the tree of ``old_size``."""
    if old_size > new_size:
        raise LogError(f"a tree of {new_size} cannot extend one of {old_size}")
    if old_size == new_size:
        if proof or old_root != new_root:
            raise LogError("two trees of one size with other roots")
        return
    if old_size == 0:
        if proof:
            raise LogError("a proof from the empty tree must be empty")
        return
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    if not path:
        raise LogError("an empty consistency proof")
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise LogError("the consistency proof is longer than the trees allow")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0 or fr != old_root or sr != new_root:
        raise LogError("the consistency proof does not join the two roots")
