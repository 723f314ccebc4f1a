// Tandem's search page: plain JavaScript over the HTTP API (/v1/...), no
// framework and nothing fetched from elsewhere. Document text only ever
// reaches the page through textContent and text nodes, never innerHTML.
'use strict';

(() => {
  const KEY_STORE = 'tandem.apiKey';
  const COLLECTION_STORE = 'tandem.collection';

  // fusion.ParseMethod's names (fusion/method.go); "" is the server's
  // default (engine.DefaultFusion).
  const FUSIONS = [
    ['', 'server default'],
    ['rrf', 'rrf — reciprocal rank'],
    ['wrrf', 'wrrf — weighted rrf'],
    ['minmax', 'minmax — min-max scores'],
    ['zscore', 'zscore — standardised scores'],
    ['max', 'max — score / max'],
    ['dbsf', 'dbsf — distribution-based'],
    ['combsum', 'combsum'],
    ['combmnz', 'combmnz'],
  ];

  // Metadata field types (tandem.FieldType) and the operators each takes.
  const OPS = {
    keyword: ['eq', 'in', 'prefix', 'exists'],
    keywords: ['eq', 'in', 'prefix', 'exists'],
    number: ['eq', 'in', 'gte', 'lte', 'exists'],
    date: ['eq', 'gte', 'lte', 'exists'],
    bool: ['eq', 'exists'],
  };
  const OP_LABELS = {eq: '=', in: 'any of', gte: '>=', lte: '<=', prefix: 'prefix', exists: 'exists'};

  const $ = (id) => document.getElementById(id);
  const el = {
    keyForm: $('key-form'), key: $('api-key'), keyClear: $('api-key-clear'), keyState: $('api-key-state'),
    form: $('search-form'), collection: $('collection'), query: $('query'), mode: $('mode'),
    fusion: $('fusion'), k: $('k'), info: $('collection-info'),
    rows: $('filter-rows'), filterNone: $('filter-none'), filterAdd: $('filter-add'),
    raw: $('filter-raw'), vectors: $('vectors'), filterJSON: $('filter-json'),
    error: $('error'), errorCode: $('error-code'), errorMessage: $('error-message'),
    results: $('results'), summary: $('summary'), hits: $('hits'),
    prev: $('prev'), next: $('next'), pageInfo: $('page-info'),
    rowTemplate: $('filter-row-template'), search: $('search'),
  };

  const state = {
    info: null,      // GET /v1/collections/{name}
    offset: 0,
    seq: 0,          // requests started; a late answer to an older one is dropped
    done: 0,         // requests finished (#results[data-seq])
    infoSeq: 0,      // collection descriptions asked for; only the last one is shown
  };

  class APIError extends Error {
    constructor(code, message, status) {
      super(message);
      this.code = code;
      this.status = status;
    }
  }

  // api calls the server and returns the decoded JSON body, or throws an
  // APIError carrying the API's {"error":{"code","message"}}.
  async function api(method, path, body) {
    const headers = {Accept: 'application/json'};
    const key = localStorage.getItem(KEY_STORE);
    if (key) headers.Authorization = 'Bearer ' + key;
    const init = {method, headers};
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (e) {
      throw new APIError('network', 'Cannot reach the server: ' + e.message, 0);
    }
    const text = await resp.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (e) {
      data = null;
    }
    if (!resp.ok) {
      if (data && data.error && typeof data.error.message === 'string') {
        throw new APIError(data.error.code || 'error', data.error.message, resp.status);
      }
      const detail = text.trim().slice(0, 300);
      throw new APIError('http_' + resp.status, `HTTP ${resp.status} ${resp.statusText}${detail ? ': ' + detail : ''}`, resp.status);
    }
    if (data === null) {
      throw new APIError('bad_response', `${method} ${path}: the server's answer is not JSON`, resp.status);
    }
    return data;
  }

  function showError(err, source) {
    el.errorCode.textContent = err.code ? err.code + (err.status ? ` (${err.status})` : '') + ':' : 'error:';
    el.errorMessage.textContent = err.message;
    el.error.dataset.source = source;
    el.error.dataset.code = err.code || '';
    el.error.hidden = false;
    if (err.status === 401 || err.status === 403) {
      el.errorMessage.textContent += ' — enter an API key at the top of the page.';
    }
  }

  function clearError() {
    el.error.hidden = true;
    el.errorCode.textContent = '';
    el.errorMessage.textContent = '';
  }

  function option(value, label) {
    const o = document.createElement('option');
    o.value = value;
    o.textContent = label;
    return o;
  }

  // ---- collections -------------------------------------------------------

  async function loadCollections() {
    clearError();
    el.collection.replaceChildren();
    let list;
    try {
      list = (await api('GET', 'v1/collections')).collections || [];
    } catch (e) {
      showError(e, 'api');
      el.summary.textContent = 'Could not list the collections.';
      return;
    }
    if (list.length === 0) {
      el.summary.textContent = 'The server has no collections yet: create one with PUT /v1/collections/{name}, then POST documents to it.';
      setInfo(null);
      return;
    }
    for (const c of list) {
      el.collection.append(option(c.name, `${c.name} (${c.docs} docs)`));
    }
    const last = localStorage.getItem(COLLECTION_STORE);
    if (last && list.some((c) => c.name === last)) el.collection.value = last;
    await loadInfo();
  }

  // loadInfo describes the picked collection. body[data-info] names the
  // collection whose description is shown, and is empty while one loads.
  async function loadInfo() {
    const name = el.collection.value;
    const token = ++state.infoSeq;
    document.body.dataset.info = '';
    setInfo(null);
    if (!name) return;
    localStorage.setItem(COLLECTION_STORE, name);
    let info;
    try {
      info = await api('GET', 'v1/collections/' + encodeURIComponent(name));
    } catch (e) {
      if (token === state.infoSeq) showError(e, 'api');
      return;
    }
    if (token !== state.infoSeq) return; // the collection changed meanwhile
    setInfo(info);
    clearError();
    document.body.dataset.info = name;
  }

  function setInfo(info) {
    state.info = info;
    state.offset = 0;
    el.mode.replaceChildren();
    el.rows.replaceChildren();
    el.hits.replaceChildren();
    setPager(0, 0);
    el.results.dataset.state = 'empty';
    if (!info) {
      el.info.textContent = '';
      updateFilterPreview();
      return;
    }
    const rets = info.retrievers && info.retrievers.length ? info.retrievers : ['bm25'];
    if (rets.length > 1) el.mode.append(option('hybrid', 'hybrid — ' + rets.join(' + ')));
    for (const r of rets) el.mode.append(option(r, r));
    syncFusion();
    const external = ((info.schema && info.schema.models) || []).filter((m) => m.external).map((m) => m.name);
    el.info.textContent = `${info.docs} documents · retrievers: ${rets.join(', ')}` +
      (external.length ? ` · external models (bring query vectors): ${external.join(', ')}` : '');
    const meta = metaFields();
    el.filterNone.hidden = meta.length > 0;
    el.filterAdd.disabled = meta.length === 0;
    el.summary.textContent = 'Type a query and press Search.';
    updateFilterPreview();
  }

  function syncFusion() {
    const hybrid = el.mode.value === 'hybrid';
    el.fusion.disabled = !hybrid;
    el.fusion.title = hybrid ? '' : 'Fusion applies when several retrievers run (mode hybrid).';
  }

  // ---- schema helpers ----------------------------------------------------

  function schemaFields() {
    return (state.info && state.info.schema && state.info.schema.fields) || [];
  }

  function metaFields() {
    return schemaFields().filter((f) => Object.prototype.hasOwnProperty.call(OPS, f.type));
  }

  // titleField and textField pick the hit's heading and snippet: "title"
  // and "text" when the schema has them, else its first text fields.
  function titleField() {
    const text = schemaFields().filter((f) => f.type === 'text').map((f) => f.name);
    if (text.includes('title')) return 'title';
    return text.length > 1 ? text[0] : '';
  }

  function textField() {
    const text = schemaFields().filter((f) => f.type === 'text').map((f) => f.name);
    if (text.includes('text')) return 'text';
    const t = titleField();
    return text.find((n) => n !== t) || '';
  }

  // ---- filter builder ----------------------------------------------------

  function addRow() {
    const meta = metaFields();
    if (meta.length === 0) return;
    const row = el.rowTemplate.content.firstElementChild.cloneNode(true);
    const field = row.querySelector('.filter-field');
    for (const f of meta) field.append(option(f.name, `${f.name} (${f.type})`));
    field.addEventListener('change', () => { fillOps(row); updateFilterPreview(); });
    row.querySelector('.filter-op').addEventListener('change', () => { syncValue(row); updateFilterPreview(); });
    row.querySelector('.filter-value').addEventListener('input', updateFilterPreview);
    row.querySelector('.filter-bool').addEventListener('change', updateFilterPreview);
    row.querySelector('.filter-remove').addEventListener('click', () => { row.remove(); updateFilterPreview(); });
    el.rows.append(row);
    fillOps(row);
    updateFilterPreview();
    field.focus();
  }

  function fieldType(name) {
    const f = schemaFields().find((x) => x.name === name);
    return f ? f.type : '';
  }

  function fillOps(row) {
    const op = row.querySelector('.filter-op');
    const prev = op.value;
    const type = fieldType(row.querySelector('.filter-field').value);
    op.replaceChildren();
    for (const o of OPS[type] || []) op.append(option(o, OP_LABELS[o]));
    if ((OPS[type] || []).includes(prev)) op.value = prev;
    row.dataset.type = type;
    syncValue(row);
  }

  function syncValue(row) {
    const type = row.dataset.type;
    const op = row.querySelector('.filter-op').value;
    const input = row.querySelector('.filter-value');
    const bool = row.querySelector('.filter-bool');
    bool.hidden = !(type === 'bool' && op === 'eq');
    input.hidden = op === 'exists' || !bool.hidden;
    input.placeholder = op === 'in' ? 'values, comma-separated'
      : type === 'date' ? '2024-01-31 or RFC 3339'
        : type === 'number' ? 'a number' : 'value';
  }

  // rowValue converts one typed value for a field type; it throws naming
  // the row and the field.
  function rowValue(s, type, where) {
    s = s.trim();
    if (s === '') throw new APIError('filter', `${where}: enter a value`, 0);
    if (type === 'number') {
      const n = Number(s);
      if (!Number.isFinite(n)) throw new APIError('filter', `${where}: "${s}" is not a number`, 0);
      return n;
    }
    return s;
  }

  // buildFilter returns the filter JSON object of the rows and the raw box
  // ("and" of all), or null for none; it throws on a value it cannot use.
  function buildFilter() {
    const parts = [];
    el.rows.querySelectorAll('.filter-row').forEach((row, i) => {
      const name = row.querySelector('.filter-field').value;
      const type = row.dataset.type;
      const op = row.querySelector('.filter-op').value;
      const where = `Filter row ${i + 1} (${name})`;
      const raw = row.querySelector('.filter-value').value;
      let value;
      switch (op) {
        case 'exists':
          parts.push({exists: name});
          return;
        case 'eq':
          value = type === 'bool' ? row.querySelector('.filter-bool').value === 'true' : rowValue(raw, type, where);
          parts.push({term: {[name]: value}});
          return;
        case 'in': {
          const vals = raw.split(',').map((s) => s.trim()).filter((s) => s !== '');
          if (vals.length === 0) throw new APIError('filter', `${where}: enter one or more values, comma-separated`, 0);
          parts.push({terms: {[name]: vals.map((v) => rowValue(v, type, where))}});
          return;
        }
        case 'gte':
        case 'lte':
          parts.push({range: {[name]: {[op]: rowValue(raw, type, where)}}});
          return;
        case 'prefix':
          parts.push({prefix: {[name]: rowValue(raw, type, where)}});
          return;
      }
    });
    const raw = el.raw.value.trim();
    if (raw !== '') {
      try {
        parts.push(JSON.parse(raw));
      } catch (e) {
        throw new APIError('filter', 'Raw filter is not valid JSON: ' + e.message, 0);
      }
    }
    if (parts.length === 0) return null;
    return parts.length === 1 ? parts[0] : {and: parts};
  }

  function updateFilterPreview() {
    try {
      const f = buildFilter();
      el.filterJSON.textContent = f === null ? 'none' : JSON.stringify(f);
      el.filterJSON.classList.remove('invalid');
    } catch (e) {
      el.filterJSON.textContent = e.message;
      el.filterJSON.classList.add('invalid');
    }
  }

  // ---- search ------------------------------------------------------------

  function request() {
    const k = Number(el.k.value) || 10;
    const body = {text: el.query.value, k, offset: state.offset};
    const rets = (state.info && state.info.retrievers) || ['bm25'];
    if (el.mode.value === 'hybrid') {
      body.retrievers = rets.slice();
      if (el.fusion.value) body.fusion = el.fusion.value;
    } else if (el.mode.value) {
      body.retrievers = [el.mode.value];
    }
    const f = buildFilter();
    if (f !== null) body.filter = f;
    const v = el.vectors.value.trim();
    if (v !== '') {
      try {
        body.vectors = JSON.parse(v);
      } catch (e) {
        throw new APIError('vectors', 'Query vectors are not valid JSON: ' + e.message, 0);
      }
    }
    return body;
  }

  async function search() {
    const name = el.collection.value;
    if (!name) {
      showError(new APIError('collection', 'Pick a collection first.', 0), 'page');
      return;
    }
    let body;
    try {
      body = request();
    } catch (e) {
      showError(e, 'page');
      return;
    }
    const seq = ++state.seq;
    el.results.dataset.state = 'loading';
    el.results.setAttribute('aria-busy', 'true');
    el.search.disabled = true;
    let res = null;
    let err = null;
    try {
      res = await api('POST', `v1/collections/${encodeURIComponent(name)}/search`, body);
    } catch (e) {
      err = e;
    }
    if (seq !== state.seq) return; // a newer search is under way
    el.search.disabled = false;
    el.results.removeAttribute('aria-busy');
    if (err) {
      showError(err, 'api');
      el.hits.replaceChildren();
      el.summary.textContent = 'The search failed; nothing to show.';
      setPager(0, 0);
      el.results.dataset.state = 'error';
    } else {
      clearError();
      render(res, body);
      el.results.dataset.state = 'done';
    }
    el.results.dataset.seq = String(++state.done);
  }

  function setPager(count, k) {
    el.prev.disabled = state.offset === 0;
    el.next.disabled = !(k > 0 && count >= k);
    el.pageInfo.textContent = count > 0 ? `hits ${state.offset + 1}–${state.offset + count}` : '';
  }

  function render(res, body) {
    const hits = res.hits || [];
    const terms = queryTerms(body.text);
    const tf = titleField();
    const xf = textField();
    const shown = new Set([tf, xf]);
    const order = schemaFields().map((f) => f.name);
    el.hits.replaceChildren(...hits.map((h, i) => renderHit(h, body.offset + i + 1, terms, tf, xf, shown, order)));
    const rets = res.retrievers || body.retrievers || [];
    const how = rets.length > 1 ? `${rets.join(' + ')} fused with ${res.fusion || 'the default fusion'}` : rets.join('');
    const took = typeof res.took_ms === 'number' ? ` · ${res.took_ms.toFixed(2)} ms` : '';
    if (hits.length === 0) {
      el.summary.textContent = body.offset > 0 ? `No more hits after ${body.offset}.` : `No hits (${how}${took}).`;
    } else {
      el.summary.textContent = `Hits ${body.offset + 1}–${body.offset + hits.length} · ${how}${took}`;
    }
    setPager(hits.length, body.k);
  }

  function renderHit(h, rank, terms, tf, xf, shown, order) {
    const li = document.createElement('li');
    li.className = 'hit';
    li.dataset.id = h.id;
    li.dataset.rank = String(rank);
    const f = h.fields || {};

    const head = document.createElement('div');
    head.className = 'hit-head';
    const num = document.createElement('span');
    num.className = 'rank';
    num.textContent = String(rank);
    const title = document.createElement('h2');
    title.className = 'title';
    const t = typeof f[tf] === 'string' && f[tf].trim() !== '' ? f[tf] : h.id;
    highlight(title, t, terms);
    const score = document.createElement('span');
    score.className = 'score';
    score.textContent = 'score ' + fmt(h.score);
    head.append(num, title, score);

    const id = document.createElement('div');
    id.className = 'hit-id';
    const code = document.createElement('code');
    code.textContent = h.id;
    id.append('id ', code);
    li.append(head, id);

    if (typeof f[xf] === 'string' && f[xf] !== '') {
      const p = document.createElement('p');
      p.className = 'snippet';
      highlight(p, snippet(f[xf], 240), terms);
      li.append(p);
    }

    const names = Object.keys(f).filter((n) => !shown.has(n));
    names.sort((a, b) => rankOf(order, a) - rankOf(order, b) || a.localeCompare(b));
    if (names.length > 0) {
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
      li.append(dl);
    }

    if (h.sources && h.sources.length > 0) {
      const box = document.createElement('div');
      box.className = 'sources';
      h.sources.forEach((s, i) => box.append(renderSource(s, h.score, i)));
      li.append(box);
    }
    return li;
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

  // snippet cuts text to about n characters at a word boundary.
  function snippet(text, n) {
    const s = text.replace(/\s+/g, ' ').trim();
    if (s.length <= n) return s;
    let cut = s.lastIndexOf(' ', n);
    if (cut < n * 0.6) cut = n;
    return s.slice(0, cut) + '…';
  }

  // queryTerms returns the query's words, lower case, with a plural "s"
  // dropped so that "cells" marks "cell" too.
  function queryTerms(text) {
    const words = (text || '').toLowerCase().match(/[\p{L}\p{N}]+/gu) || [];
    const out = new Set();
    for (let w of words) {
      if (w.length > 3 && w.endsWith('s') && !w.endsWith('ss')) w = w.slice(0, -1);
      if (w.length >= 2) out.add(w);
    }
    return [...out].sort((a, b) => b.length - a.length);
  }

  // highlight appends text to node as text nodes, with each word that
  // starts with a query term in a <mark>. No HTML is parsed.
  function highlight(node, text, terms) {
    node.replaceChildren();
    if (terms.length === 0) {
      node.append(text);
      return;
    }
    const esc = terms.map((t) => t.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
    const re = new RegExp(`(?<![\\p{L}\\p{N}])(?:${esc.join('|')})[\\p{L}\\p{N}]*`, 'giu');
    let last = 0;
    for (const m of text.matchAll(re)) {
      if (m.index > last) node.append(text.slice(last, m.index));
      const mark = document.createElement('mark');
      mark.textContent = m[0];
      node.append(mark);
      last = m.index + m[0].length;
    }
    if (last < text.length) node.append(text.slice(last));
  }

  // ---- wiring ------------------------------------------------------------

  el.form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    state.offset = 0;
    search();
  });
  el.next.addEventListener('click', () => {
    state.offset += Number(el.k.value) || 10;
    search();
  });
  el.prev.addEventListener('click', () => {
    state.offset = Math.max(0, state.offset - (Number(el.k.value) || 10));
    search();
  });
  el.collection.addEventListener('change', loadInfo);
  el.mode.addEventListener('change', syncFusion);
  el.filterAdd.addEventListener('click', addRow);
  el.raw.addEventListener('input', updateFilterPreview);

  el.key.value = localStorage.getItem(KEY_STORE) || '';
  el.keyState.textContent = el.key.value ? 'saved' : '';
  el.keyForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const k = el.key.value.trim();
    if (k) localStorage.setItem(KEY_STORE, k);
    else localStorage.removeItem(KEY_STORE);
    el.keyState.textContent = k ? 'saved' : 'cleared';
    loadCollections();
  });
  el.keyClear.addEventListener('click', () => {
    el.key.value = '';
    localStorage.removeItem(KEY_STORE);
    el.keyState.textContent = 'cleared';
    loadCollections();
  });

  for (const [v, label] of FUSIONS) el.fusion.append(option(v, label));
  // A bug in this page shows as a message too, never as a page that
  // silently stops.
  window.addEventListener('error', (ev) => {
    showError(new APIError('page_error', 'The page failed: ' + ev.message, 0), 'page');
  });
  window.addEventListener('unhandledrejection', (ev) => {
    const r = ev.reason;
    showError(new APIError('page_error', 'The page failed: ' + String((r && r.message) || r), 0), 'page');
  });
  loadCollections();
})();
