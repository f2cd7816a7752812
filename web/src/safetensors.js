// Reading and writing safetensors files (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype, shape and byte range,
// then the data. Program folders keep their parameters in one; the parity checks keep inputs and
// expected outputs in others.

import { ProgramError } from './errors.js';

/** Bytes per element of the dtypes a program folder uses. */
const WIDTH = { F32: 4, I32: 4, U32: 4, U8: 1, I64: 8, F64: 8, F16: 2, BF16: 2, BOOL: 1, I8: 1, I16: 2, U16: 2 };

/**
 * The tensors of a safetensors file, by name: `{ dtype, shape, bytes }` with `bytes` a view
 * into `buffer` (no copy). Every header entry is checked against the file's length.
 * @param {Uint8Array} file
 * @param {string} where the file's name, for errors
 */
export function parseSafetensors(file, where = 'safetensors') {
  const fail = (m) => new ProgramError('format', `${where}: ${m}`);
  if (!(file instanceof Uint8Array)) throw fail('expected a Uint8Array');
  if (file.length < 8) throw fail(`${file.length} bytes: too short for a header`);
  const view = new DataView(file.buffer, file.byteOffset, file.byteLength);
  const n = view.getBigUint64(0, true);
  if (n > BigInt(file.length - 8)) throw fail(`header of ${n} bytes in a file of ${file.length}`);
  const start = 8 + Number(n);
  let header;
  try {
    header = JSON.parse(new TextDecoder().decode(file.subarray(8, start)));
  } catch (e) {
    throw fail(`header is not JSON (${e.message})`);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) throw fail('header is not a JSON object');
  const tensors = new Map();
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const width = WIDTH[t?.dtype];
    if (!width) throw fail(`${name}: unknown dtype ${JSON.stringify(t?.dtype)}`);
    const shape = t.shape;
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw fail(`${name}: bad shape ${JSON.stringify(shape)}`);
    }
    const [a, b] = t.data_offsets ?? [];
    const count = shape.reduce((x, y) => x * y, 1);
    if (!Number.isSafeInteger(a) || !Number.isSafeInteger(b) || a < 0 || b < a || start + b > file.length) {
      throw fail(`${name}: data offsets ${JSON.stringify(t.data_offsets)} outside the file`);
    }
    if (b - a !== count * width) throw fail(`${name}: ${b - a} bytes for ${count} ${t.dtype} values`);
    tensors.set(name, { dtype: t.dtype, shape, bytes: file.subarray(start + a, start + b) });
  }
  return tensors;
}


/**
 * A tensor's values as a typed array of its dtype (a copy, aligned): Float32Array for F32,
 * Int32Array for I32, Uint32Array for U32, Uint8Array for U8 and BOOL.
 * @param {{dtype: string, bytes: Uint8Array}} t
 */
export function tensorValues(t) {
  // A copy made by hand: node's Buffer.slice shares memory, and the view may be unaligned.
  const copy = new Uint8Array(t.bytes.length);
  copy.set(t.bytes);
  const { buffer } = copy;
  switch (t.dtype) {
    case 'F32':
      return new Float32Array(buffer);
    case 'I32':
      return new Int32Array(buffer);
    case 'U32':
      return new Uint32Array(buffer);
    case 'U8':
    case 'BOOL':
      return new Uint8Array(buffer);
    default:
      throw new ProgramError('format', `no typed array for ${t.dtype} here (a program folder stores F32, I32, U32 and U8)`);
  }
}
