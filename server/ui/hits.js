// A hit as the page shows it: its title and text with BM25's matched
// words marked (the API's highlights, not the page's guess), its other
// fields, and each retriever's part of its score. Document text reaches
// the page only as text nodes.

import {paint} from './late.js';

// How many characters of a text field show when it has no fragment.
const SNIPPET_CHARS = 240;

// renderHit draws one hit, and returns it with its view (late.js). ctx
// names the title field (tf), the text field (xf) and the schema's
// order of fields.
export function renderHit(h, rank, ctx) {
  const li = document.createElement('li');
  li.className = 'hit';
  li.dataset.id = h.id;
  li.dataset.rank = String(rank);
  const f = h.fields || {};
  const hl = (h.highlights && h.highlights.fields) || {};
  const title = document.createElement('h2');
  title.className = 'title';
  const hasTitle = typeof f[ctx.tf] === 'string' && f[ctx.tf].trim() !== '';
  const pieces = [hasTitle ? wholePiece(title, f[ctx.tf], ctx.tf, hl[ctx.tf]) : wholePiece(title, h.id, '', null)];
  li.append(renderHead(h, rank, title), renderID(h.id));

  if (typeof f[ctx.xf] === 'string' && f[ctx.xf] !== '') {
    const p = document.createElement('p');
    p.className = 'snippet';
    pieces.push(...snippetPieces(p, f[ctx.xf], ctx.xf, hl[ctx.xf]));
    li.append(p);
  }
  const box = document.createElement('div');
  box.className = 'late-list';
  li.append(box);
  const fields = renderFields(f, new Set([ctx.tf, ctx.xf]), ctx.order);
  if (fields) li.append(fields);
  if (h.sources && h.sources.length > 0) {
    const sources = document.createElement('div');
    sources.className = 'sources';
    h.sources.forEach((s, i) => sources.append(renderSource(s, h.score, i)));
    li.append(sources);
  }
  const view = {pieces, box, late: (h.highlights && h.highlights.late && h.highlights.late[0]) || null};
  paint(view, null);
  return {li, view};
}

// renderHead is the hit's first line: rank, title and score.
function renderHead(h, rank, title) {
  const head = document.createElement('div');
  head.className = 'hit-head';
  const num = document.createElement('span');
  num.className = 'rank';
  num.textContent = String(rank);
  const score = document.createElement('span');
  score.className = 'score';
  score.textContent = 'score ' + fmt(h.score);
  head.append(num, title, score);
  return head;
}

function renderID(id) {
  const div = document.createElement('div');
  div.className = 'hit-id';
  const code = document.createElement('code');
  code.textContent = id;
  div.append('id ', code);
  return div;
}

// wholePiece shows a whole value, with the marks of its fragments.
function wholePiece(node, text, field, frags) {
  const marks = (frags || []).flatMap((fr) => (fr.marks || []).map((m) => ({start: fr.start + m.start, end: fr.start + m.end})));
  return {node, cs: Array.from(text), base: 0, field, marks};
}

// snippetPieces shows a text field by its fragments, "…" where the
// value goes on; without fragments, by its first SNIPPET_CHARS
// characters, cut at a space.
function snippetPieces(p, text, field, frags) {
  if (!frags || frags.length === 0) {
    const all = Array.from(text);
    const cs = leading(all, SNIPPET_CHARS);
    const span = fragSpan(0);
    p.append(span);
    if (cs.length < all.length) p.append('…');
    return [{node: span, cs, base: 0, field, marks: []}];
  }
  const n = Array.from(text).length;
  const out = [];
  if (frags[0].start > 0) p.append('… ');
  frags.forEach((fr, i) => {
    if (i > 0) p.append(' … ');
    const span = fragSpan(fr.start);
    p.append(span);
    out.push({node: span, cs: Array.from(fr.text), base: fr.start, field, marks: fr.marks || []});
  });
  if (frags[frags.length - 1].end < n) p.append(' …');
  return out;
}

function fragSpan(start) {
  const span = document.createElement('span');
  span.className = 'frag';
  span.dataset.start = String(start);
  return span;
}

// leading returns the first n characters of cs, cut at a space when one
// is near the end.
function leading(cs, n) {
  if (cs.length <= n) return cs;
  let cut = n;
  while (cut > n * 0.6 && !/\s/u.test(cs[cut])) cut--;
  return cs.slice(0, cut > n * 0.6 ? cut : n);
}

// renderFields lists the hit's other fields, in the schema's order.
function renderFields(f, shown, order) {
  const names = Object.keys(f).filter((n) => !shown.has(n));
  if (names.length === 0) return null;
  names.sort((a, b) => rankOf(order, a) - rankOf(order, b) || a.localeCompare(b));
  const dl = document.createElement('dl');
  dl.className = 'fields';
  for (const n of names) {
    const div = document.createElement('div');
    div.dataset.field = n;
    const dt = document.createElement('dt');
    dt.textContent = n;
    const dd = document.createElement('dd');
    dd.textContent = showValue(f[n]);
    div.append(dt, dd);
    dl.append(div);
  }
  return dl;
}

// renderSource draws one retriever's part: its rank, raw score and
// contribution, with a bar of contribution / hit score.
function renderSource(s, total, i) {
  const row = document.createElement('div');
  row.className = 'source c' + (i % 4);
  row.dataset.retriever = s.retriever;
  row.dataset.rank = String(s.rank);
  const name = document.createElement('span');
  name.className = 'source-name';
  name.textContent = s.retriever;
  const share = total > 0 ? Math.max(0, Math.min(1, s.contribution / total)) : (s.rank > 0 ? 1 : 0);
  const bar = document.createElement('span');
  bar.className = 'bar';
  bar.setAttribute('role', 'meter');
  bar.setAttribute('aria-valuemin', '0');
  bar.setAttribute('aria-valuemax', '100');
  bar.setAttribute('aria-valuenow', String(Math.round(share * 100)));
  bar.setAttribute('aria-label', `${s.retriever} share of the score`);
  const fill = document.createElement('span');
  fill.className = 'fill';
  fill.style.width = (share * 100).toFixed(1) + '%';
  bar.append(fill);
  const detail = document.createElement('span');
  detail.className = 'source-detail';
  detail.textContent = s.rank > 0
    ? `rank ${s.rank} · score ${fmt(s.score)} · contribution ${fmt(s.contribution)} (${Math.round(share * 100)}%)`
    : 'not in its list';
  row.append(name, bar, detail);
  return row;
}

function rankOf(order, n) {
  const i = order.indexOf(n);
  return i < 0 ? order.length : i;
}

function showValue(v) {
  if (Array.isArray(v)) return v.map(showValue).join(', ');
  if (v !== null && typeof v === 'object') return JSON.stringify(v);
  const s = String(v);
  return s.length > 160 ? s.slice(0, 160) + '…' : s;
}

function fmt(x) {
  if (typeof x !== 'number' || !Number.isFinite(x)) return String(x);
  const a = Math.abs(x);
  return a !== 0 && (a < 0.001 || a >= 1e6) ? x.toExponential(3) : x.toFixed(4).replace(/\.?0+$/, '') || '0';
}
