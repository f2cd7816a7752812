import type { Folder } from './index.js';
/** A program folder on the local disk. */
export function dirFolder(dir: string): Folder;
