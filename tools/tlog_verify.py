#!/usr/bin/env python3
"""Our own independent verifier of cra's transparency log (standard library only).

The algorithms are the specifications': RFC 6962 / RFC 9162 (Merkle Tree Hash, inclusion proof
verification §2.1.3.2, consistency proof verification §2.1.4.2), RFC 8032 (Ed25519 point
decoding §5.1.3 and verification §5.1.7), C2SP signed-note, tlog-checkpoint, tlog-proof@v1 and
tlog-cosignature (Ed25519 cosignature/v1).
The code is ours, written from those texts and not from cra-tlog, so that CI checks the Rust
crate against a second reading of the same specifications. Python's standard library has no
Ed25519, so verification is implemented below with integer arithmetic (only verification: it
never handles a private key, and it is not constant-time, which verification does not need).

Usage (exit 0 valid, 2 invalid with a one-line reason on stderr, 1 usage or read error; with
--json the result is printed as one JSON object on stdout):
  tlog_verify.py root [--json]
      Leaf data on stdin, hex, one leaf a line (`-` is the empty leaf); prints the RFC 6962
      root in hex. Zero leaves give SHA-256 of the empty string.
  tlog_verify.py inclusion (--leaf HASH | --leaf-data HEX) --index I --size N --root HEX
                 --proof HEX,HEX,... [--json]
      RFC 9162 §2.1.3.2. --leaf is the leaf hash; --leaf-data hashes the data first.
  tlog_verify.py consistency --old-size M --new-size N --old-root HEX --new-root HEX
                 --proof HEX,... [--json]
      RFC 9162 §2.1.4.2, and the two cases its algorithm leaves out: equal sizes (an empty
      proof, equal roots) and the empty old tree (an empty proof, the empty root).
  tlog_verify.py note --key VKEY [--key VKEY ...] FILE|- [--json]
      A C2SP signed note: signatures by unknown keys are ignored, a known key's signature that
      does not verify rejects the note, and one known signature must verify.
  tlog_verify.py checkpoint --origin ORIGIN --key VKEY [--key ...] FILE|- [--json]
      The note as above, with a verified signature by a key named ORIGIN, then the C2SP
      tlog-checkpoint body of that origin; prints its size and root (hex).
  tlog_verify.py proof (--leaf HASH | --leaf-data HEX) --origin ORIGIN --key VKEY [--key ...]
                 FILE|- [--json]
      A C2SP tlog-proof@v1: the checkpoint as above, then the leaf's inclusion at the proof's
      index against the checkpoint's root.
  tlog_verify.py cosignature --key VKEY FILE|- [--json]
      A C2SP cosignature/v1 (Ed25519): VKEY is the cosigner's key of type 0x04; every line of
      the note by that key (name and key ID) must be 8 timestamp bytes (1 to 2^63 - 1) and an
      Ed25519 signature of `cosignature/v1`, `time <timestamp>` and the note's text; prints the
      timestamp.
  tlog_verify.py ed25519 --public-key HEX --signature HEX --message HEX [--json]
      Plain RFC 8032 Ed25519 verification (for the RFC's test vectors).
  tlog_verify.py batch
      Many checks in one process: stdin has one JSON object a line, {"argv": [...], "stdin":
      "<text>"} ("stdin" is what `-` reads); stdout gets one JSON object a line, {"code": 0|1|2,
      "result": {...} or null, "reason": "..." or null}.
"""

import argparse
import base64
import binascii
import functools
import hashlib
import json
import sys

EXIT_VALID = 0
EXIT_READ = 1
EXIT_INVALID = 2


class Invalid(Exception):
    """The input was read but does not verify (exit 2)."""


class UsageError(Exception):
    """The command line or the input could not be read (exit 1)."""


# ----------------------------------------------------------------------------------------------
# RFC 6962 / RFC 9162 Merkle trees


def sha256(data):
    """SHA-256 of bytes."""
    return hashlib.sha256(data).digest()


def leaf_hash(data):
    """RFC 6962 §2.1: MTH({d}) = SHA-256(0x00 || d)."""
    return sha256(b"\x00" + data)


def node_hash(left, right):
    """RFC 6962 §2.1: SHA-256(0x01 || MTH(left) || MTH(right))."""
    return sha256(b"\x01" + left + right)


def largest_power_of_two_below(n):
    """The k of RFC 6962 §2.1: the largest power of two smaller than n (n > 1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def merkle_tree_hash(leaves, lo=0, hi=None):
    """RFC 6962 §2.1 Merkle Tree Hash of the leaf data leaves[lo:hi]."""
    if hi is None:
        hi = len(leaves)
    n = hi - lo
    if n == 0:
        return sha256(b"")
    if n == 1:
        return leaf_hash(leaves[lo])
    k = largest_power_of_two_below(n)
    return node_hash(merkle_tree_hash(leaves, lo, lo + k), merkle_tree_hash(leaves, lo + k, hi))


def verify_inclusion(leaf, index, size, proof, root):
    """RFC 9162 §2.1.3.2: raises Invalid unless `proof` leads from the leaf hash at `index` of
    the tree of `size` leaves to `root`."""
    if index >= size:
        raise Invalid("leaf index %d is not below the tree size %d" % (index, size))
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise Invalid("the inclusion proof is longer than the tree is deep")
        if fn % 2 == 1 or fn == sn:
            r = node_hash(p, r)
            while fn % 2 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise Invalid("the inclusion proof is shorter than the tree is deep")
    if r != root:
        raise Invalid("the inclusion proof leads to root %s, not %s" % (r.hex(), root.hex()))


def verify_consistency(old_size, new_size, old_root, new_root, proof):
    """RFC 9162 §2.1.4.2: raises Invalid unless `proof` shows the tree of `old_size` leaves
    with `old_root` is a prefix of the tree of `new_size` leaves with `new_root`."""
    if old_size > new_size:
        raise Invalid("the old size %d is larger than the new size %d" % (old_size, new_size))
    if old_size == 0 or old_size == new_size:
        # Outside the algorithm (which needs 0 < old < new): every tree extends the empty one,
        # and a tree is consistent with itself; both proofs are empty (RFC 9162 §2.1.4.1).
        if proof:
            raise Invalid("a consistency proof from size %d to %d is empty" % (old_size, new_size))
        expected = sha256(b"") if old_size == 0 else new_root
        if old_root != expected:
            raise Invalid("the old root is not the root the proof's sizes require")
        return
    # Step 1.
    if not proof:
        raise Invalid("the consistency proof is empty")
    path = list(proof)
    # Step 2.
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    # Steps 3 and 4.
    fn, sn = old_size - 1, new_size - 1
    while fn % 2 == 1:
        fn >>= 1
        sn >>= 1
    # Step 5.
    fr = sr = path[0]
    # Step 6.
    for c in path[1:]:
        if sn == 0:
            raise Invalid("the consistency proof is longer than the tree is deep")
        if fn % 2 == 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while fn % 2 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    # Step 7.
    if sn != 0:
        raise Invalid("the consistency proof is shorter than the tree is deep")
    if fr != old_root:
        raise Invalid("the consistency proof leads to old root %s, not %s" % (fr.hex(), old_root.hex()))
    if sr != new_root:
        raise Invalid("the consistency proof leads to new root %s, not %s" % (sr.hex(), new_root.hex()))


# ----------------------------------------------------------------------------------------------
# RFC 8032 Ed25519 verification (§5.1)

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = (-121665 * pow(121666, P - 2, P)) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)


def point_add(p1, p2):
    """§5.1.4: addition in extended homogeneous coordinates (X, Y, Z, T), x = X/Z, y = Y/Z,
    x*y = T/Z."""
    x1, y1, z1, t1 = p1
    x2, y2, z2, t2 = p2
    a = (y1 - x1) * (y2 - x2) % P
    b = (y1 + x1) * (y2 + x2) % P
    c = t1 * 2 * D * t2 % P
    d = z1 * 2 * z2 % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def point_double(p1):
    """§5.1.4: doubling."""
    x1, y1, z1, _ = p1
    a = x1 * x1 % P
    b = y1 * y1 % P
    c = 2 * z1 * z1 % P
    h = a + b
    e = h - (x1 + y1) * (x1 + y1)
    g = a - b
    f = c + g
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def scalar_multiply(k, point):
    """[k]point by double-and-add (verification only: no secret is involved)."""
    result = (0, 1, 1, 0)
    for bit in bin(k)[2:]:
        result = point_double(result)
        if bit == "1":
            result = point_add(result, point)
    return result


def points_equal(p1, p2):
    """Equality of two points in projective coordinates."""
    x1, y1, z1, _ = p1
    x2, y2, z2, _ = p2
    return (x1 * z2 - x2 * z1) % P == 0 and (y1 * z2 - y2 * z1) % P == 0


def recover_x(y, sign):
    """§5.1.3 steps 2 to 4: the x with x^2 = (y^2 - 1) / (d y^2 + 1) and parity `sign`, or
    None."""
    if y >= P:
        return None
    u = (y * y - 1) % P
    v = (D * y * y + 1) % P
    x = u * pow(v, 3, P) * pow(u * pow(v, 7, P), (P - 5) // 8, P) % P
    vxx = v * x * x % P
    if vxx == u:
        pass
    elif vxx == (-u) % P:
        x = x * SQRT_M1 % P
    else:
        return None
    if x == 0 and sign == 1:
        return None
    if x % 2 != sign:
        x = P - x
    return x


def decode_point(data):
    """§5.1.3: a 32-byte encoding to a point, or None."""
    if len(data) != 32:
        return None
    number = int.from_bytes(data, "little")
    sign = number >> 255
    y = number & ((1 << 255) - 1)
    x = recover_x(y, sign)
    if x is None:
        return None
    return (x, y, 1, x * y % P)


BASE = decode_point((4 * pow(5, P - 2, P) % P).to_bytes(32, "little"))


@functools.lru_cache(maxsize=4096)
def ed25519_verify(public_key, message, signature):
    """§5.1.7: whether `signature` (64 bytes) is the Ed25519 signature of `message` by
    `public_key` (32 bytes), with the cofactored equation [8][S]B = [8]R + [8][k]A'. A pure
    function, so remembered: a batch checking many proofs under one checkpoint verifies its
    signature once."""
    if len(public_key) != 32 or len(signature) != 64:
        return False
    a = decode_point(public_key)
    r = decode_point(signature[:32])
    if a is None or r is None:
        return False
    s = int.from_bytes(signature[32:], "little")
    if s >= L:
        return False
    k = int.from_bytes(hashlib.sha512(signature[:32] + public_key + message).digest(), "little")
    left = scalar_multiply(s, BASE)
    right = point_add(r, scalar_multiply(k % L, a))
    for _ in range(3):
        left = point_double(left)
        right = point_double(right)
    return points_equal(left, right)


# ----------------------------------------------------------------------------------------------
# Encodings


def decode_hex(text, what, length=None):
    """Hex text to bytes (UsageError if it is not hex or not `length` bytes)."""
    try:
        data = bytes.fromhex(text)
    except ValueError:
        raise UsageError("%s is not hex: %r" % (what, text[:80])) from None
    if length is not None and len(data) != length:
        raise UsageError("%s is %d bytes, not %d" % (what, len(data), length))
    return data


def decode_base64(text):
    """Canonical RFC 4648 §4 base64 to bytes, or None (padding required, no stray bits)."""
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    if base64.b64encode(data).decode("ascii") != text:
        return None
    return data


def parse_decimal(text):
    """An ASCII decimal without leading zeroes (unless it is 0), or None."""
    if not text or not all("0" <= c <= "9" for c in text):
        return None
    if len(text) > 1 and text[0] == "0":
        return None
    return int(text)


def hex_list(text, what):
    """`HEX,HEX,...` (or the empty string) to a list of 32-byte hashes."""
    if text == "":
        return []
    return [decode_hex(item, "%s hash %d" % (what, i + 1), 32) for i, item in enumerate(text.split(","))]


# ----------------------------------------------------------------------------------------------
# C2SP signed-note

ED25519_TYPE = 1
SIGNATURE_PREFIX = "\u2014 "


def valid_key_name(name):
    """signed-note: non-empty, no Unicode spaces, no plus."""
    return bool(name) and "+" not in name and not any(c.isspace() for c in name)


def key_id(name, sig_type, public_key):
    """signed-note: SHA-256(key name || 0x0A || type || public key)[:4], big-endian."""
    digest = sha256(name.encode("utf-8") + b"\n" + bytes([sig_type]) + public_key)
    return int.from_bytes(digest[:4], "big")


def parse_verifier_key(vkey):
    """`<name>+<hex key ID>+<base64(0x01 || public key)>` to (name, key ID, public key)."""
    parts = vkey.split("+", 2)  # names have no plus; base64 may
    if len(parts) != 3:
        raise UsageError("verifier key %r is not name+id+key" % vkey)
    name, id_hex, material = parts
    if not valid_key_name(name):
        raise UsageError("verifier key name %r is empty or has a space" % name)
    if len(id_hex) != 8 or any(c not in "0123456789abcdef" for c in id_hex):
        raise UsageError("verifier key %r: the key ID is not 8 lowercase hex digits" % vkey)
    data = decode_base64(material)
    if data is None or len(data) != 33 or data[0] != ED25519_TYPE:
        raise UsageError("verifier key %r: not base64 of 0x01 and a 32-byte Ed25519 key" % vkey)
    public_key = data[1:]
    if int(id_hex, 16) != key_id(name, ED25519_TYPE, public_key):
        raise UsageError("verifier key %r: the key ID is not the one its name and key give" % vkey)
    if decode_point(public_key) is None:
        raise UsageError("verifier key %r: the public key is not an Ed25519 point" % vkey)
    return (name, int(id_hex, 16), public_key)


COSIGNATURE_V1_TYPE = 0x04


def parse_cosigner_key(vkey):
    """`<name>+<hex key ID>+<base64(0x04 || public key)>` to (name, key ID, public key)."""
    parts = vkey.split("+", 2)
    if len(parts) != 3:
        raise UsageError("cosigner key %r is not name+id+key" % vkey)
    name, id_hex, material = parts
    if not valid_key_name(name):
        raise UsageError("cosigner key name %r is empty or has a space" % name)
    if len(id_hex) != 8 or any(c not in "0123456789abcdef" for c in id_hex):
        raise UsageError("cosigner key %r: the key ID is not 8 lowercase hex digits" % vkey)
    data = decode_base64(material)
    if data is None or len(data) != 33 or data[0] != COSIGNATURE_V1_TYPE:
        raise UsageError("cosigner key %r: not base64 of 0x04 and a 32-byte Ed25519 key" % vkey)
    public_key = data[1:]
    if int(id_hex, 16) != key_id(name, COSIGNATURE_V1_TYPE, public_key):
        raise UsageError("cosigner key %r: the key ID is not the one its name and key give" % vkey)
    if decode_point(public_key) is None:
        raise UsageError("cosigner key %r: the public key is not an Ed25519 point" % vkey)
    return (name, int(id_hex, 16), public_key)


def verify_cosignature(data, key):
    """tlog-cosignature, cosignature/v1: the lines of the note by `key` verify over its text;
    returns the timestamp of the first."""
    text, signatures = parse_note(data)
    name, kid, public_key = key
    mine = [signature for n, k, signature in signatures if (n, k) == (name, kid)]
    if not mine:
        raise Invalid("the note has no cosignature by %s+%08x" % (name, kid))
    timestamps = []
    for signature in mine:
        if len(signature) != 8 + 64:
            raise Invalid("a cosignature/v1 is 8 timestamp bytes and 64 signature bytes")
        timestamp = int.from_bytes(signature[:8], "big")
        if timestamp == 0 or timestamp > 2**63 - 1:
            raise Invalid("the cosignature's timestamp %d is not in 1..2^63-1" % timestamp)
        message = b"cosignature/v1\ntime " + str(timestamp).encode("ascii") + b"\n" + text.encode("utf-8")
        if not ed25519_verify(public_key, message, signature[8:]):
            raise Invalid("the cosignature by %s+%08x does not verify" % (name, kid))
        timestamps.append(timestamp)
    return timestamps[0]


def parse_note(data):
    """A signed note's bytes to (text, [(name, key ID, signature bytes)]); Invalid if
    malformed."""
    try:
        whole = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Invalid("the note is not UTF-8") from None
    for i, c in enumerate(whole):
        if c < " " and c != "\n":
            raise Invalid("the note has a control character at character %d" % i)
    if not whole.endswith("\n"):
        raise Invalid("the note does not end with a newline")
    split = whole.rfind("\n\n")
    if split < 0:
        raise Invalid("the note has no blank line before its signatures")
    text, block = whole[: split + 1], whole[split + 2 :]
    lines = block.split("\n")[:-1]
    if not lines:
        raise Invalid("the note has no signature lines")
    signatures = []
    for number, line in enumerate(lines, 1):
        if not line.startswith(SIGNATURE_PREFIX):
            raise Invalid("signature line %d does not start with an em dash and a space" % number)
        fields = line[len(SIGNATURE_PREFIX) :].split(" ")
        if len(fields) != 2 or not valid_key_name(fields[0]):
            raise Invalid("signature line %d is not `\u2014 <key name> <base64>`" % number)
        raw = decode_base64(fields[1])
        if raw is None or len(raw) < 5:
            raise Invalid("signature line %d is not base64 of a key ID and a signature" % number)
        signatures.append((fields[0], int.from_bytes(raw[:4], "big"), raw[4:]))
    return text, signatures


def verify_note(data, keys):
    """signed-note verification: returns (text, names of the keys whose signatures
    verified)."""
    text, signatures = parse_note(data)
    known = {(name, kid): public_key for name, kid, public_key in keys}
    verified = []
    for name, kid, signature in signatures:
        public_key = known.get((name, kid))
        if public_key is None:
            continue
        if not ed25519_verify(public_key, text.encode("utf-8"), signature):
            raise Invalid("the signature by known key %s+%08x does not verify" % (name, kid))
        verified.append(name)
    if not verified:
        raise Invalid("no signature on the note is by a known key")
    return text, verified


# ----------------------------------------------------------------------------------------------
# C2SP tlog-checkpoint and tlog-proof@v1


def parse_checkpoint(text):
    """A checkpoint body to (origin, size, root, extension lines); Invalid if malformed."""
    if not text.endswith("\n"):
        raise Invalid("the checkpoint does not end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3 or any(line == "" for line in lines):
        raise Invalid("a checkpoint is at least three non-empty lines")
    origin, size_line, root_line = lines[0], lines[1], lines[2]
    size = parse_decimal(size_line)
    if size is None or size >= 2**64:
        raise Invalid("checkpoint line 2 is not a decimal tree size: %r" % size_line)
    root = decode_base64(root_line)
    if root is None or len(root) != 32:
        raise Invalid("checkpoint line 3 is not a base64 32-byte root hash")
    return origin, size, root, lines[3:]


def open_checkpoint(data, origin, keys):
    """Verifies a signed checkpoint of `origin` signed by a key named `origin`; returns
    (size, root, extensions)."""
    text, verified = verify_note(data, keys)
    if origin not in verified:
        raise Invalid("no verified signature on the checkpoint is by the log's key %s" % origin)
    found, size, root, extensions = parse_checkpoint(text)
    if found != origin:
        raise Invalid("the checkpoint is of origin %r, not %r" % (found, origin))
    return size, root, extensions


PROOF_HEADER = "c2sp.org/tlog-proof@v1"


def parse_tlog_proof(data):
    """A tlog-proof@v1 to (extra or None, index, inclusion proof, checkpoint note bytes)."""
    try:
        whole = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Invalid("the proof is not UTF-8") from None
    if not whole.startswith(PROOF_HEADER + "\n"):
        raise Invalid("the first line is not %s" % PROOF_HEADER)
    rest = whole[len(PROOF_HEADER) + 1 :]
    split = rest.find("\n\n")
    if split < 0:
        raise Invalid("no empty line before the checkpoint")
    head, checkpoint = rest[:split].split("\n"), rest[split + 2 :]
    extra = None
    if head[0].startswith("extra "):
        extra = decode_base64(head[0][len("extra ") :])
        if extra is None:
            raise Invalid("the extra line is not base64")
        head = head[1:]
    if not head or not head[0].startswith("index "):
        raise Invalid("no index line")
    index = parse_decimal(head[0][len("index ") :])
    if index is None:
        raise Invalid("the index is not a decimal without leading zeroes")
    proof = []
    for number, line in enumerate(head[1:], 1):
        hash_ = decode_base64(line)
        if hash_ is None or len(hash_) != 32:
            raise Invalid("inclusion proof line %d is not a base64 32-byte hash" % number)
        proof.append(hash_)
    return extra, index, proof, checkpoint.encode("utf-8")


# ----------------------------------------------------------------------------------------------
# Commands


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are UsageError, not an exit."""

    def error(self, message):
        raise UsageError(message)


def read_input(name, stdin):
    """The bytes of FILE, or of `stdin` (a callable) for `-`."""
    if name == "-":
        return stdin()
    try:
        with open(name, "rb") as handle:
            return handle.read()
    except OSError as error:
        raise UsageError("cannot read %s: %s" % (name, error.strerror)) from None


def the_leaf(args):
    """The leaf hash from --leaf or --leaf-data."""
    if (args.leaf is None) == (args.leaf_data is None):
        raise UsageError("give exactly one of --leaf (a leaf hash) and --leaf-data")
    if args.leaf is not None:
        return decode_hex(args.leaf, "--leaf", 32)
    return leaf_hash(decode_hex(args.leaf_data, "--leaf-data"))


def cmd_root(args, stdin):
    """root: the RFC 6962 root of the leaves on stdin."""
    try:
        text = stdin().decode("ascii")
    except UnicodeDecodeError:
        raise UsageError("the leaves are not ASCII hex") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    leaves = []
    for number, line in enumerate(lines, 1):
        line = line.strip()
        leaves.append(b"" if line == "-" else decode_hex(line, "leaf line %d" % number))
    root = merkle_tree_hash(leaves)
    return {"size": len(leaves), "root": root.hex()}, root.hex()


def cmd_inclusion(args, stdin):
    """inclusion: RFC 9162 §2.1.3.2."""
    leaf = the_leaf(args)
    root = decode_hex(args.root, "--root", 32)
    verify_inclusion(leaf, args.index, args.size, hex_list(args.proof, "proof"), root)
    return {"valid": True}, "valid"


def cmd_consistency(args, stdin):
    """consistency: RFC 9162 §2.1.4.2."""
    old_root = decode_hex(args.old_root, "--old-root", 32)
    new_root = decode_hex(args.new_root, "--new-root", 32)
    verify_consistency(args.old_size, args.new_size, old_root, new_root, hex_list(args.proof, "proof"))
    return {"valid": True}, "valid"


def cmd_note(args, stdin):
    """note: C2SP signed-note verification."""
    keys = [parse_verifier_key(k) for k in args.key]
    _, verified = verify_note(read_input(args.file, stdin), keys)
    return {"valid": True, "verified_by": verified}, "valid, signed by " + " ".join(verified)


def cmd_checkpoint(args, stdin):
    """checkpoint: a signed C2SP tlog-checkpoint of --origin."""
    keys = [parse_verifier_key(k) for k in args.key]
    size, root, extensions = open_checkpoint(read_input(args.file, stdin), args.origin, keys)
    result = {"valid": True, "size": size, "root": root.hex(), "extensions": extensions}
    return result, "size %d\nroot %s" % (size, root.hex())


def cmd_proof(args, stdin):
    """proof: a C2SP tlog-proof@v1 of the leaf in the log --origin."""
    leaf = the_leaf(args)
    keys = [parse_verifier_key(k) for k in args.key]
    _, index, proof, checkpoint = parse_tlog_proof(read_input(args.file, stdin))
    size, root, _ = open_checkpoint(checkpoint, args.origin, keys)
    verify_inclusion(leaf, index, size, proof, root)
    result = {"valid": True, "index": index, "size": size, "root": root.hex()}
    return result, "valid: leaf %d of %d" % (index, size)


def cmd_cosignature(args, stdin):
    """cosignature: a C2SP cosignature/v1 by --key on the note."""
    timestamp = verify_cosignature(read_input(args.file, stdin), parse_cosigner_key(args.key))
    return {"valid": True, "timestamp": timestamp}, "valid, time %d" % timestamp


def cmd_ed25519(args, stdin):
    """ed25519: RFC 8032 §5.1.7 verification of one signature."""
    public_key = decode_hex(args.public_key, "--public-key", 32)
    signature = decode_hex(args.signature, "--signature", 64)
    message = decode_hex(args.message, "--message")
    if not ed25519_verify(public_key, message, signature):
        raise Invalid("the Ed25519 signature does not verify")
    return {"valid": True}, "valid"


def non_negative(text):
    """argparse type: a decimal integer >= 0."""
    value = parse_decimal(text)
    if value is None:
        raise argparse.ArgumentTypeError("%r is not a decimal without leading zeroes" % text)
    return value


@functools.lru_cache(maxsize=1)
def build_parser():
    """The command line (built once: a batch parses many)."""
    parser = Parser(prog="tlog_verify.py", description="Independent verifier of cra's transparency log.")
    commands = parser.add_subparsers(dest="command", parser_class=Parser)
    commands.required = True

    def command(name, function):
        sub = commands.add_parser(name)
        sub.add_argument("--json", action="store_true")
        sub.set_defaults(function=function)
        return sub

    command("root", cmd_root)
    sub = command("inclusion", cmd_inclusion)
    sub.add_argument("--leaf")
    sub.add_argument("--leaf-data")
    sub.add_argument("--index", type=non_negative, required=True)
    sub.add_argument("--size", type=non_negative, required=True)
    sub.add_argument("--root", required=True)
    sub.add_argument("--proof", default="")
    sub = command("consistency", cmd_consistency)
    sub.add_argument("--old-size", type=non_negative, required=True)
    sub.add_argument("--new-size", type=non_negative, required=True)
    sub.add_argument("--old-root", required=True)
    sub.add_argument("--new-root", required=True)
    sub.add_argument("--proof", default="")
    sub = command("note", cmd_note)
    sub.add_argument("--key", action="append", required=True)
    sub.add_argument("file")
    sub = command("checkpoint", cmd_checkpoint)
    sub.add_argument("--origin", required=True)
    sub.add_argument("--key", action="append", required=True)
    sub.add_argument("file")
    sub = command("proof", cmd_proof)
    sub.add_argument("--leaf")
    sub.add_argument("--leaf-data")
    sub.add_argument("--origin", required=True)
    sub.add_argument("--key", action="append", required=True)
    sub.add_argument("file")
    sub = command("cosignature", cmd_cosignature)
    sub.add_argument("--key", required=True)
    sub.add_argument("file")
    sub = command("ed25519", cmd_ed25519)
    sub.add_argument("--public-key", required=True)
    sub.add_argument("--signature", required=True)
    sub.add_argument("--message", required=True)
    return parser


def run(argv, stdin):
    """Runs one command; returns (exit code, JSON result or None, text, reason or None)."""
    try:
        args = build_parser().parse_args(argv)
        result, text = args.function(args, stdin)
        return EXIT_VALID, result, text, None, args.json
    except Invalid as error:
        return EXIT_INVALID, None, None, str(error), "--json" in argv
    except UsageError as error:
        return EXIT_READ, None, None, str(error), "--json" in argv
    except RecursionError:
        return EXIT_READ, None, None, "the input is too deep", "--json" in argv
    except MemoryError:
        return EXIT_READ, None, None, "the input is too large", "--json" in argv
    except Exception as error:  # pylint: disable=broad-except
        # A bug of ours, never a verdict: reported as unreadable, never as valid.
        return EXIT_READ, None, None, "internal error: %r" % (error,), "--json" in argv
    except SystemExit as done:
        # argparse's --help: printed, and nothing was verified.
        return EXIT_READ, None, None, "help printed (exit %s)" % done.code, False


def batch(lines):
    """The batch command: one JSON request a line in, one JSON answer a line out."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            request = json.loads(line.decode("utf-8"))
            argv = request["argv"]
            data = request.get("stdin", "").encode("utf-8")
            if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
                raise TypeError
            if "-h" in argv or "--help" in argv:
                raise TypeError
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
            answer = {"code": EXIT_READ, "result": None, "reason": "request %d is not {argv, stdin} without --help" % number}
        else:
            code, result, _, reason, _ = run(argv, lambda data=data: data)
            answer = {"code": code, "result": result, "reason": reason}
        sys.stdout.write(json.dumps(answer, sort_keys=True) + "\n")
    sys.stdout.flush()


def main(argv):
    """The program."""
    if argv[:1] == ["batch"]:
        if len(argv) != 1:
            sys.stderr.write("tlog_verify.py: batch takes no arguments\n")
            return EXIT_READ
        batch(sys.stdin.buffer)
        return EXIT_VALID
    if argv[:1] in (["-h"], ["--help"]):
        sys.stdout.write(__doc__)
        return EXIT_VALID
    code, result, text, reason, as_json = run(argv, sys.stdin.buffer.read)
    if as_json:
        body = result if result is not None else {"valid": False, "code": code, "reason": reason}
        sys.stdout.write(json.dumps(body, sort_keys=True) + "\n")
    elif text is not None:
        sys.stdout.write(text + "\n")
    if reason is not None:
        sys.stderr.write("tlog_verify.py: %s\n" % reason)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
