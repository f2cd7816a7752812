// rustral-web: run Rustral WGSL program folders on WebGPU, in the browser or in node (with
// Dawn, the `webgpu` npm package). No runtime dependencies.

export { ProgramError } from './errors.js';
export { parseSafetensors, tensorValues } from './safetensors.js';
export {
  FORMAT,
  VERSION,
  PARAMS,
  Program,
  codeLines,
  exceededLimit,
  loadFolder,
  neededLimits,
  openProgram,
  requestDeviceFor,
  urlFolder,
} from './program.js';
export { WordPiece } from './wordpiece.js';
