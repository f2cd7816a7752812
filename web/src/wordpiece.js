// BERT's lower-casing WordPiece tokenizer (the one all-MiniLM-L6-v2 ships), from its vocab.txt:
// the steps of Hugging Face tokenizers' BertNormalizer, BertPreTokenizer, WordPiece model and
// [CLS] ... [SEP] template, in that order, so that the ids match the reference tokenizer's
// (checked against it in web/test/wordpiece.test.mjs, fixtures/minilm/wordpiece_cases.json).

/** Chinese, Japanese and Korean ideographs: each becomes a word of its own. */
const CJK = [
  [0x4e00, 0x9fff],
  [0x3400, 0x4dbf],
  [0x20000, 0x2a6df],
  [0x2a700, 0x2b73f],
  [0x2b740, 0x2b81f],
  [0x2b920, 0x2ceaf],
  [0xf900, 0xfaff],
  [0x2f800, 0x2fa1f],
];

const isCjk = (cp) => CJK.some(([a, b]) => cp >= a && cp <= b);
const isWhitespace = (c) => /\s/u.test(c);
const isControl = (c) => c !== '\t' && c !== '\n' && c !== '\r' && /\p{C}/u.test(c);
// ASCII punctuation (which includes $ + < = > ^ ` | ~) or any Unicode punctuation category.
const isPunctuation = (c) => /[!-/:-@[-`{-~]/.test(c) || /\p{P}/u.test(c);

export class WordPiece {
  /**
   * @param {string} vocabText vocab.txt: one token per line, the line number its id
   * @param {{maxLength?: number, maxWordChars?: number}} [options]
   */
  constructor(vocabText, { maxLength = 256, maxWordChars = 100 } = {}) {
    this.vocab = new Map();
    vocabText.split('\n').forEach((line, i) => {
      const token = line.replace(/\r$/, '');
      if (token && !this.vocab.has(token)) this.vocab.set(token, i);
    });
    const special = (t) => {
      const id = this.vocab.get(t);
      if (id === undefined) throw new Error(`vocab.txt has no ${t}`);
      return id;
    };
    this.cls = special('[CLS]');
    this.sep = special('[SEP]');
    this.pad = special('[PAD]');
    this.unk = special('[UNK]');
    this.maxLength = maxLength;
    this.maxWordChars = maxWordChars;
  }

  /** The normalized text: control characters dropped, whitespace as spaces, ideographs spaced, accents stripped, lower case. */
  normalize(text) {
    let out = '';
    for (const c of text) {
      const cp = c.codePointAt(0);
      if (cp === 0 || cp === 0xfffd || isControl(c)) continue;
      if (isWhitespace(c)) out += ' ';
      else if (isCjk(cp)) out += ` ${c} `;
      else out += c;
    }
    return out.normalize('NFD').replace(/\p{Mn}/gu, '').toLowerCase();
  }

  /** Words: split at whitespace, each punctuation character a word of its own. */
  words(normalized) {
    const words = [];
    let word = '';
    for (const c of normalized) {
      if (isWhitespace(c) || isPunctuation(c)) {
        if (word) words.push(word);
        word = '';
        if (!isWhitespace(c)) words.push(c);
      } else {
        word += c;
      }
    }
    if (word) words.push(word);
    return words;
  }

  /** Greedy longest-match-first pieces of one word; a word with an unknown part is [UNK]. */
  pieces(word) {
    const chars = [...word];
    if (chars.length > this.maxWordChars) return [this.unk];
    const ids = [];
    let start = 0;
    while (start < chars.length) {
      let end = chars.length;
      let found;
      while (start < end) {
        const piece = (start > 0 ? '##' : '') + chars.slice(start, end).join('');
        found = this.vocab.get(piece);
        if (found !== undefined) break;
        end--;
      }
      if (found === undefined) return [this.unk];
      ids.push(found);
      start = end;
    }
    return ids;
  }

  /** The ids of one text: [CLS], its pieces (cut to fit `maxLength`), [SEP]. */
  encode(text) {
    const ids = this.words(this.normalize(text)).flatMap((w) => this.pieces(w));
    return [this.cls, ...ids.slice(0, Math.max(0, this.maxLength - 2)), this.sep];
  }

  /**
   * A batch as BERT's three inputs, padded on the right to the longest: `input_ids`,
   * `token_type_ids` (all 0) and `attention_mask` (1 for tokens, 0 for padding), each
   * `{ shape: [batch, seq], data }`, ready for `Program.run`.
   */
  batch(texts) {
    const encoded = texts.map((t) => this.encode(t));
    const seq = Math.max(...encoded.map((e) => e.length));
    const n = texts.length * seq;
    const ids = new Int32Array(n).fill(this.pad);
    const mask = new Float32Array(n);
    encoded.forEach((e, b) => {
      ids.set(e, b * seq);
      mask.fill(1, b * seq, b * seq + e.length);
    });
    const shape = [texts.length, seq];
    return {
      input_ids: { shape, data: ids },
      token_type_ids: { shape, data: new Int32Array(n) },
      attention_mask: { shape, data: mask },
    };
  }
}
