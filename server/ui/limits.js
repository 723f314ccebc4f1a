// The server's limits on a search, as a collection's description states
// them (GET /v1/collections/{name}, limits), and what keeps a request
// within them.

// DEFAULT_LIMITS, the server's defaults, stand in for a description
// without limits.
const DEFAULT_LIMITS = {max_k: 1000, max_query: 4096, max_filter_clauses: 1024, max_filter_depth: 32, max_facets: 32};

// serverLimits are the limits a collection's description states.
export function serverLimits(info) {
  return {...DEFAULT_LIMITS, ...((info && info.limits) || {})};
}

// cutUTF8 returns the longest prefix of text, whole characters, that is
// at most max bytes of UTF-8: the server bounds query text in bytes.
export function cutUTF8(text, max) {
  const enc = new TextEncoder();
  if (enc.encode(text).length <= max) return text;
  let n = 0;
  let out = '';
  for (const c of text) {
    n += enc.encode(c).length;
    if (n > max) break;
    out += c;
  }
  return out;
}

// filterSize counts a filter's clauses and levels as package filter does
// (filter.Limits): each term, range, prefix and exists, each value of a
// terms list and each empty and/or is a clause; and, or and not each add
// a level.
function filterSize(f) {
  const [op] = f && typeof f === 'object' ? Object.keys(f) : [];
  const v = op === undefined ? undefined : f[op];
  if ((op === 'and' || op === 'or') && Array.isArray(v) && v.length > 0) {
    const parts = v.map(filterSize);
    return {clauses: parts.reduce((n, p) => n + p.clauses, 0), depth: 1 + Math.max(...parts.map((p) => p.depth))};
  }
  if (op === 'not') {
    const p = filterSize(v);
    return {clauses: p.clauses, depth: p.depth + 1};
  }
  if (op === 'terms' && v && typeof v === 'object') {
    const vals = Object.values(v)[0];
    return {clauses: Array.isArray(vals) ? vals.length : 1, depth: 1};
  }
  return {clauses: 1, depth: 1};
}

// filterOverLimits says how a filter exceeds the limits, naming the flag,
// or returns '' when it is within them.
export function filterOverLimits(f, lim) {
  const n = filterSize(f);
  if (n.clauses > lim.max_filter_clauses) {
    return `Filter: ${n.clauses} clauses, over the server's limit of ${lim.max_filter_clauses} (--max-filter-clauses)`;
  }
  if (n.depth > lim.max_filter_depth) {
    return `Filter: nested ${n.depth} levels, over the server's limit of ${lim.max_filter_depth} (--max-filter-depth)`;
  }
  return '';
}
