/**
 * The transparency log, checked by the client (`specs/tlog.md`): C2SP verifier keys, signed
 * notes and checkpoints (Ed25519, through Node's own `crypto`), and RFC 9162 inclusion and
 * consistency proofs. A leaf's data is the 32 raw bytes of an event's `event_hash`.
 */
import { createHash, createPublicKey, verify, type KeyObject } from "node:crypto";

/** A key, note, checkpoint or proof that does not check, and why. */
export class LogError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "LogError";
  }
}

const SIGNATURE_PREFIX = "\u2014 ";
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

function base64(text: string, what: string): Buffer {
  if (text.length % 4 !== 0 || !BASE64.test(text)) throw new LogError(`${what} is not base64`);
  return Buffer.from(text, "base64");
}

/** A C2SP verifier key `<name>+<hex key id>+<base64(0x01 || Ed25519 key)>`. */
export class VerifierKey {
  private constructor(
    readonly name: string,
    readonly keyId: Buffer,
    readonly publicKey: Buffer,
    private readonly key: KeyObject,
  ) {}

  /** Reads a verifier key; the name ends at the first `+` (base64 may hold `+` too). */
  static parse(text: string): VerifierKey {
    const trimmed = text.trim();
    const first = trimmed.indexOf("+");
    const second = first < 0 ? -1 : trimmed.indexOf("+", first + 1);
    if (second < 0) throw new LogError("not a verifier key (name+hex id+base64 key)");
    const name = trimmed.slice(0, first);
    const hexId = trimmed.slice(first + 1, second);
    if (!/^[0-9a-f]{8}$/.test(hexId)) throw new LogError("the verifier key's id is not 8 hex digits");
    const raw = base64(trimmed.slice(second + 1), "the verifier key");
    if (raw.length !== 33 || raw[0] !== 0x01) {
      throw new LogError("the verifier key is not an Ed25519 key (type 0x01, 32 bytes)");
    }
    const keyId = Buffer.from(hexId, "hex");
    const expected = createHash("sha256").update(Buffer.concat([Buffer.from(`${name}\n`), raw])).digest();
    if (!expected.subarray(0, 4).equals(keyId)) {
      throw new LogError("the verifier key's id does not match its name and key");
    }
    const publicKey = raw.subarray(1);
    const key = createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: publicKey.toString("base64url") }, format: "jwk" });
    return new VerifierKey(name, keyId, publicKey, key);
  }

  /** Whether `signature` (without its key id) is this key's over `message`. */
  verifies(message: Buffer, signature: Buffer): boolean {
    return verify(null, message, this.key, signature);
  }
}

/** A checkpoint whose signature checked: the log's origin, its size and its root. */
export interface Checkpoint {
  origin: string;
  size: number;
  root: Buffer;
}

/**
 * The checkpoint in the signed note `note`, once `key` signed it (C2SP tlog-checkpoint over
 * signed-note); a {@link LogError} otherwise.
 */
export function openCheckpoint(note: string, key: VerifierKey): Checkpoint {
  const split = note.indexOf("\n\n");
  if (split <= 0) throw new LogError("not a signed note: no blank line before its signatures");
  const text = note.slice(0, split + 1);
  let signed = false;
  for (const line of note.slice(split + 2).split("\n")) {
    if (line === "") continue;
    if (!line.startsWith(SIGNATURE_PREFIX)) throw new LogError(`not a signature line: ${JSON.stringify(line)}`);
    const rest = line.slice(SIGNATURE_PREFIX.length);
    const space = rest.indexOf(" ");
    const raw = base64(rest.slice(space + 1), "a signature");
    if (rest.slice(0, space) !== key.name || !raw.subarray(0, 4).equals(key.keyId)) continue;
    if (!key.verifies(Buffer.from(text), raw.subarray(4))) {
      throw new LogError(`the signature by ${key.name} does not verify`);
    }
    signed = true;
  }
  if (!signed) throw new LogError(`the note carries no signature by ${key.name}`);
  const [origin, size, root] = text.split("\n");
  if (origin !== key.name || size === undefined || root === undefined) {
    throw new LogError("not a checkpoint of this log: origin, size and root lines expected");
  }
  if (!/^(0|[1-9][0-9]*)$/.test(size)) {
    throw new LogError(`a checkpoint size that is not a decimal number: ${JSON.stringify(size)}`);
  }
  const hash = base64(root, "the checkpoint root");
  if (hash.length !== 32) throw new LogError("a checkpoint root that is not 32 bytes");
  return { origin, size: Number(size), root: hash };
}

/** RFC 6962's leaf hash: SHA-256(0x00 || data). */
export function leafHash(data: Buffer): Buffer {
  return createHash("sha256").update(Buffer.from([0])).update(data).digest();
}

/** RFC 6962's node hash: SHA-256(0x01 || left || right). */
export function nodeHash(left: Buffer, right: Buffer): Buffer {
  return createHash("sha256").update(Buffer.from([1])).update(left).update(right).digest();
}

/** RFC 9162 §2.1.3.2: `data` is leaf `index` of the tree of `size` whose root is `root`. */
export function verifyInclusion(data: Buffer, index: number, size: number, proof: Buffer[], root: Buffer): void {
  if (index >= size) throw new LogError(`leaf ${index} is not in a tree of ${size}`);
  let fn = BigInt(index);
  let sn = BigInt(size - 1);
  let r = leafHash(data);
  for (const p of proof) {
    if (sn === 0n) throw new LogError("the inclusion proof is longer than the tree allows");
    if ((fn & 1n) === 1n || fn === sn) {
      r = nodeHash(p, r);
      while ((fn & 1n) === 0n && fn !== 0n) [fn, sn] = [fn >> 1n, sn >> 1n];
    } else {
      r = nodeHash(r, p);
    }
    [fn, sn] = [fn >> 1n, sn >> 1n];
  }
  if (sn !== 0n || !r.equals(root)) throw new LogError("the inclusion proof does not lead to the checkpoint's root");
}

/** RFC 9162 §2.1.4.2: the tree of `newSize` extends the tree of `oldSize`. */
export function verifyConsistency(oldSize: number, newSize: number, oldRoot: Buffer, newRoot: Buffer, proof: Buffer[]): void {
  if (oldSize > newSize) throw new LogError(`a tree of ${newSize} cannot extend one of ${oldSize}`);
  if (oldSize === newSize) {
    if (proof.length > 0 || !oldRoot.equals(newRoot)) throw new LogError("two trees of one size with other roots");
    return;
  }
  if (oldSize === 0) {
    if (proof.length > 0) throw new LogError("a proof from the empty tree must be empty");
    return;
  }
  const old = BigInt(oldSize);
  const path = (old & (old - 1n)) === 0n ? [oldRoot, ...proof] : [...proof];
  const [start, ...rest] = path;
  if (start === undefined) throw new LogError("an empty consistency proof");
  let fn = BigInt(oldSize - 1);
  let sn = BigInt(newSize - 1);
  while ((fn & 1n) === 1n) [fn, sn] = [fn >> 1n, sn >> 1n];
  let fr = start;
  let sr = start;
  for (const c of rest) {
    if (sn === 0n) throw new LogError("the consistency proof is longer than the trees allow");
    if ((fn & 1n) === 1n || fn === sn) {
      fr = nodeHash(c, fr);
      sr = nodeHash(c, sr);
      while ((fn & 1n) === 0n && fn !== 0n) [fn, sn] = [fn >> 1n, sn >> 1n];
    } else {
      sr = nodeHash(sr, c);
    }
    [fn, sn] = [fn >> 1n, sn >> 1n];
  }
  if (sn !== 0n || !fr.equals(oldRoot) || !sr.equals(newRoot)) {
    throw new LogError("the consistency proof does not join the two roots");
  }
}
