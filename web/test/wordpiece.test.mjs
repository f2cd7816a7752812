// The JS WordPiece tokenizer against Hugging Face tokenizers (the reference implementation) on
// all-MiniLM-L6-v2's vocabulary: fixtures/minilm/wordpiece_cases.json (accents, punctuation,
// ideographs, control characters, overlong words; made by make_wordpiece_cases.py) and the six
// sentences of the MiniLM parity fixture, padded as a batch.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { WordPiece } from '../src/wordpiece.js';

const fixtures = new URL('../../fixtures/minilm/', import.meta.url);
const read = (name) => fs.readFileSync(new URL(name, fixtures), 'utf8');
const tokenizer = new WordPiece(read('model_files/vocab.txt'));

test('every case gives the reference tokenizer ids', () => {
  const { cases } = JSON.parse(read('wordpiece_cases.json'));
  assert.ok(cases.length >= 20);
  for (const c of cases) assert.deepEqual(tokenizer.encode(c.text), c.ids, JSON.stringify(c.text));
});

test('the parity sentences batch as the reference pads them', () => {
  const t = JSON.parse(read('tokens.json'));
  const b = tokenizer.batch(t.sentences);
  assert.deepEqual(b.input_ids.shape, [t.sentences.length, t.seq_len]);
  assert.deepEqual([...b.input_ids.data], t.input_ids.flat());
  assert.deepEqual([...b.attention_mask.data], t.attention_mask.flat());
  assert.deepEqual([...b.token_type_ids.data], t.token_type_ids.flat());
});

test('a long text is cut to the maximum length with [SEP] last', () => {
  const ids = tokenizer.encode('word '.repeat(1000));
  assert.equal(ids.length, 256);
  assert.equal(ids[255], tokenizer.sep);
  assert.throws(() => new WordPiece('a\nb\n'), /vocab.txt has no \[CLS\]/);
});
