// A program folder on the local disk, for node (the browser reads folders with `urlFolder`).

import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { ProgramError } from './errors.js';

/** @param {string} dir */
export function dirFolder(dir) {
  const root = path.resolve(dir);
  const read = async (name, encoding) => {
    const file = path.join(root, name);
    try {
      return await readFile(file, encoding);
    } catch (e) {
      throw new ProgramError('format', e.code === 'ENOENT' ? 'no such file' : e.message, file);
    }
  };
  return {
    name: root + path.sep,
    text: (name) => read(name, 'utf8'),
    bytes: async (name) => new Uint8Array(await read(name)),
  };
}
