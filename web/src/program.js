// A Rustral WGSL program folder (program.json, one .wgsl per kernel, params.safetensors; see
// schemas/wgsl-program.schema.json) run on a WebGPU device: the browser's or Dawn's in node.
// It follows the schema's recipe step by step, as the project's own wgpu runtime
// (runtime/src/wgpu) does: bind the symbolic dims from the input shapes, allocate buffers
// (intermediates sharing slots, aliases seeing another buffer's storage), make one pipeline per
// distinct shader with explicit bind group layouts, dispatch the `init` kernels once per
// binding and the `run` kernels per run, and read the status words so that a kernel that hit a
// data-dependent error is named instead of answering wrongly.

import { ProgramError } from './errors.js';
import { parseSafetensors } from './safetensors.js';

export const FORMAT = 'rustral-wgsl-program';
export const VERSION = 3;
export const PARAMS = 'params.safetensors';

// WebGPU's flag values, fixed by the specification (so no globals are needed in node).
const USAGE = { MAP_READ: 1, COPY_SRC: 4, COPY_DST: 8, UNIFORM: 64, STORAGE: 128 };
const COMPUTE_STAGE = 4;
const MAP_MODE_READ = 1;

/**
 * A folder read over HTTP (in a browser, relative to the page).
 * @param {string | URL} base the folder's URL
 */
export function urlFolder(base) {
  let url = String(base);
  if (!url.endsWith('/')) url += '/';
  const root = typeof location === 'undefined' ? new URL(url) : new URL(url, location.href);
  const get = async (name) => {
    const r = await fetch(new URL(name, root));
    if (!r.ok) throw new ProgramError('format', `HTTP ${r.status} ${r.statusText}`, new URL(name, root).href);
    return r;
  };
  return {
    name: root.href,
    text: async (name) => (await get(name)).text(),
    bytes: async (name) => new Uint8Array(await (await get(name)).arrayBuffer()),
  };
}

/**
 * Read a program folder: program.json checked for its format and version, each kernel's
 * shader, and the parameters.
 * @param {{name: string, text(n: string): Promise<string>, bytes(n: string): Promise<Uint8Array>}} folder
 */
export async function loadFolder(folder) {
  const where = `${folder.name}program.json`;
  let program;
  try {
    program = JSON.parse(await folder.text('program.json'));
  } catch (e) {
    throw e instanceof ProgramError ? e : new ProgramError('format', e.message, where);
  }
  if (program?.format !== FORMAT || program?.version !== VERSION) {
    throw new ProgramError(
      'format',
      `format ${JSON.stringify(program?.format)} version ${program?.version} (this runtime reads ${FORMAT} version ${VERSION})`,
      where,
    );
  }
  for (const key of ['dims', 'buffers', 'kernels', 'outputs']) {
    if (!Array.isArray(program[key])) throw new ProgramError('format', `"${key}" is not an array`, where);
  }
  for (const k of program.kernels) {
    // Names become file names: nothing that could leave the folder.
    if (!/^[A-Za-z0-9_]+$/.test(k.name ?? '')) throw new ProgramError('format', `kernel name ${JSON.stringify(k.name)}`, where);
  }
  const read = async (name, how) => {
    try {
      return await folder[how](name);
    } catch (e) {
      throw e instanceof ProgramError ? e : new ProgramError('format', e.message, `${folder.name}${name}`);
    }
  };
  const shaders = await Promise.all(program.kernels.map((k) => read(`${k.name}.wgsl`, 'text')));
  const params = parseSafetensors(await read(PARAMS, 'bytes'), `${folder.name}${PARAMS}`);
  return { program, shaders, params };
}

/** The lines of a shader that are code: kernels differing only in comments are one shader. */
export function codeLines(source) {
  return source
    .split('\n')
    .filter((l) => !l.trim().startsWith('//'))
    .join('\n');
}

/** `ceil(factor * product(dims) / div)` multiplied over the terms of a count. */
function evalCount(count, dims, place) {
  let total = 1;
  for (const t of count) {
    let v = t.factor;
    for (const d of t.dims ?? []) {
      const n = dims.get(d);
      if (n === undefined) throw new ProgramError('input', `symbol ${d} is not bound`, place);
      v *= n;
    }
    const div = t.div ?? 1;
    if (!(div >= 1)) throw new ProgramError('format', 'a count divides by zero', place);
    total *= Math.ceil(v / div);
  }
  if (!Number.isSafeInteger(total)) throw new ProgramError('limit', `a size of ${total} words`, place);
  return total;
}

function kernelPlace(k) {
  // The model line it computes, when the program records one (`loc`, file:line:col).
  const loc = k.loc && k.loc.length ? `, ${k.loc[0]}${k.loc.length > 1 ? ` (+${k.loc.length - 1} more)` : ''}` : '';
  return `kernel ${k.name} (${k.op} at ${JSON.stringify(k.provenance)}${loc})`;
}

function bufferPlace(program, b) {
  return `buffer ${b} (${JSON.stringify(program.buffers[b].provenance)})`;
}

/**
 * The limits a program needs beyond WebGPU's defaults, for `adapter.requestDevice({
 * requiredLimits })`: the most storage buffers, invocations, workgroup size and workgroup
 * memory any kernel uses, and the largest parameter. Buffers whose size depends on the dims
 * are checked when they are allocated.
 */
export function neededLimits({ program, params }) {
  const need = {
    maxStorageBuffersPerShaderStage: 0,
    maxComputeInvocationsPerWorkgroup: 0,
    maxComputeWorkgroupSizeX: 0,
    maxComputeWorkgroupSizeY: 0,
    maxComputeWorkgroupSizeZ: 0,
    maxComputeWorkgroupStorageSize: 0,
    maxStorageBufferBindingSize: 0,
    maxBufferSize: 0,
  };
  const up = (key, n) => {
    need[key] = Math.max(need[key], n);
  };
  for (const k of program.kernels) {
    const [x, y, z] = k.workgroup_size;
    up('maxStorageBuffersPerShaderStage', k.bindings.length);
    up('maxComputeInvocationsPerWorkgroup', x * y * z);
    up('maxComputeWorkgroupSizeX', x);
    up('maxComputeWorkgroupSizeY', y);
    up('maxComputeWorkgroupSizeZ', z);
    up('maxComputeWorkgroupStorageSize', k.workgroup_bytes);
  }
  for (const [bytes] of bindingSizes({ program, params })) up('maxStorageBufferBindingSize', bytes);
  for (const t of params.values()) up('maxBufferSize', Math.ceil(t.bytes.length / 4) * 4);
  return need;
}

/**
 * The bytes of each binding whose size the folder fixes, with its place: a range's `size`, or
 * the whole parameter or constant a binding covers (other sizes follow the dims).
 */
function* bindingSizes({ program, params }) {
  for (const k of program.kernels) {
    for (const b of k.bindings) {
      let buf = program.buffers[b.buffer];
      if (buf?.role.kind === 'alias') buf = program.buffers[buf.role.of];
      const tensor = buf?.role.kind === 'param' ? buf.role.name : buf?.role.kind === 'constant' ? buf.role.tensor : null;
      const t = tensor === null ? undefined : params.get(tensor);
      const bytes = b.size ?? (t ? Math.ceil(t.bytes.length / 4) * 4 : undefined);
      if (bytes !== undefined) yield [bytes, `${kernelPlace(k)} binding ${b.binding} (${b.name})`];
    }
  }
}

/**
 * The first limit of `limits` (a device's or an adapter's) that `need` exceeds, as an error
 * naming it and the kernel or buffer that needs it; null when everything fits.
 */
export function exceededLimit({ program, params }, limits) {
  const over = (limit, needed, place) =>
    needed > limits[limit] ? new ProgramError('limit', `needs ${needed} but the ${limit} limit is ${limits[limit]}`, place) : null;
  for (const k of program.kernels) {
    const [x, y, z] = k.workgroup_size;
    const place = kernelPlace(k);
    const e =
      over('maxStorageBuffersPerShaderStage', k.bindings.length, place) ??
      over('maxComputeInvocationsPerWorkgroup', x * y * z, place) ??
      over('maxComputeWorkgroupSizeX', x, place) ??
      over('maxComputeWorkgroupSizeY', y, place) ??
      over('maxComputeWorkgroupSizeZ', z, place) ??
      over('maxComputeWorkgroupStorageSize', k.workgroup_bytes, place);
    if (e) return e;
  }
  for (const [bytes, place] of bindingSizes({ program, params })) {
    const e = over('maxStorageBufferBindingSize', bytes, place);
    if (e) return e;
  }
  for (const [name, t] of params) {
    const e = over('maxBufferSize', Math.ceil(t.bytes.length / 4) * 4, `parameter ${name}`);
    if (e) return e;
  }
  return null;
}

/**
 * A device for a program on `adapter`: its needed limits requested, or an error naming the
 * first one the adapter cannot give.
 */
export async function requestDeviceFor(adapter, files) {
  const e = exceededLimit(files, adapter.limits);
  if (e) throw e;
  const need = neededLimits(files);
  const requiredLimits = {};
  for (const [k, v] of Object.entries(need)) if (v > 0) requiredLimits[k] = v;
  // Inputs and intermediates are sized by the dims, known only at run time: ask for all the
  // adapter allows there, as the wgpu runtime does for every limit.
  for (const k of ['maxStorageBufferBindingSize', 'maxBufferSize', 'maxComputeWorkgroupsPerDimension']) {
    requiredLimits[k] = adapter.limits[k];
  }
  return adapter.requestDevice({ requiredLimits });
}

/**
 * Open a program folder (a URL or a folder reader) on a new device of `gpu` (`navigator.gpu`,
 * or an adapter), requested with the limits the program needs.
 */
export async function openProgram(gpu, folder) {
  const adapter = typeof gpu.requestAdapter === 'function' ? await gpu.requestAdapter() : gpu;
  if (!adapter) throw new ProgramError('device', 'no WebGPU adapter', 'openProgram');
  const files = await loadFolder(typeof folder === 'string' || folder instanceof URL ? urlFolder(folder) : folder);
  const device = await requestDeviceFor(adapter, files);
  return Program.create(device, files);
}

/** Per device, the last piece of work that holds its error scopes (see `serial`). */
const busy = new WeakMap();

/**
 * Run `work` after every earlier `serial` work on `device` has settled. Error scopes belong to
 * the device, not to a program: two programs awaiting inside their scopes at once would catch
 * each other's errors, so pipeline creation and runs on one device take turns.
 */
function serial(device, work) {
  const next = (busy.get(device) ?? Promise.resolve()).then(work);
  busy.set(
    device,
    next.catch(() => {}),
  );
  return next;
}

/** A thrown value as a ProgramError (a device's own rejection becomes kind `device`). */
function typed(e, place) {
  return e instanceof ProgramError ? e : new ProgramError('device', e?.message ?? String(e), place);
}

/** Host values as the storage words a buffer holds. */
function toWords(storage, data, count, place) {
  if (data.length !== count) throw new ProgramError('input', `${data.length} values for ${count} elements`, place);
  switch (storage) {
    case 'f32':
      return Float32Array.from(data, Number);
    case 'i32': {
      const out = new Int32Array(count);
      for (let i = 0; i < count; i++) {
        const v = Number(data[i]);
        // i64 is stored as i32: a value outside it would wrap and answer wrongly.
        if (!Number.isInteger(v) || v < -2147483648 || v > 2147483647) {
          throw new ProgramError('input', `value ${data[i]} at index ${i} is not a 32-bit integer`, place);
        }
        out[i] = v;
      }
      return out;
    }
    case 'u32':
      return Uint32Array.from(data, (v) => (v ? 1 : 0));
    case 'bytes': {
      const out = new Uint8Array(Math.ceil(count / 4) * 4);
      for (let i = 0; i < count; i++) {
        const v = Number(data[i]);
        if (!Number.isInteger(v) || v < 0 || v > 255) {
          throw new ProgramError('input', `value ${data[i]} at index ${i} is not a byte`, place);
        }
        out[i] = v;
      }
      return out;
    }
    default:
      throw new ProgramError('format', `unknown storage ${JSON.stringify(storage)}`, place);
  }
}

/** Storage words back as the typed array of the buffer's values. */
function fromWords(storage, bytes, count) {
  switch (storage) {
    case 'f32':
      return new Float32Array(bytes, 0, count);
    case 'i32':
      return new Int32Array(bytes, 0, count);
    case 'u32':
      return new Uint32Array(bytes, 0, count);
    default:
      return new Uint8Array(bytes, 0, count);
  }
}

/** A program on a device, ready to run. Make one with `Program.create` or `openProgram`. */
export class Program {
  /**
   * @param {GPUDevice} device
   * @param {{program: object, shaders: string[], params: Map<string, {dtype: string, shape: number[], bytes: Uint8Array}>}} files
   */
  static async create(device, files) {
    const e = exceededLimit(files, device.limits);
    if (e) throw e;
    const p = new Program(device, files);
    await serial(device, () => p.#makePipelines(files.shaders));
    p.#uploadFixed(files.params);
    return p;
  }

  #device;
  #program;
  /** Per kernel: { pipeline, layout }; kernels with one shader text share them. */
  #pipelines = [];
  /** Parameters and constants on the device: buffer index -> { buffer, shape }. */
  #fixed = new Map();
  /** Storage for the last binding of the dims. */
  #bound = null;
  /** Distinct pipelines made. */
  pipelineCount = 0;

  constructor(device, { program }) {
    this.#device = device;
    this.#program = program;
  }

  /** The program (program.json's contents). */
  get program() {
    return this.#program;
  }

  /** The device it runs on. */
  get device() {
    return this.#device;
  }

  /** Input names with their dtype and shape (dims as numbers or symbol names). */
  get inputs() {
    return this.#program.buffers
      .filter((b) => b.role.kind === 'input')
      .map((b) => ({ name: b.role.name, dtype: b.dtype, shape: b.shape }));
  }

  async #makePipelines(shaders) {
    const cache = new Map();
    for (const [i, k] of this.#program.kernels.entries()) {
      const key = `${k.entry}\n${k.bindings.map((b) => `${b.binding}:${b.access}`).join(',')}\n${codeLines(shaders[i])}`;
      let made = cache.get(key);
      if (!made) {
        made = this.#pipeline(k, shaders[i]);
        cache.set(key, made);
      }
      this.#pipelines.push(await made);
    }
    this.pipelineCount = cache.size;
  }

  async #pipeline(k, code) {
    const device = this.#device;
    const place = kernelPlace(k);
    device.pushErrorScope('validation');
    const module = device.createShaderModule({ label: k.name, code });
    const info = module.getCompilationInfo ? await module.getCompilationInfo() : { messages: [] };
    const errors = info.messages.filter((m) => m.type === 'error');
    const entries = [{ binding: 0, visibility: COMPUTE_STAGE, buffer: { type: 'uniform' } }];
    for (const b of k.bindings) {
      entries.push({
        binding: b.binding,
        visibility: COMPUTE_STAGE,
        buffer: { type: b.access === 'read' ? 'read-only-storage' : 'storage' },
      });
    }
    const layout = device.createBindGroupLayout({ label: k.name, entries });
    let pipeline;
    let failure;
    try {
      pipeline = await device.createComputePipelineAsync({
        label: k.name,
        layout: device.createPipelineLayout({ bindGroupLayouts: [layout] }),
        compute: { module, entryPoint: k.entry },
      });
    } catch (e) {
      failure = e.message;
    }
    const scoped = await device.popErrorScope();
    if (errors.length || failure || scoped) {
      const text = errors.map((m) => `${k.name}.wgsl:${m.lineNum}:${m.linePos}: ${m.message}`).join('; ');
      throw new ProgramError('shader', text || failure || scoped.message, place);
    }
    return { pipeline, layout };
  }

  #uploadFixed(params) {
    const program = this.#program;
    for (const [b, buf] of program.buffers.entries()) {
      const { kind } = buf.role;
      if (kind !== 'param' && kind !== 'constant') continue;
      const name = kind === 'param' ? buf.role.name : buf.role.tensor;
      const place = `${kind} ${name}`;
      const t = params.get(name);
      if (!t) throw new ProgramError('format', `not in ${PARAMS}`, place);
      const want = { f32: 'F32', i32: 'I32', u32: 'U32', bytes: 'U8' }[buf.storage];
      if (t.dtype !== want) throw new ProgramError('format', `stored as ${t.dtype}, the program holds ${want}`, place);
      if (t.shape.length !== buf.shape.length || buf.shape.some((d, i) => typeof d === 'number' && d !== t.shape[i])) {
        throw new ProgramError('format', `shape [${t.shape}] where the program declares [${buf.shape}]`, place);
      }
      const size = Math.max(4, Math.ceil(t.bytes.length / 4) * 4);
      const buffer = this.#device.createBuffer({ label: name, size, usage: USAGE.STORAGE | USAGE.COPY_DST | USAGE.COPY_SRC });
      const padded = new Uint8Array(size);
      padded.set(t.bytes);
      this.#device.queue.writeBuffer(buffer, 0, padded);
      this.#fixed.set(b, { buffer, shape: t.shape });
    }
  }

  /** Bind the symbolic dims from the input shapes (and the parameters'). */
  #bindDims(inputs) {
    const program = this.#program;
    const dims = new Map();
    const bind = (place, declared, shape) => {
      if (!Array.isArray(shape) || shape.length !== declared.length) {
        throw new ProgramError('input', `shape [${shape}] has rank ${shape?.length}, the program declares [${declared}]`, place);
      }
      declared.forEach((d, i) => {
        const n = shape[i];
        if (!Number.isSafeInteger(n) || n < 0) throw new ProgramError('input', `dim ${i} is ${n}`, place);
        if (typeof d === 'number') {
          if (d !== n) throw new ProgramError('input', `dim ${i} is ${n} where the program declares ${d}`, place);
        } else if (dims.has(d) && dims.get(d) !== n) {
          throw new ProgramError('input', `dim ${i} (${d}) is ${n} but ${d} is already ${dims.get(d)}`, place);
        } else {
          dims.set(d, n);
        }
      });
    };
    const known = [];
    for (const [b, buf] of program.buffers.entries()) {
      if (buf.role.kind === 'input') {
        const name = buf.role.name;
        known.push(name);
        const v = inputs[name];
        if (!v) throw new ProgramError('input', 'missing', `input ${name}`);
        bind(`input ${name}`, buf.shape, v.shape);
      } else if (buf.role.kind === 'param') {
        bind(`param ${buf.role.name}`, buf.shape, this.#fixed.get(b).shape);
      }
    }
    for (const name of Object.keys(inputs)) {
      if (!known.includes(name)) throw new ProgramError('input', `unknown (the inputs are ${known.join(', ')})`, `input ${name}`);
    }
    for (const d of program.dims) {
      if (!dims.has(d)) throw new ProgramError('input', 'bound by no input', `symbol ${d}`);
    }
    return dims;
  }

  #allocate(dims) {
    const program = this.#program;
    const device = this.#device;
    const limits = device.limits;
    const elements = program.buffers.map((buf, b) => {
      const fixed = this.#fixed.get(b);
      if (fixed) {
        const n = fixed.shape.reduce((x, y) => x * y, 1);
        return buf.storage === 'bytes' ? Math.ceil(n / 4) : n;
      }
      return evalCount(buf.elements, dims, bufferPlace(program, b));
    });
    for (const [b, n] of elements.entries()) {
      if (n * 4 > limits.maxBufferSize) {
        throw new ProgramError('limit', `needs ${n * 4} bytes but the maxBufferSize limit is ${limits.maxBufferSize}`, bufferPlace(program, b));
      }
    }
    const storage = (size, label) =>
      device.createBuffer({ label, size: Math.max(4, size), usage: USAGE.STORAGE | USAGE.COPY_DST | USAGE.COPY_SRC });
    // Every check before any buffer is made, so a refused binding leaves nothing behind.
    program.buffers.forEach((buf, b) => {
      const target = buf.role.kind === 'alias' ? program.buffers[buf.role.of] : buf;
      if (!target || target.role.kind === 'alias') {
        throw new ProgramError('format', `an alias of buffer ${buf.role.of}, which has no storage of its own`, bufferPlace(program, b));
      }
    });
    const words = new Uint32Array(Math.max(1, Math.ceil(program.dims.length / 4)) * 4);
    program.dims.forEach((d, i) => {
      const n = dims.get(d);
      if (n > 0xffffffff) throw new ProgramError('limit', `${n} is beyond the u32 index range`, `symbol ${d}`);
      words[i] = n;
    });
    const maxX = limits.maxComputeWorkgroupsPerDimension;
    const workgroups = program.kernels.map((k) => {
      const n = evalCount(k.workgroups, dims, kernelPlace(k));
      const x = Math.min(n, maxX);
      const y = x === 0 ? 0 : Math.ceil(n / x);
      if (y > maxX) {
        throw new ProgramError('limit', `${n} workgroups but the maxComputeWorkgroupsPerDimension limit is ${maxX}`, kernelPlace(k));
      }
      return [x, y];
    });
    const slotBytes = new Array(program.slots).fill(4);
    program.buffers.forEach((buf, b) => {
      const s = buf.role.kind === 'intermediate' ? buf.role.slot : null;
      if (s !== null && s !== undefined) slotBytes[s] = Math.max(slotBytes[s], elements[b] * 4);
    });
    // The bytes of the storage each buffer sees, then every binding checked against it.
    const bytesOf = program.buffers.map((buf, b) => {
      const root = buf.role.kind === 'alias' ? buf.role.of : b;
      const role = program.buffers[root].role;
      if (role.kind === 'intermediate' && role.slot !== null && role.slot !== undefined) return slotBytes[role.slot];
      if (this.#fixed.has(root)) return this.#fixed.get(root).buffer.size;
      return Math.max(4, elements[root] * 4);
    });
    for (const k of program.kernels) {
      for (const b of k.bindings) {
        // A range (a status word, a piece of a buffer too large for one binding) or the whole buffer.
        const whole = bytesOf[b.buffer];
        const offset = b.offset ?? 0;
        const size = b.size ?? whole - offset;
        const place = `${kernelPlace(k)} binding ${b.binding} (${b.name})`;
        if (!(size > 0 && offset % limits.minStorageBufferOffsetAlignment === 0 && offset + size <= whole)) {
          throw new ProgramError(
            'format',
            `binds ${size} bytes at offset ${offset} of a ${whole}-byte buffer (a range must lie inside it and start at a multiple of ${limits.minStorageBufferOffsetAlignment})`,
            place,
          );
        }
        if (size > limits.maxStorageBufferBindingSize) {
          throw new ProgramError('limit', `needs ${size} bytes but the maxStorageBufferBindingSize limit is ${limits.maxStorageBufferBindingSize}`, place);
        }
      }
    }
    const slots = slotBytes.map((n, s) => storage(n, `slot ${s}`));
    const owned = [...slots];
    const own = program.buffers.map((buf, b) => {
      const role = buf.role;
      if (role.kind === 'alias') return null;
      if (role.kind === 'intermediate' && role.slot !== null && role.slot !== undefined) return slots[role.slot];
      if (this.#fixed.has(b)) return this.#fixed.get(b).buffer;
      const made = storage(elements[b] * 4, `buffer ${b}`);
      owned.push(made);
      return made;
    });
    const buffers = program.buffers.map((buf, b) => own[buf.role.kind === 'alias' ? buf.role.of : b]);
    const uniform = device.createBuffer({ label: 'dims', size: words.byteLength, usage: USAGE.UNIFORM | USAGE.COPY_DST });
    device.queue.writeBuffer(uniform, 0, words);
    owned.push(uniform);
    const groups = program.kernels.map((k, i) => {
      const entries = [{ binding: 0, resource: { buffer: uniform } }];
      for (const b of k.bindings) {
        const buffer = buffers[b.buffer];
        const resource = b.offset === undefined && b.size === undefined ? { buffer } : { buffer, offset: b.offset ?? 0, size: b.size };
        entries.push({ binding: b.binding, resource });
      }
      return device.createBindGroup({ label: k.name, layout: this.#pipelines[i].layout, entries });
    });
    return { dims, elements, buffers, groups, workgroups, owned };
  }

  /**
   * Run on named inputs, each `{ shape: number[], data: ArrayLike<number> }` (for example an
   * Int32Array of token ids). Returns the outputs by name (in program order), each `{ shape,
   * dtype, data }` with `data` a Float32Array (floats), Int32Array (integers), Uint32Array
   * (bool as 0/1) or Uint8Array (bytes). `only` names the outputs to read back (all by default).
   * @param {Record<string, {shape: number[], data: ArrayLike<number>}>} inputs
   * @param {{only?: string[]}} [options]
   */
  run(inputs, options = {}) {
    // One run at a time per device: runs share the bound buffers and the device's error
    // scopes, so a second waits for the first.
    return serial(this.#device, () => this.#runOne(inputs, options));
  }

  async #runOne(inputs, options) {
    const device = this.#device;
    const dims = this.#bindDims(inputs);
    device.pushErrorScope('validation');
    device.pushErrorScope('out-of-memory');
    let out;
    let failure;
    try {
      out = await this.#runScoped(inputs, dims, options.only);
    } catch (e) {
      failure = e;
    }
    const oom = await device.popErrorScope();
    const invalid = await device.popErrorScope();
    const scoped = oom ?? invalid;
    if (scoped || failure) {
      // Storage that failed (or whose init failed) is not kept for the next run.
      for (const b of this.#bound?.owned ?? []) b.destroy();
      this.#bound = null;
    }
    // The device's own error says more than what it made fail downstream (a mapping).
    if (scoped) throw new ProgramError('device', scoped.message, 'the run');
    if (failure) throw typed(failure, 'the run');
    return out;
  }

  async #runScoped(inputs, dims, only) {
    const program = this.#program;
    const device = this.#device;
    const same = this.#bound && [...dims].every(([d, n]) => this.#bound.dims.get(d) === n);
    if (!same) {
      for (const b of this.#bound?.owned ?? []) b.destroy();
      this.#bound = null;
      this.#bound = this.#allocate(dims);
      await this.#dispatch(this.#bound, 'init', []);
    }
    const bound = this.#bound;
    for (const [b, buf] of program.buffers.entries()) {
      if (buf.role.kind !== 'input') continue;
      const { name } = buf.role;
      const v = inputs[name];
      const count = v.shape.reduce((x, y) => x * y, 1);
      const data = toWords(buf.storage, v.data, count, `input ${name}`);
      if (data.byteLength > 0) device.queue.writeBuffer(bound.buffers[b], 0, data);
    }
    const chosen = program.outputs.filter((o) => !only || only.includes(o.name));
    const read = await this.#dispatch(
      bound,
      'run',
      chosen.map((o) => o.buffer),
    );
    const out = {};
    chosen.forEach((o, i) => {
      const buf = program.buffers[o.buffer];
      const fixed = this.#fixed.get(o.buffer);
      const shape = fixed ? fixed.shape : buf.shape.map((d) => (typeof d === 'number' ? d : dims.get(d)));
      const count = shape.reduce((x, y) => x * y, 1);
      out[o.name] = { shape, dtype: buf.dtype, data: fromWords(buf.storage, read[i], count) };
    });
    return out;
  }

  /**
   * Dispatch one phase's kernels in one pass, copy the status words and the buffers `read`
   * out in the same submission, then check the status words: the first kernel (in dispatch
   * order) whose word is set failed, and its `failure` says why.
   */
  async #dispatch(bound, phase, read) {
    const program = this.#program;
    const device = this.#device;
    const status = program.buffers.findIndex((b) => b.role.kind === 'status');
    const encoder = device.createCommandEncoder();
    if (status >= 0) encoder.clearBuffer(bound.buffers[status]);
    const pass = encoder.beginComputePass();
    program.kernels.forEach((k, i) => {
      const [x, y] = bound.workgroups[i];
      if (k.phase !== phase || x === 0) return;
      pass.setPipeline(this.#pipelines[i].pipeline);
      pass.setBindGroup(0, bound.groups[i]);
      pass.dispatchWorkgroups(x, y, 1);
    });
    pass.end();
    const wanted = status >= 0 ? [status, ...read] : read;
    const staging = wanted.map((b) => {
      const size = Math.max(4, bound.elements[b] * 4);
      const s = device.createBuffer({ size, usage: USAGE.MAP_READ | USAGE.COPY_DST });
      encoder.copyBufferToBuffer(bound.buffers[b], 0, s, 0, size);
      return s;
    });
    device.queue.submit([encoder.finish()]);
    const data = await Promise.all(
      staging.map(async (s) => {
        await s.mapAsync(MAP_MODE_READ);
        const copy = s.getMappedRange().slice(0);
        s.unmap();
        s.destroy();
        return copy;
      }),
    );
    if (status >= 0) {
      const words = new Uint32Array(data.shift());
      const failed = program.kernels.find(
        (k) =>
          k.phase === phase &&
          k.bindings.some((b) => b.buffer === status && b.offset !== undefined && words[b.offset / 4] !== 0),
      );
      if (failed) {
        throw new ProgramError('kernel', failed.failure ?? 'a check failed (the kernel names no reason)', kernelPlace(failed));
      }
      if (words.some((w) => w !== 0)) {
        throw new ProgramError('kernel', 'a status word is set that no kernel of this phase owns', `the ${phase} dispatches`);
      }
    }
    return data;
  }

  /** Free the device buffers. */
  destroy() {
    for (const { buffer } of this.#fixed.values()) buffer.destroy();
    for (const b of this.#bound?.owned ?? []) b.destroy();
    this.#fixed.clear();
    this.#bound = null;
  }
}
