// Marking text by character ranges. The API's offsets are Unicode code
// points, half-open [start, end) (tandem.Highlights), so text is cut with
// Array.from, never by UTF-16 index, and marked by building elements around
// text nodes: no markup in a document is ever parsed.

const WORD_CHAR = /[\p{L}\p{M}\p{N}]/u;

// queryWords returns the words of a query, runs of letters, marks and
// digits, each with the range of characters it covers.
export function queryWords(text) {
  const cs = Array.from(text);
  const out = [];
  let start = -1;
  for (let i = 0; i <= cs.length; i++) {
    const inWord = i < cs.length && WORD_CHAR.test(cs[i]);
    if (inWord && start < 0) start = i;
    if (!inWord && start >= 0) {
      out.push({start, end: i, text: cs.slice(start, i).join('')});
      start = -1;
    }
  }
  return out;
}

// appendMarked appends the characters cs to node, each of the ranges in
// marks (BM25's matched words, in order, not overlapping) in a <mark>,
// and each of the ranges in lates (late-interaction matches, in order,
// not overlapping) in a span.late inside them.
export function appendMarked(node, cs, marks, lates) {
  let at = 0;
  for (const m of marks) {
    if (m.start < at || m.end > cs.length || m.start >= m.end) continue;
    appendLate(node, cs, at, m.start, lates);
    const mark = document.createElement('mark');
    appendLate(mark, cs, m.start, m.end, lates);
    node.append(mark);
    at = m.end;
  }
  appendLate(node, cs, at, cs.length, lates);
}

function appendLate(node, cs, a, b, lates) {
  for (const l of lates) {
    const s = Math.max(a, l.start);
    const e = Math.min(b, l.end);
    if (s >= e) continue;
    if (s > a) node.append(cs.slice(a, s).join(''));
    node.append(lateSpan(cs.slice(s, e).join(''), l));
    a = e;
  }
  if (a < b) node.append(cs.slice(a, b).join(''));
}

// lateSpan is one late-interaction match: its strength is the opacity of
// its colour, and its title says the score.
function lateSpan(text, l) {
  const span = document.createElement('span');
  span.className = 'late';
  span.textContent = text;
  span.dataset.doc = String(l.doc);
  span.dataset.score = String(l.score);
  span.style.setProperty('--w', strength(l.score).toFixed(3));
  span.title = l.title;
  return span;
}

// strength maps a match's score (an inner product of unit vectors) to 0..1.
export function strength(score) {
  return Math.max(0, Math.min(1, score));
}
