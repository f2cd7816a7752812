// Types of rustral-web (src/index.js). WebGPU's own types come from @webgpu/types.
/// <reference types="@webgpu/types" />

/** What went wrong, with where: a kernel (name, op, model path), a buffer, an input, a file. */
export class ProgramError extends Error {
  readonly kind: 'format' | 'input' | 'limit' | 'shader' | 'kernel' | 'device';
  readonly place?: string;
  constructor(kind: ProgramError['kind'], message: string, place?: string);
}

export const FORMAT: 'rustral-wgsl-program';
export const VERSION: 2;
export const PARAMS: 'params.safetensors';

/** A dim: a static size or a symbolic dim's name. */
export type Dim = number | string;
/** A product of terms ceil(factor * product(dims) / div). */
export type Count = { factor: number; dims?: string[]; div?: number }[];
export type Storage = 'f32' | 'i32' | 'u32' | 'bytes';

export interface BufferDesc {
  dtype: string;
  storage: Storage;
  shape: Dim[];
  elements: Count;
  role:
    | { kind: 'input' | 'param'; name: string }
    | { kind: 'constant'; tensor: string }
    | { kind: 'intermediate'; slot: number | null }
    | { kind: 'alias'; of: number }
    | { kind: 'status' };
  provenance: string;
}

export interface KernelDesc {
  name: string;
  op: string;
  provenance: string;
  /** The model source locations it computes, `file:line:col` each (absent when unknown). */
  loc?: string[];
  phase: 'init' | 'run';
  entry: string;
  workgroup_size: [number, number, number];
  workgroups: Count;
  bindings: { binding: number; name: string; buffer: number; access: 'read' | 'read_write'; offset?: number; size?: number }[];
  workgroup_bytes: number;
  failure?: string;
}

/** program.json (schemas/wgsl-program.schema.json). */
export interface ProgramDesc {
  format: typeof FORMAT;
  version: typeof VERSION;
  name: string;
  dims: string[];
  buffers: BufferDesc[];
  slots: number;
  kernels: KernelDesc[];
  outputs: { name: string; buffer: number }[];
}

export interface StoredTensor {
  dtype: string;
  shape: number[];
  bytes: Uint8Array;
}

/** Where a program folder's files come from. */
export interface Folder {
  name: string;
  text(name: string): Promise<string>;
  bytes(name: string): Promise<Uint8Array>;
}

export interface ProgramFiles {
  program: ProgramDesc;
  shaders: string[];
  params: Map<string, StoredTensor>;
}

export interface Feed {
  shape: number[];
  data: ArrayLike<number> | ArrayLike<bigint>;
}

export interface Output {
  shape: number[];
  dtype: string;
  data: Float32Array | Int32Array | Uint32Array | Uint8Array;
}

export type Limits = Record<string, number>;

export function parseSafetensors(file: Uint8Array, where?: string): Map<string, StoredTensor>;
export function tensorValues(t: StoredTensor): Float32Array | Int32Array | Uint32Array | Uint8Array;
export function urlFolder(base: string | URL): Folder;
export function loadFolder(folder: Folder): Promise<ProgramFiles>;
export function codeLines(source: string): string;
export function neededLimits(files: ProgramFiles): Limits;
export function exceededLimit(files: ProgramFiles, limits: Limits | GPUSupportedLimits): ProgramError | null;
export function requestDeviceFor(adapter: GPUAdapter, files: ProgramFiles): Promise<GPUDevice>;
export function openProgram(gpu: GPU | GPUAdapter, folder: string | URL | Folder): Promise<Program>;

export class Program {
  private constructor();
  static create(device: GPUDevice, files: ProgramFiles): Promise<Program>;
  readonly program: ProgramDesc;
  readonly device: GPUDevice;
  readonly inputs: { name: string; dtype: string; shape: Dim[] }[];
  /** Distinct pipelines (kernels whose shaders differ only in comments share one). */
  readonly pipelineCount: number;
  run(inputs: Record<string, Feed>, options?: { only?: string[] }): Promise<Record<string, Output>>;
  destroy(): void;
}

export class WordPiece {
  constructor(vocabText: string, options?: { maxLength?: number; maxWordChars?: number });
  readonly vocab: Map<string, number>;
  readonly maxLength: number;
  readonly maxWordChars: number;
  readonly cls: number;
  readonly sep: number;
  readonly pad: number;
  readonly unk: number;
  normalize(text: string): string;
  words(normalized: string): string[];
  pieces(word: string): number[];
  encode(text: string): number[];
  batch(texts: string[]): { input_ids: Feed & { data: Int32Array }; token_type_ids: Feed & { data: Int32Array }; attention_mask: Feed & { data: Float32Array } };
}
