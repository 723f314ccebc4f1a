// The late-interaction explanation. The query's words are shown as chips;
// hovering, focusing or selecting one shows, in each hit, the document
// tokens its query tokens matched (tandem.LateMatches: each query token's
// best document token and that inner product), marked where the hit's
// text is shown and listed with their scores, since the best match may lie
// outside the fragments shown.

import {appendMarked, strength} from './marks.js';

// A hit's view is what paint redraws: pieces, the stretches of its text
// fields the page shows, each {node, cs, base, field, marks} (cs its
// characters, base the value's offset of the first, marks BM25's in
// piece coordinates); box, the element for the match list; and late, the
// hit's first late-interaction retriever's matches (or none).

// wordMatches returns the matches of the query tokens that lie in word,
// those whose document token is a word of the document's text: special
// tokens, prefixes, markers, [MASK] and unknown tokens are not shown.
export function wordMatches(late, word) {
  if (!late || !word) return [];
  return (late.tokens || []).filter((t) => t.query.kind === 'text' &&
    t.query.start >= word.start && t.query.end <= word.end &&
    t.doc && t.doc.kind === 'text');
}

// paint redraws a hit's pieces with word's matches marked, and its list.
export function paint(view, word) {
  const ms = wordMatches(view.late, word);
  for (const p of view.pieces) {
    p.node.replaceChildren();
    appendMarked(p.node, p.cs, p.marks, pieceRanges(ms, p));
  }
  paintList(view.box, word, ms);
}

// pieceRanges places matches in a piece's characters: one range per
// document token (the best score when several query tokens chose it), in
// order.
function pieceRanges(ms, p) {
  const byDoc = new Map();
  for (const m of ms) {
    if (m.doc.field !== p.field) continue;
    const start = Math.max(0, m.doc.start - p.base);
    const end = Math.min(p.cs.length, m.doc.end - p.base);
    if (start >= end) continue;
    const prev = byDoc.get(m.doc.index);
    if (!prev || m.score > prev.score) {
      byDoc.set(m.doc.index, {start, end, score: m.score, doc: m.doc.index, title: matchTitle(m)});
    }
  }
  return [...byDoc.values()].sort((a, b) => a.start - b.start);
}

function matchTitle(m) {
  return `query “${m.query.text}” matched “${m.doc.text}” in ${m.doc.field}: ${m.score.toFixed(3)}`;
}

// paintList lists word's matches in a hit: each document word, its field
// and score, with a bar of the score.
function paintList(box, word, ms) {
  box.replaceChildren();
  box.hidden = !word;
  if (!word) return;
  const head = document.createElement('span');
  head.className = 'late-head';
  head.textContent = ms.length ? `“${word.text}” matched:` : `“${word.text}” matched no word of this document.`;
  box.append(head);
  // A word the model cut into pieces says which piece matched what.
  const pieces = ms.some((m) => m.query.text !== word.text);
  for (const m of ms) box.append(matchItem(m, pieces));
}

function matchItem(m, pieces) {
  const item = document.createElement('span');
  item.className = 'late-item';
  item.dataset.doc = String(m.doc.index);
  item.dataset.score = String(m.score);
  item.title = matchTitle(m);
  if (pieces) {
    const q = document.createElement('span');
    q.className = 'late-q';
    q.textContent = m.query.text + ' →';
    item.append(q);
  }
  const word = document.createElement('span');
  word.className = 'late-word';
  word.textContent = m.doc.text;
  const bar = document.createElement('span');
  bar.className = 'late-bar';
  bar.setAttribute('aria-hidden', 'true');
  const fill = document.createElement('span');
  fill.style.width = (strength(m.score) * 100).toFixed(1) + '%';
  bar.append(fill);
  const num = document.createElement('span');
  num.className = 'late-score';
  num.textContent = `${m.score.toFixed(2)} · ${m.doc.field}`;
  item.append(word, bar, num);
  return item;
}

// Chips shows the query's words as buttons; show(word or null) is called
// whenever the word to explain changes. A word is shown while the pointer
// is over its chip or the chip has focus, and stays shown once selected
// (clicked, or Enter or Space on the focused chip) until selected again.
export class Chips {
  constructor(box, show) {
    this.box = box;
    this.show = show;
    this.words = [];
    this.selected = -1;
  }

  // set shows words as chips, keeping the selection when they are the
  // same words as before.
  set(words) {
    const same = words.length === this.words.length && words.every((w, i) => w.text === this.words[i].text);
    if (!same) this.selected = -1;
    this.words = words;
    this.box.replaceChildren(...words.map((w, i) => this.chip(w, i)));
    this.preview(this.selected);
  }

  chip(w, i) {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'qword';
    b.dataset.word = String(i);
    b.textContent = w.text;
    b.setAttribute('aria-pressed', String(i === this.selected));
    b.addEventListener('mouseenter', () => this.preview(i));
    b.addEventListener('mouseleave', () => this.preview(this.selected));
    b.addEventListener('focus', () => this.preview(i));
    b.addEventListener('blur', () => this.preview(this.selected));
    b.addEventListener('click', () => this.toggle(i));
    return b;
  }

  toggle(i) {
    this.selected = this.selected === i ? -1 : i;
    for (const b of this.box.querySelectorAll('.qword')) {
      b.setAttribute('aria-pressed', String(Number(b.dataset.word) === this.selected));
    }
    this.preview(i);
  }

  preview(i) {
    const w = i >= 0 ? this.words[i] : null;
    this.box.dataset.active = w ? String(i) : '';
    for (const b of this.box.querySelectorAll('.qword')) b.classList.toggle('active', Number(b.dataset.word) === i);
    this.show(w || null);
  }
}
