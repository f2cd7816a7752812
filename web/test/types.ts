// Compiled (not run) by `tsc -p test/tsconfig.json`: the published types describe the API as
// the tests and the demo use it.
import { Program, ProgramError, WordPiece, openProgram, urlFolder, type Output } from '../src/index.js';
import { dirFolder } from '../src/node.js';

export async function example(gpu: GPU, vocab: string): Promise<number> {
  const program: Program = await openProgram(gpu, urlFolder('https://example.com/minilm/'));
  const feeds = new WordPiece(vocab).batch(['a sentence', 'another one']);
  const out: Record<string, Output> = await program.run(feeds, { only: ['sentence_embedding'] });
  const local = dirFolder('target/web/minilm');
  try {
    await openProgram(gpu, local);
  } catch (e) {
    if (e instanceof ProgramError && e.kind === 'limit') return -1;
  }
  return out.sentence_embedding.data.length + program.pipelineCount;
}
